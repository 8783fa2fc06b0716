"""``sharedos run`` under a strict run policy: confined, or refused (exit 5), or ``--unconfined``."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.upstream.conftest import PY

SHAREDOS = str(Path(PY).parent / "sharedos")

RULES = """
namespace files
requirement files.read { action read; resource path(args.path) }
permit read on "/public/**"
toolpolicy tight { mode strict
 managed files.*
 harness_local "shell.bounded" }
"""


def _setup(tmp: Path) -> list[str]:
    (tmp / "sandbox" / "public").mkdir(parents=True)
    (tmp / "sandbox" / "public" / "a.txt").write_text("hello\n")
    (tmp / "rules.sos").write_text(RULES)
    (tmp / "plan.json").write_text(
        json.dumps([{"tool": "files.read", "arguments": {"path": "/public/a.txt"}}])
    )
    return [
        SHAREDOS, "run", "--harness", "claude-code", "--rules", str(tmp / "rules.sos"),
        "--policy", "tight", "--principal", "bob", "--sandbox", str(tmp / "sandbox"),
        "--evidence", str(tmp / "evidence.sqlite"), "--plan", str(tmp / "plan.json"),
        "--workdir", str(tmp / "work"), "--timeout", "120",
    ]  # fmt: skip


def _opening(db: Path) -> dict[str, object]:
    with sqlite3.connect(db) as conn:
        (identity,) = conn.execute("SELECT identity FROM turns").fetchone()
    out: dict[str, object] = json.loads(identity)
    return out


def test_a_strict_run_that_cannot_be_confined_exits_5_and_runs_nothing(tmp_path: Path) -> None:
    argv = _setup(tmp_path)
    env = {**os.environ, "SHAREDOS_BWRAP": "/nonexistent/bwrap"}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 5, proc.stderr
    assert "run policy 'tight' is strict" in proc.stderr and "--unconfined" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "evidence.sqlite").exists() and not (tmp_path / "work").exists()
    # a work directory inside the files sandbox root: refused too, before any confinement
    # (the files tools would reach the turn's directory, confined or not)
    inside = [*argv[:-4], "--workdir", str(tmp_path / "sandbox" / "turns"), "--timeout", "60"]
    shown = subprocess.run(inside, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 1, shown.stderr
    assert "holds SharedOS's run directories" in shown.stderr, shown.stderr


@pytest.mark.harness
def test_strict_runs_confined_and_unconfined_says_so_everywhere(tmp_path: Path) -> None:
    argv = _setup(tmp_path)
    proc = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "confinement: confined by bubblewrap" in proc.stderr
    doc = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert doc["confinement"]["state"] == "confined" and doc["confinement"]["viewDigest"]
    assert "1 allowed and succeeded" in proc.stderr
    opening = _opening(tmp_path / "evidence.sqlite")
    assert opening["confinement"]["state"] == "confined"  # type: ignore[index]
    # --unconfined, even without bubblewrap: it runs, and every record says NOT CONFINED
    other = tmp_path / "again"
    other.mkdir()
    argv = _setup(other)
    env = {**os.environ, "SHAREDOS_BWRAP": "/nonexistent/bwrap"}
    proc = subprocess.run(
        [*argv, "--unconfined"], capture_output=True, text=True, timeout=240, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "confinement: NOT CONFINED: strict run started with --unconfined" in proc.stderr
    assert _opening(other / "evidence.sqlite")["confinement"]["state"] == "unconfined"  # type: ignore[index]
    with sqlite3.connect(other / "evidence.sqlite") as conn:
        idents = [json.loads(i) for (i,) in conn.execute("SELECT identity FROM evidence")]
    assert idents and all(i["confinement"]["state"] == "unconfined" for i in idents)
