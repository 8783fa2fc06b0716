"""What ``sharedos run`` prints from others (an upstream's tool names, the names a harness
called, its stderr) cannot drive the operator's terminal: control characters are spelled."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

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


def test_dry_run_spells_bidi_and_invisible_characters_of_an_upstream(tmp_path: Path) -> None:
    # the upstream report ``sharedos run`` prints on stderr spelled control characters only: a
    # right-to-left override in the name the upstream gave itself reordered the rest of the
    # line (to a bidi terminal); a zero-width space, a filler or a line separator hid
    hidden = "\u202e\u2066\u200b\u2028\u3164"
    served = tmp_path / "served"
    served.mkdir()
    tools = served / "tools.json"
    tools.write_text(
        json.dumps(
            [
                {"name": "ok", "inputSchema": {"type": "object"}},
                {"name": f"bad{hidden}name", "inputSchema": {"type": "object"}},
            ]
        ),
        encoding="utf-8",
    )
    host = tmp_path / "conf" / "host.toml"
    host.parent.mkdir()
    args = [str(DATA / "hostile_server.py"), "--tools", str(tools)]
    args += ["--server-name", f"files{hidden}-server"]
    host.write_text(
        f"[harness.claude-code]\n[upstream.h]\ncommand = {json.dumps(PY)}\n"
        f'args = {json.dumps(args)}\nroots = [{{ path = "{served}" }}]\npinning = "off"\n',
        encoding="utf-8",
    )
    argv = [SHAREDOS, "run", "--host-config", str(host), "--principal", "alice"]
    argv += ["--policy", "dev-open", "--dry-run", "--evidence", str(tmp_path / "ev.sqlite")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    shown = proc.stdout + proc.stderr
    assert not set(hidden) & set(shown), ascii(shown)
    assert "[files\\u202e\\u2066\\u200b\\u2028\\u3164-server 1]" in proc.stderr
    assert "bad\\u202e\\u2066\\u200b\\u2028\\u3164name" in proc.stderr


def test_a_streamed_line_spells_bidi_and_invisible_characters_and_keeps_tabs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sharedos.cli.run import stream_printer

    stream_printer("codex")("stdout", "rm -rf /\u202e\u2066 ; echo \u200bsafe\tdone")
    assert capsys.readouterr().err == "[codex] rm -rf /\\u202e\\u2066 ; echo \\u200bsafe\tdone\n"
