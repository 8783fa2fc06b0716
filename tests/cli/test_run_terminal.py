"""What ``sharedos run`` prints from others (an upstream's tool names, the names a harness
called, its stderr) cannot drive the operator's terminal: control characters are spelled."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

from sharedos.cli.run import summary_lines
from tests.upstream.conftest import DATA, PY

SHAREDOS = str(Path(PY).parent / "sharedos")
ESCAPES = "\x1b[2J\x1b]0;owned\x07\r"


def test_dry_run_spells_an_upstream_tool_name_with_terminal_escapes(tmp_path: Path) -> None:
    # before: the refused name reached the terminal raw: the screen cleared, the window retitled
    served = tmp_path / "served"
    served.mkdir()
    tools = served / "tools.json"
    tools.write_text(
        json.dumps(
            [
                {"name": "ok", "inputSchema": {"type": "object"}},
                {"name": f"bad{ESCAPES}name", "inputSchema": {"type": "object"}},
            ]
        ),
        encoding="utf-8",
    )
    host = tmp_path / "conf" / "host.toml"
    host.parent.mkdir()
    args = [str(DATA / "hostile_server.py"), "--tools", str(tools)]
    host.write_text(
        f"[harness.claude-code]\n[upstream.h]\ncommand = {json.dumps(PY)}\n"
        f'args = {json.dumps(args)}\nroots = [{{ path = "{served}" }}]\npinning = "off"\n',
        encoding="utf-8",
    )
    argv = [SHAREDOS, "run", "--host-config", str(host), "--principal", "alice"]
    argv += ["--policy", "dev-open", "--dry-run", "--evidence", str(tmp_path / "ev.sqlite")]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr and "\x07" not in proc.stdout + proc.stderr
    assert "\r" not in proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("  h.bad"))
    assert line.startswith("  h.bad\\x1b[2J\\x1b]0;owned\\x07\\x0dname ")


def test_the_evidence_summary_spells_a_recorded_tool_name() -> None:
    # a tool name is recorded exactly as the harness sent it (never narrowed)
    record = SimpleNamespace(
        seq=3, tool=f"files.read{ESCAPES}", resource=None, outcome="denied", reason="unknown_tool"
    )
    lines = summary_lines([record], [{"alias": f"mcp__x{ESCAPES}"}])
    assert all("\x1b" not in line and "\r" not in line for line in lines)
    assert lines[-1] == (
        "  #3 files.read\\x1b[2J\\x1b]0;owned\\x07\\x0d: denied (unknown_tool); "
        "the model called it mcp__x\\x1b[2J\\x1b]0;owned\\x07\\x0d"
    )
