"""``sharedos run`` when the disk under its run directory is full.

Before, the harness's own configuration for the turn (Claude Code's MCP
file, which holds the turn's bearer token) was written into the run
directory unchecked: on a full disk the run ended in a Python traceback
(exit 1, "nothing ran" by the documented codes, though the turn had opened),
and with ``--workdir`` the cut file holding the token stayed behind. Now it
is one line, the harness could not be started (exit 4), nothing of the turn
is left in the run directory, and the turn is sealed with no call in it.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.mounts import MountFn, fill
from tests.upstream.conftest import PY

SHAREDOS = str(Path(PY).parent / "sharedos")
RULES = """
namespace files
requirement files.write { action write; resource path(args.path) }
permit write on "/home/{context.principal}/**"
toolpolicy run { mode open
 managed files.*
}
"""


@pytest.mark.harness("claude-code")
@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_a_full_run_directory_is_one_line_and_nothing_runs(
    tmp_path: Path, tmpfs: MountFn, transport: str
) -> None:
    home = tmp_path / "sandbox" / "home" / "alice"
    home.mkdir(parents=True)
    host = tmp_path / "host.toml"
    host.write_text(f'[harness.claude-code]\ntransport = "{transport}"\n', encoding="utf-8")
    (tmp_path / "rules.sos").write_text(RULES, encoding="utf-8")
    plan = tmp_path / "plan.json"
    call = {"tool": "files.write", "arguments": {"path": "/home/alice/f.txt", "content": "x"}}
    plan.write_text(json.dumps([call]), encoding="utf-8")
    workdir = tmpfs("1m")
    fill(workdir)
    db = tmp_path / "evidence.sqlite"
    argv = [
        SHAREDOS, "run", "--host-config", str(host), "--harness", "claude-code",
        "--rules", str(tmp_path / "rules.sos"), "--policy", "run", "--principal", "alice",
        "--sandbox", str(tmp_path / "sandbox"), "--evidence", str(db),
        "--plan", str(plan), "--timeout", "120", "--workdir", str(workdir), "write",
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 4, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if "No space left on device" in ln]
    assert line.startswith("error: claude-code: cannot write") and str(workdir) in line
    assert [p.name for p in workdir.iterdir()] == ["filler"]  # no cut file holding the token
    assert not any(home.iterdir())
    ro = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert ro.execute("SELECT count(*) FROM attempts").fetchone()[0] == 0
        # over stdio the turn's file cannot be written, so its transport never opened and
        # nothing is on record (264514d: a turn whose transport fails writes no record);
        # over HTTP the turn opened, then the harness's config could not be written: sealed
        seals = ro.execute("SELECT count(*) FROM seals").fetchone()[0]
        assert seals == (0 if transport == "stdio" else 1)
    finally:
        ro.close()
