"""A process killed with SIGKILL mid-turn loses no record of a call whose result was returned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from sharedos.evidence import SqliteEvidenceStore

CHILD = Path(__file__).with_name("sigkill_child.py")


def test_sigkill_mid_turn_loses_no_returned_call(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "public").mkdir(parents=True)
    (root / "public" / "a.txt").write_text("A")
    db = tmp_path / "evidence.db"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(db), str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    printed: list[str] = []
    rest, err = "", ""
    try:
        while len(printed) < 300:
            line = child.stdout.readline()
            if not line:
                break
            printed.append(line.split()[0])
        # kill it while it is still issuing calls: mid-turn, possibly mid-write
        child.send_signal(signal.SIGKILL)
        rest, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert len(printed) == 300, f"child printed {len(printed)} lines; stderr:\n{err}"
    assert child.returncode == -signal.SIGKILL
    # lines the parent had not yet read were returned too: they count as well
    printed += [line.split()[0] for line in rest.splitlines(keepends=True) if line.endswith("\n")]
    store = SqliteEvidenceStore(db)
    recorded = {r.call_id for r in store.query(turn_id="sigkill-turn")}
    missing = [c for c in printed if c not in recorded]
    assert missing == []
    # and the outcomes are the expected mix, so the child did real work
    counts = store.counts("sigkill-turn")
    assert counts.by_outcome.get("succeeded", 0) > 0 and counts.denied > 0
