"""``sharedos demo`` (what ``make demo`` runs), as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.timing import bound

SHAPES = ("responses", "anthropic", "pi", "dsh")


def test_demo_runs_offline_in_under_a_minute(tmp_path: Path) -> None:
    """What `make demo` runs, as a subprocess from a clean working directory."""
    env = {
        k: v for k, v in os.environ.items() if not k.endswith("_PROXY") and not k.endswith("_proxy")
    }
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "sharedos"), "demo", "--out", str(tmp_path / "reports")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert elapsed < bound(60)
    out = proc.stdout
    for needle in (
        "Check the shipped rules",
        "files.read(/public/../private/a.txt) -> deny [forbidden]",
        "widened: git.git_add, git.git_checkout, git.git_commit",  # the diff step
        "catalogHash:",
        "92 passed, 0 failed, 0 not exercised",  # 23 rows (8 brokered, 1 approval) x 4 shapes
        "brokered-traversal-canonical",
        "html report:",
        # the approval step: one call waits, is approved from the CLI, and runs
        "-> denied [approval_required]",
        "$ sharedos approvals approve apr-",
        "as maya: files.write on /home/alice/release/notes.txt",
        "-> succeeded: wrote",
        "approval events in the turn's chain; verify: clean",
    ):
        assert needle in out, needle
    for shape in SHAPES:
        assert f"scripted/{shape}" in out
    assert (tmp_path / "reports" / "demo.html").is_file()
    # the demo leaves its evidence store, and its chains verify (docs/evidence.md)
    kept = tmp_path / "reports" / "evidence.sqlite"
    assert f"evidence store: {kept}" in out
    verify = subprocess.run(
        [str(Path(sys.executable).parent / "sharedos"), "evidence", "verify", "--db", str(kept)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verify.returncode == 0 and ": clean" in verify.stdout, verify.stdout + verify.stderr
