"""A process of the host SIGKILLed while it writes its bundle state (real processes).

``BundleState.save`` writes the kept copy (the bundle's bytes, up to 64 MiB) and then the
state file, each into a temporary file renamed over the target. A ``SIGKILL`` between the
two steps of either write left the temporary file, and nothing ever removed it: every
killed ``sharedos run`` that was writing a new release added one copy of the bundle to the
state directory, until the disk was full and no release could be remembered (so none was
put in force). Every writer holds the state's lock, so the next one removes them.

Invariants after each kill: the state reads back; the copy kept beside it is of its
release or the next one (never older, never missing); and after the next write under the
lock, no temporary file is left.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sharedos.bundles import BundleManager, DirectorySource
from sharedos.bundles.state import BundleState
from sharedos.evidence.chain import Signer
from tests.conftest import Figures
from tests.fleet.test_bundle_trust import release, verifier
from tests.fleet.test_bundles import RULES_V1, publish

#: writes release after release (the kept copy a few MiB: a kill often lands mid-write);
#: the copy's first line is its sequence
_SAVER = textwrap.dedent(
    """
    import sys
    from sharedos.bundles.state import BundleState, Enforced
    state = BundleState(sys.argv[1])
    pad = b"x" * (int(sys.argv[2]) << 20)
    sequence = (state.load() or Enforced(0, "", "", "")).sequence
    print("ready", flush=True)
    while True:
        sequence += 1
        enforced = Enforced(sequence, f"r{sequence}", "h" * 64, "/source")
        with state.locked():
            state.save(enforced, b"%d\\n" % sequence + pad)
    """
)

#: opens a temporary file of the kept copy as a save does, writes part of it, and waits to
#: be killed there
_CUT = textwrap.dedent(
    """
    import sys, time
    from sharedos.atomicfile import replacing
    from sharedos.bundles.state import BundleState
    state = BundleState(sys.argv[1])
    with state.locked(), replacing(state.kept_path, durable=True) as fh:
        fh.write(b"x" * (1 << 20))
        fh.flush()
        print("cut", flush=True)
        time.sleep(60)
    """
)


def _strays(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def _killed_midway(code: str, *args: str, wait_s: float = 0.0) -> None:
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() in ("ready", "cut")
        time.sleep(wait_s)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_write_killed_midway_leaves_nothing_the_next_poll_does_not_remove(
    tmp_path: Path,
) -> None:
    signer = Signer.generate()
    pub, state_dir = tmp_path / "pub", tmp_path / "state"
    state = BundleState(state_dir / "bundle.json")
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r1", sequence=1))
    assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().status == (
        "loaded"
    )
    for _ in range(2):  # two runs of the host, each killed while writing its kept copy
        _killed_midway(_CUT, str(state.path))
    assert _strays(state_dir)  # the last one's at least (each writer removes those before it)
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r2", sequence=2))
    manager = BundleManager(DirectorySource(pub), verifier(signer), state=state)
    assert manager.poll().status == "loaded"
    assert _strays(state_dir) == [], "what the killed writes left stays on disk for ever"
    assert manager.current().sequence == 2


def _kill_loop(tmp_path: Path, kills: int, seed: int) -> int:
    """``kills`` savers SIGKILLed at random points; the strays seen before the sweep."""
    rng = random.Random(seed)
    state_dir = tmp_path / "state"
    state = BundleState(state_dir / "bundle.json")
    left = 0
    for _ in range(kills):
        _killed_midway(_SAVER, str(state.path), "2", wait_s=rng.random() * 0.15)
        recorded = state.load()
        if recorded is None:
            continue  # killed before its first write
        copies = [int(c.split(b"\n", 1)[0]) for c in state.kept_copies()]
        # the release the state records is always on disk (the kept copy, or the one that
        # waits to replace it when the kill fell after the state was written)
        assert recorded.sequence in copies, (
            f"no copy ({copies}) is the release the state records ({recorded.sequence})"
        )
        left = max(left, len(_strays(state_dir)))
    with state.locked():  # the next writer
        pass
    assert _strays(state_dir) == []
    return left


def test_savers_killed_at_random_points_keep_the_state_whole_and_leave_no_copies(
    tmp_path: Path,
) -> None:
    _kill_loop(tmp_path, kills=4, seed=7)


@pytest.mark.stress
def test_savers_killed_at_random_points_many_times(tmp_path: Path, stress_figures: Figures) -> None:
    left = _kill_loop(tmp_path, kills=60, seed=1207)
    stress_figures.add(f"bundle state: 60 savers killed, at most {left} stray file(s) at once")
