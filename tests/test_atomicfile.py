"""One way to replace a file whole: old or new, never a part, never through a link."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sharedos.atomicfile import create_whole, remove_strays, replacing, write_atomically


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_text_and_bytes_and_replaces_whole(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    write_atomically(target, "é\n")
    assert target.read_bytes() == "é\n".encode()
    write_atomically(target, b"\x00new", durable=True)
    assert target.read_bytes() == b"\x00new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]  # no temporary left


def test_a_planted_link_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "policy.sos"
    victim.write_text("permit everything;\n")
    link = tmp_path / "report.txt"
    link.symlink_to(victim)
    write_atomically(link, "the report\n")
    assert victim.read_text() == "permit everything;\n"
    assert not link.is_symlink()
    assert link.read_text() == "the report\n"


def test_mode_less_umask_unless_exact(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        loose = write_atomically(tmp_path / "a", "x", mode=0o644)
        exact = write_atomically(tmp_path / "b", "x", mode=0o644, exact_mode=True)
    finally:
        os.umask(old)
    assert _mode(loose) == 0o600
    assert _mode(exact) == 0o644


def test_a_failed_replace_leaves_the_target_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "inside").write_text("kept")
    with pytest.raises(OSError):
        write_atomically(target, "new")
    assert (target / "inside").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]


def test_replacing_writes_in_pieces_and_keeps_the_target_when_the_body_fails(
    tmp_path: Path,
) -> None:
    from sharedos.atomicfile import replacing

    target = tmp_path / "export.jsonl"
    target.write_text("an earlier export\n")
    with pytest.raises(RuntimeError), replacing(target) as fh:
        fh.write(b"half of")
        raise RuntimeError("the store went away mid-export")
    assert target.read_text() == "an earlier export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.jsonl"]
    with replacing(target, durable=True) as fh:
        fh.write(b"one\n")
        fh.write(b"two\n")
    assert target.read_bytes() == b"one\ntwo\n"


def test_create_whole_never_replaces_nor_follows_and_sets_the_mode(tmp_path: Path) -> None:
    made = create_whole(tmp_path / "key", "secret\n", mode=0o600)
    assert made.read_text() == "secret\n" and made.stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError) as err:
        create_whole(made, "other\n")
    assert err.value.filename == str(made) and made.read_text() == "secret\n"
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError):
        create_whole(tmp_path / "link", "x")
    assert not (tmp_path / "elsewhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key", "link"]  # no stray file


def test_take_lock_waits_a_bounded_time_and_follows_no_link(tmp_path: Path) -> None:
    """The pin file's and the bundle state's lock: a holder makes a second taker time out
    (never hang), closing the holder's descriptor frees it, and a link planted at the
    lock's path is refused, not followed."""
    from sharedos.atomicfile import take_lock

    lock = tmp_path / ".x.lock"
    held = take_lock(lock, wait_s=1.0, mode=0o644)
    assert (lock.stat().st_mode & 0o777) == 0o644
    with pytest.raises(TimeoutError, match="another process holds"):
        take_lock(lock, wait_s=0.05)
    os.close(held)
    os.close(take_lock(lock, wait_s=0.05))
    link = tmp_path / ".y.lock"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        take_lock(link, wait_s=0.05)
    assert not (tmp_path / "elsewhere").exists()


def test_remove_strays_removes_a_killed_writes_temporaries_and_nothing_else(
    tmp_path: Path,
) -> None:
    """A write SIGKILLed between creating its temporary file and the rename leaves it; a
    writer holding the lock every writer of the file takes removes such leftovers (and
    only those: the lock file, another file's temporaries, look-alikes stay)."""
    import subprocess
    import sys

    target = tmp_path / "state.json"
    write_atomically(target, "old")
    code = (
        "import os, sys\n"
        "from sharedos.atomicfile import replacing\n"
        "with replacing(sys.argv[1]) as fh:\n"
        "    fh.write(b'partial'); fh.flush(); os.kill(os.getpid(), 9)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(target)], check=False, timeout=60)
    left = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(left) == 1 and left[0].startswith(".state.json.")
    keep = [".state.json.lock", ".state.json.nothex!!!!!!.tmp", ".other.json.0123456789ab.tmp"]
    for name in keep:
        (tmp_path / name).write_text("x")
    (tmp_path / ".state.json.0123456789ab.tmp").mkdir()  # not a file: left, no error
    assert remove_strays(target) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*keep, ".state.json.0123456789ab.tmp", "state.json"]
    )
    assert target.read_text() == "old"


def test_a_pipe_or_a_device_at_the_target_is_never_replaced(tmp_path: Path) -> None:
    """Renamed over, the node itself became a regular file: `sharedos-policy compile -o
    /dev/full` run as root replaced the machine's /dev/full with the bundle. A FIFO stands
    in for the device here (no root needed); it is left as it was, with nothing beside it."""
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        write_atomically(fifo, b"bundle")
    with pytest.raises(OSError, match="not a regular file"), replacing(fifo) as fh:
        fh.write(b"bundle")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_link_to_a_pipe_is_never_replaced(tmp_path: Path) -> None:
    """``-o /dev/stdout`` (a link to the process's descriptor: a pipe, a terminal) run as
    root replaced the machine's /dev/stdout link with a regular file. A link to a pipe is
    refused; a link to a regular file is replaced as before (the link, not its target)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "stdout"
    link.symlink_to(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        write_atomically(link, b"bundle")
    assert link.is_symlink() and stat.S_ISFIFO(os.stat(link).st_mode)
    plain = tmp_path / "plain.txt"
    plain.write_text("kept")
    other = tmp_path / "other"
    other.symlink_to(plain)
    write_atomically(other, b"new")
    assert not other.is_symlink() and other.read_bytes() == b"new"
    assert plain.read_text() == "kept"
