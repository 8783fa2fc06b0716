"""The relay secret of a stdio turn never reaches ``sharedos run``'s output.

A relayed stdio bridge reaches its host with a per-turn secret kept in the turn
file. In an open run the harness is not confined and can read that file (its
MCP configuration names it); a harness that prints what it read (a debug log, a
shell command of the model's) put the secret on ``sharedos run``'s stderr,
which scrubbed the HTTP turn's bearer token but not this one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.upstream.conftest import PY

SHAREDOS = str(Path(PY).parent / "sharedos")

#: a "harness" that reads the turn file its MCP configuration names and prints it whole
PRINTS_TURN_FILE = """
import json, sys
argv = sys.argv[1:]
if "--version" in argv:
    print("2.1.0 (Claude Code)")
    sys.exit(0)
config = json.loads(open(argv[argv.index("--mcp-config") + 1]).read())
for server in config["mcpServers"].values():
    args = server["args"]
    turn = args[args.index("--turn") + 1]
    print("turn file:", open(turn).read(), flush=True)
"""


def test_an_open_stdio_runs_relay_secret_is_scrubbed_from_the_harness_output(
    tmp_path: Path,
) -> None:
    script = tmp_path / "harness.py"
    script.write_text(PRINTS_TURN_FILE, encoding="utf-8")
    host = tmp_path / "host.toml"
    host.write_text(
        f'[harness.claude-code]\ntransport = "stdio"\ncommand = {json.dumps([sys.executable, str(script)])}\n',
        encoding="utf-8",
    )
    rules = tmp_path / "rules.sos"
    rules.write_text(
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'permit read on "/public/**"\n'
        'toolpolicy run { mode open\n managed files.*\n harness_local "shell" }\n',
        encoding="utf-8",
    )
    (tmp_path / "sandbox").mkdir()
    proc = subprocess.run(
        [
            SHAREDOS,
            "run",
            "--host-config",
            str(host),
            "--harness",
            "claude-code",
            "--rules",
            str(rules),
            "--policy",
            "run",
            "--principal",
            "bob",
            "--sandbox",
            str(tmp_path / "sandbox"),
            "--evidence",
            str(tmp_path / "evidence.sqlite"),
            "--workdir",
            str(tmp_path / "work"),
            "--timeout",
            "60",
            "do it",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=os.environ.copy(),
        cwd=tmp_path,
    )
    out = proc.stdout + proc.stderr
    assert "turn file:" in out, out[-3000:]  # the harness did print the file
    assert '"relay"' in out, out[-3000:]
    printed = out[out.index("turn file:") :]
    assert '"secret": "[redacted]"' in printed, printed[:2000]
