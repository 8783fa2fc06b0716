"""Temporary directories of runs that were killed: found by a lock, and removed by the next run.

A run makes private directories (its run directory, the stdio door's, the
stdio turn file's) and removes them when it ends, however it ends, except
when it is killed outright (SIGKILL, the machine's OOM killer, a power cut):
then they stay, with the turn's transcript and a dead turn's relay secret.

Each such directory is *claimed*: the run holds an exclusive ``flock`` on a
file ``.owner`` inside it for as long as it uses it. The kernel drops the lock
when the holder dies, however it dies, in whatever PID namespace, so a later
run (``sweep``) can tell an abandoned directory from a live one by trying
the lock, with no PID to be reused. The lock file is locked under another
name first and then renamed into place, so an ``.owner`` is never seen
unlocked while its run lives. A directory without one (kept with ``--keep``,
made by an older SharedOS, or being made right now) is never removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["OWNER", "Claim", "claim", "discard", "discard_empty", "remove_tree", "sweep"]

#: the file whose lock says a directory's run is alive
OWNER = ".owner"


class Claim:
    """A held claim on a directory; ``release`` ends it (the directory is then fair game)."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    def release(self) -> None:
        """Drop the lock (idempotent); call it once the directory is removed."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def claim(directory: Path) -> Claim:
    """Claim ``directory`` (a private directory this process just made) for this process's
    life. ``OSError`` when it cannot be claimed (the directory is then left unclaimed)."""
    staging = directory / f".owner-{secrets.token_hex(8)}"
    fd = os.open(
        staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.rename(staging, directory / OWNER)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            staging.unlink()
        raise
    return Claim(directory, fd)


def discard(directory: Path, held: Claim | None) -> None:
    """Remove ``directory`` and all it holds (``remove_tree``), then drop ``held``, this
    process's claim on it (None: it was never claimed)."""
    remove_tree(directory)
    if held is not None:
        held.release()


def discard_empty(directory: Path, held: Claim | None) -> None:
    """Remove ``directory`` if nothing but its claim is left in it (else leave it), then
    drop ``held``."""
    with contextlib.suppress(OSError):
        (directory / OWNER).unlink()
    with contextlib.suppress(OSError):
        directory.rmdir()
    if held is not None:
        held.release()


def sweep(parent: Path, prefixes: Iterable[str]) -> list[Path]:
    """Remove the directories in ``parent`` named with one of ``prefixes`` whose claim no
    process holds (their run was killed); the ones removed. Only this user's directories,
    never through a symbolic link; anything that cannot be read is left alone."""
    wanted = tuple(prefixes)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(wanted):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        path = Path(entry.path)
        try:
            # never waiting: a FIFO planted at the name must not hang the run that sweeps
            fd = os.open(path / OWNER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue  # unclaimed: kept
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its run is alive
            if remove_tree(path):
                removed.append(path)
        finally:
            os.close(fd)
    return removed


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: Path) -> bool:
    """Remove the directory ``path`` and everything in it, never following a link and
    never recursing; True when it is gone.

    ``shutil.rmtree`` recurses once per level, and a harness can make a tree deeper than
    Python's recursion limit (or longer than PATH_MAX) in its turn directory in a second:
    the ``RecursionError`` escaped ``ignore_errors``, crashed the run at its end and left
    the directory. Here each pass unlinks the files and empty directories at the top and
    moves the contents of each other directory up one level, two descriptors at a time;
    a pass that changes nothing ends it (what is left could not be removed).
    """
    try:
        top = os.open(path, _DIRECTORY)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    names = (f".rm-{n}" for n in itertools.count())
    try:
        while True:
            try:
                entries = list(os.scandir(top))
            except OSError:
                break
            if not entries:
                break
            progressed = False
            for entry in entries:
                progressed |= _take_apart(top, entry, names)
            if not progressed:
                break
    finally:
        os.close(top)
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _take_apart(top: int, entry: os.DirEntry[str], names: Iterator[str]) -> bool:
    """One step on ``entry`` (in the directory ``top``): unlink it, remove it when it is an
    empty directory, else move its contents up into ``top``. False when nothing changed."""
    try:
        if not entry.is_dir(follow_symlinks=False):
            os.unlink(entry.name, dir_fd=top)
            return True
        sub = os.open(entry.name, _DIRECTORY, dir_fd=top)
    except OSError:
        return False
    moved = False
    try:
        inner = [e.name for e in os.scandir(sub)]
        for name in inner:
            fresh = next(names)
            while _exists(fresh, top):
                fresh = next(names)
            with contextlib.suppress(OSError):
                os.rename(name, fresh, src_dir_fd=sub, dst_dir_fd=top)
                moved = True
    except OSError:
        inner = []
    finally:
        os.close(sub)
    if not inner:
        try:
            os.rmdir(entry.name, dir_fd=top)
        except OSError:
            return False
        return True
    return moved


def _exists(name: str, directory: int) -> bool:
    try:
        os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True
