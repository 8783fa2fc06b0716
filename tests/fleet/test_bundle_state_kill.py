"""A process of the host SIGKILLed while it writes its bundle state (real processes).

``BundleState.save`` writes the kept copy (the bundle's bytes, up to 64 MiB) and then the
state file, each into a temporary file renamed over the target. A ``SIGKILL`` between the
two steps of either write left the temporary file, and nothing ever removed it: every
killed ``sharedos run`` that was writing a new release added one copy of the bundle to the
state directory, until the disk was full and no release could be remembered (so none was
put in force). Every writer holds the state's lock, so the next one removes them.

Invariants after each kill: the state reads back; a copy of the release it records is on
disk (the kept copy, or the bytes waiting to replace it), and a start whose source fails
puts exactly that release in force; after the next write under the lock, no temporary
file is left, and after a start with the source up, one copy.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sharedos.bundles import BundleManager, BundleVerifier, DirectorySource
from sharedos.bundles.source import Fetched
from sharedos.bundles.state import BundleState
from sharedos.evidence.chain import Signer
from tests.conftest import Figures
from tests.fleet.test_bundle_trust import release, verifier
from tests.fleet.test_bundles import RULES_V1, RULES_V2, publish

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
            # as the manager does: the bytes a killed saver left waiting, settled first
            mine = b"%d" % (state.load() or enforced).sequence
            state.settle(lambda copy: copy.split(b"\\n", 1)[0] == mine)
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


# -- the copy of the release the state records, through kills of a poller ------------------------


class _Killed(BaseException):
    """Where a SIGKILL fell: nothing after it runs, the files are as it left them."""


@contextlib.contextmanager
def _killed_at(op: int) -> Iterator[list[int]]:
    """This thread's ``op``-th file operation (open, rename, fsync, unlink) raises ``_Killed``
    instead of running: the process dies there (its flock goes with its descriptors)."""
    count, me = [0], threading.get_ident()
    real = {name: getattr(os, name) for name in ("open", "replace", "rename", "fsync", "unlink")}

    def wrapped(name: str) -> Any:
        call = real[name]

        def op_or_kill(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == me:
                count[0] += 1
                if count[0] == op:
                    raise _Killed(name)
            return call(*args, **kwargs)

        return op_or_kill

    try:
        for name in real:
            setattr(os, name, wrapped(name))
        yield count
    finally:
        for name, call in real.items():
            setattr(os, name, call)


def _start(pub: Path, state: BundleState, check: BundleVerifier, *, kill_at: int = 0) -> Any:
    """A host starting (a new manager) that polls its source once; None when killed."""
    manager = BundleManager(DirectorySource(pub), check, state=state)
    if not kill_at:
        return manager.poll()
    with _killed_at(kill_at):
        try:
            return manager.poll()
        except _Killed:
            return None


def _copies_of(state: BundleState, check: BundleVerifier) -> list[str]:
    """The revisions of the copies on disk (kept, then waiting) that verify."""
    revisions = []
    for data in state.kept_copies():
        with contextlib.suppress(Exception):
            revisions.append(check.verify(Fetched(data, "", "copy")).revision)
    return revisions


def _started_while_down(pub: Path, state: BundleState, check: BundleVerifier) -> Any:
    """What a start whose source fails puts in force now, tried on a copy of the state
    directory (the host's own files are left as the kills made them)."""
    probe = state.path.parent.with_name("probe")
    shutil.rmtree(probe, ignore_errors=True)
    shutil.copytree(state.path.parent, probe)
    served = pub / "bundle.json"
    held = served.read_bytes() if served.exists() else None
    served.unlink(missing_ok=True)
    try:
        return _start(pub, BundleState(probe / state.path.name), check)
    finally:
        if held is not None:
            publish(pub, held)


def _keep_loop(tmp_path: Path, steps: int, seed: int) -> int:
    """A poller replacing r5 → r6 → r7, killed at random file operations, beside starts
    with the source down (also killed) and an attacker who writes the state directory
    (another source's release, of a higher sequence, and an older release of this one,
    left as the bytes waiting); the invariants after every step. How many kills fell."""
    rng = random.Random(seed)
    signer = Signer.generate()
    check = verifier(signer)
    releases = {
        n: release(tmp_path, RULES_V1 if n % 2 else RULES_V2, signer, revision=f"r{n}", sequence=n)
        for n in (5, 6, 7)
    }
    planted = {
        "a9": release(tmp_path, RULES_V1, signer, revision="a9", sequence=9),  # another source's
        "r5": releases[5],
        "junk": b'{"not": "a bundle"}',
    }
    pub, state = tmp_path / "pub", BundleState(tmp_path / "state" / "bundle.json")
    publish(pub, releases[5])
    assert _start(pub, state, check).status == "loaded"
    serving, kills = 5, 0
    for step in range(steps):
        action = rng.choice(("poll", "poll", "poll", "down", "up", "plant"))
        what = f"step {step} (seed {seed}): {action}"
        if action == "poll":  # the poller, killed at one of its file operations
            serving = serving + 1 if serving < 7 and rng.random() < 0.5 else serving
            publish(pub, releases[serving])
            kills += _start(pub, state, check, kill_at=rng.randint(1, 30)) is None
        elif action == "down":  # a start while the source fails, killed too
            (pub / "bundle.json").unlink()
            kills += _start(pub, state, check, kill_at=rng.randint(1, 20)) is None
            publish(pub, releases[serving])
        elif action == "plant" and not state.pending_path.exists():
            state.pending_path.write_bytes(planted[rng.choice(sorted(planted))])
        recorded = state.load()
        if recorded is None:
            continue
        # the release the state records is on disk, whatever the kills and the attacker did
        assert recorded.revision in _copies_of(state, check), f"{what}: no copy of it"
        # and a start while the source fails puts exactly it in force: never older, never
        # another source's, never no policy
        down = _started_while_down(pub, state, check)
        assert down.status == "kept", f"{what}: {down.detail}"
        assert down.current.revision == recorded.revision, what
        if action == "up":  # a start with the source up, not killed: one copy left
            up = _start(pub, state, check)
            assert up.current is not None and up.current.revision == state.load().revision
            names = sorted(p.name for p in state.path.parent.iterdir())
            assert names == [".bundle.json.lock", "bundle.json", "bundle.last-good.json"], what
    return kills


def test_a_poller_killed_twice_never_leaves_a_host_without_the_release_it_recorded(
    tmp_path: Path,
) -> None:
    """A poller killed after the state recorded r6, before its bytes replaced the copy of
    r5, left r6's only copy waiting; the next poller wrote r7's bytes over it and was
    killed before the state: a start whose source failed found r5 and r7 beside the record
    of r6, and had no policy. The bytes left waiting are put in place first now."""
    signer = Signer.generate()
    check = verifier(signer)
    pub, state = tmp_path / "pub", BundleState(tmp_path / "state" / "bundle.json")
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    assert _start(pub, state, check).status == "loaded"
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r6", sequence=6))
    with contextlib.suppress(_Killed), _killed_ahead_of_the_copy(state):
        _start(pub, state, check)
    assert state.load().revision == "r6" and _copies_of(state, check) == ["r5", "r6"]
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r7", sequence=7))
    with contextlib.suppress(_Killed), _killed_ahead_of_the_state(state):
        _start(pub, state, check)
    assert state.load().revision == "r6"
    assert "r6" in _copies_of(state, check), "the only copy of r6 was written over"
    down = _started_while_down(pub, state, check)
    assert down.status == "kept" and down.current.revision == "r6", down.detail


def test_a_start_on_the_bytes_left_waiting_leaves_one_copy(tmp_path: Path) -> None:
    """Bytes a killed poller left waiting stayed beside the kept copy until some save wrote
    over them: a start while the source failed used the waiting ones (the release the state
    records) and left both, and bytes no release the state records (a poller killed before
    the state; another source's release put there) stayed while the release did not change.
    A start now settles them: the release recorded is put in place, any other removed."""
    signer = Signer.generate()
    check = verifier(signer)
    pub, state = tmp_path / "pub", BundleState(tmp_path / "state" / "bundle.json")
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    assert _start(pub, state, check).status == "loaded"
    r6 = release(tmp_path, RULES_V1, signer, revision="r6", sequence=6)
    publish(pub, r6)
    with contextlib.suppress(_Killed), _killed_ahead_of_the_copy(state):
        _start(pub, state, check)
    (pub / "bundle.json").unlink()
    down = _start(pub, state, check)
    assert down.status == "kept" and down.current.revision == "r6"
    assert state.kept_path.read_bytes() == r6 and not state.pending_path.exists()

    publish(pub, release(tmp_path, RULES_V2, signer, revision="r7", sequence=7))
    with contextlib.suppress(_Killed), _killed_ahead_of_the_state(state):
        _start(pub, state, check)  # r7's bytes waiting, r6 recorded
    publish(pub, r6)
    assert _start(pub, state, check).current.revision == "r6"
    assert not state.pending_path.exists(), "bytes of a release never recorded stay"
    state.pending_path.write_bytes(release(tmp_path, RULES_V2, signer, revision="a9", sequence=9))
    assert _start(pub, state, check).current.revision == "r6"
    assert not state.pending_path.exists(), "another source's release stays beside the copy"
    assert state.kept_path.read_bytes() == r6


@contextlib.contextmanager
def _killed_ahead_of_the_copy(state: BundleState) -> Iterator[None]:
    """Killed at the rename of the waiting bytes over the kept copy (after the state)."""
    real = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(src) == state.pending_path and Path(dst) == state.kept_path:
            raise _Killed("replace")
        real(src, dst, *args, **kwargs)

    os.replace = replace  # type: ignore[assignment]
    try:
        yield
    finally:
        os.replace = real


@contextlib.contextmanager
def _killed_ahead_of_the_state(state: BundleState) -> Iterator[None]:
    """Killed at the rename that puts the state file in place (its bytes waiting)."""
    real = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(dst) == state.path:
            raise _Killed("replace")
        real(src, dst, *args, **kwargs)

    os.replace = replace  # type: ignore[assignment]
    try:
        yield
    finally:
        os.replace = real


def test_a_poller_killed_at_random_file_operations_keeps_the_release_recorded(
    tmp_path: Path,
) -> None:
    assert _keep_loop(tmp_path, steps=14, seed=4186) > 0


@pytest.mark.stress
def test_a_poller_killed_at_random_file_operations_many_times(
    tmp_path: Path, stress_figures: Figures
) -> None:
    kills = sum(_keep_loop(tmp_path / str(seed), steps=150, seed=seed) for seed in range(6))
    stress_figures.add(f"bundle kept copy: {kills} pollers and starts killed, every start kept")


def test_a_save_that_cannot_write_names_the_file_it_could_not_write(tmp_path: Path) -> None:
    """A directory put where a release's bytes wait (``bundle.next.last-good.json``) made
    every save fail, and the message named the state file, ``cannot write …/bundle.json:
    Is a directory``, which was a good regular file: an operator looked there and found
    nothing wrong. The message names the file that could not be written."""
    from sharedos.bundles.state import BundleState, Enforced, StateError

    state = BundleState(tmp_path / "state" / "bundle.json")
    state.path.parent.mkdir()
    state.pending_path.mkdir()
    (state.pending_path / "theirs").write_text("x")
    enforced = Enforced(sequence=3, revision="r3", bundle_hash="ab" * 32, origin="o")
    with pytest.raises(StateError) as caught:
        state.save(enforced, b"{}")
    assert str(state.pending_path) in str(caught.value), caught.value
    assert not state.path.exists() and (state.pending_path / "theirs").exists()
