"""SIGKILL of a real host process at random points, with 4 concurrent clients, again and again.

After every kill the next host opens the same database and sandbox and goes
on. At the end, two things must hold for every kill:

* every result the host returned (printed by the child the moment
  ``invoke_tool`` returned it) has a record *with its outcome*, the same one;
* every effect (a file ``files.write`` created, named after its call id) has
  at least an attempt record: write-ahead means no effect is ever unrecorded.

Quick mode (``make test``): 10 kills. Long mode (``make stress``, the ``stress``
marker): 100 kills. The figures are printed in the test
summary.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sharedos.evidence import SqliteEvidenceStore
from tests.conftest import Figures

CHILD = Path(__file__).with_name("sigkill_child.py")


def _kill_once(db: Path, root: Path, prefix: str, rng: random.Random) -> tuple[dict[str, str], str]:
    """Run one host until a random point, SIGKILL it; the results it returned, and its stderr."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(db), str(root), prefix, "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    returned: dict[str, str] = {}
    target = rng.randint(1, 240)
    err = ""
    try:
        while len(returned) < target:
            line = child.stdout.readline()
            if not line:
                break
            call_id, outcome = line.split()
            returned[call_id] = outcome
        time.sleep(rng.random() * 0.004)  # land anywhere: mid-commit, mid-handler, mid-print
        child.send_signal(signal.SIGKILL)
        rest, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL, f"the host died by itself; stderr:\n{err}"
    assert len(returned) >= target, f"the host stopped early; stderr:\n{err}"
    for line in rest.splitlines(keepends=True):
        if line.endswith("\n"):  # a line cut by the kill was never a whole answer
            call_id, outcome = line.split()
            returned[call_id] = outcome
    return returned, err


@pytest.mark.slow
def test_sigkill_at_random_points_loses_no_returned_result_and_no_effect(
    tmp_path: Path, stress_figures: Figures
) -> None:
    """Quick mode (``make test``): ten kills."""
    _sigkill(tmp_path, stress_figures, 10)


@pytest.mark.stress
def test_a_hundred_sigkills_lose_no_returned_result_and_no_effect(
    tmp_path: Path, stress_figures: Figures
) -> None:
    """Long mode (``make stress``): a hundred kills."""
    _sigkill(tmp_path, stress_figures, 100)


def _sigkill(tmp_path: Path, stress_figures: Figures, kills: int) -> None:
    rng = random.Random(int(os.environ.get("SHAREDOS_STRESS_SEED", "20261202")))
    root = tmp_path / "root"
    (root / "public" / "w").mkdir(parents=True)
    (root / "private").mkdir()
    (root / "public" / "a.txt").write_text("A")
    (root / "private" / "a.txt").write_text("PRIVATE")
    db = tmp_path / "evidence.db"
    returned: dict[str, str] = {}
    t0 = time.monotonic()
    for k in range(kills):
        got, _ = _kill_once(db, root, f"k{k}", rng)
        returned.update(got)
    took = time.monotonic() - t0

    store = SqliteEvidenceStore(db, read_only=True)
    records = {r.call_id: r for r in store.query(turn_id="sigkill-turn")}
    missing = [c for c in returned if c not in records]
    wrong = [c for c in returned if c in records and records[c].status != returned[c]]
    effects = sorted(p.stem for p in (root / "public" / "w").glob("*.txt"))
    unrecorded_effects = [c for c in effects if c not in records]
    interrupted = [c for c, r in records.items() if r.status == "interrupted"]
    counts = store.counts("sigkill-turn")
    stress_figures.add(
        f"sigkill: kills {kills}, attempts {counts.total}, returned {len(returned)}, "
        f"records with an outcome {counts.total - counts.interrupted}, interrupted "
        f"{counts.interrupted}, missing {len(missing)}, effects {len(effects)}, "
        f"effects without an attempt {len(unrecorded_effects)} ({took:.1f} s)"
    )
    assert missing == [], f"returned results with no record: {missing[:10]}"
    assert wrong == [], f"returned results recorded differently: {wrong[:10]}"
    assert unrecorded_effects == [], f"effects with no attempt: {unrecorded_effects[:10]}"
    # an interrupted attempt is one the kill cut: never one whose result was returned
    assert not set(interrupted) & set(returned)
    assert counts.total == len(records)
    assert counts.by_outcome.get("succeeded", 0) > 0 and counts.denied > 0
    # the host's own checkpointing left a database the next host could always open
    assert SqliteEvidenceStore(db).counts().total == counts.total
