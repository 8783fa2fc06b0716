"""Directories of a run killed outright are found by their released lock and removed; a live
run's, an unclaimed one, another user's or a link are never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from sharedos.confine.leftovers import OWNER, claim, remove_tree, sweep

CLAIMER = """
import sys, time
from pathlib import Path
from sharedos.confine.leftovers import claim
held = claim(Path(sys.argv[1]))
print("claimed", flush=True)
time.sleep(600)
"""


def _claimed_by_child(directory: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CLAIMER, str(directory)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "claimed"
    return proc


def test_a_killed_runs_directory_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    dead, alive, mine = (tmp_path / f"sharedos-run-{n}" for n in ("dead", "alive", "mine"))
    for d in (dead, alive, mine):
        d.mkdir(mode=0o700)
        (d / "transcript.jsonl").write_text("a dead turn's tool results")
    killed = _claimed_by_child(dead)
    living = _claimed_by_child(alive)
    held = claim(mine)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert sweep(tmp_path, ("sharedos-run-",)) == [dead]
        assert not dead.exists()
        assert alive.exists() and mine.exists()
        assert sweep(tmp_path, ("sharedos-run-",)) == []
    finally:
        living.kill()
        living.wait()
        held.release()
    # once released (the run ended without removing it, or died), it is fair game
    assert sorted(sweep(tmp_path, ("sharedos-run-",))) == sorted([alive, mine])


def test_what_is_not_a_claimed_directory_of_this_user_is_left_alone(tmp_path: Path) -> None:
    kept = tmp_path / "sharedos-run-kept"  # --keep, or an older SharedOS: no claim
    kept.mkdir()
    other = tmp_path / "other-prefix"
    other.mkdir()
    claim(other).release()
    target = tmp_path / "target"
    target.mkdir()
    claim(target).release()
    (tmp_path / "sharedos-run-link").symlink_to(target)  # a link to a released directory
    fifo = tmp_path / "sharedos-run-fifo"
    fifo.mkdir()
    os.mkfifo(fifo / OWNER)  # must not hang the sweep
    assert sweep(tmp_path, ("sharedos-run-",)) == []
    assert kept.exists() and other.exists() and target.exists() and fifo.exists()


def test_a_claim_is_never_seen_unlocked_while_its_owner_lives(tmp_path: Path) -> None:
    d = tmp_path / "sharedos-door-x"
    d.mkdir()
    held = claim(d)
    try:
        assert (d / OWNER).is_file()
        assert [p.name for p in d.iterdir()] == [OWNER]  # the staging name is gone
        assert sweep(tmp_path, ("sharedos-door-",)) == []
    finally:
        held.release()


def _deep_tree(parent: Path, depth: int) -> None:
    """``parent/d/d/…`` ``depth`` levels deep (longer than PATH_MAX), a file at the bottom."""
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        leaf = os.open("secret.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
        os.close(leaf)
    finally:
        os.close(fd)


def test_a_tree_of_any_depth_is_removed_without_recursing(tmp_path: Path) -> None:
    """A harness can make a tree deeper than Python's recursion limit in its turn directory:
    ``shutil.rmtree`` raised RecursionError (past ``ignore_errors``) at the run's end."""
    run = tmp_path / "sharedos-run-deep"
    run.mkdir()
    _deep_tree(run, sys.getrecursionlimit() * 3)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the run's")
    (run / "link").symlink_to(outside)
    (run / "dirlink").symlink_to(outside, target_is_directory=True)
    os.mkfifo(run / "fifo")
    assert remove_tree(run)
    assert not run.exists()
    assert (outside / "keep.txt").read_text() == "not the run's"
    assert remove_tree(run)  # already gone: nothing to do
