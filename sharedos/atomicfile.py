"""Replace a file whole: readers see the old contents or the new, never a part.

Every file SharedOS writes for others to read later (bundles, pins, sealed tokens,
turn files, bundle state, formatted policies, grammar tables, a turn's reports) is
written the one way this module keeps: into a new file beside the target, then
renamed over it. The rename also means a symbolic link planted at the target is
replaced, never followed.

What a crash leaves behind: the old file, or the new one, and at worst a stray
``.NAME.*.tmp`` beside it (removed when the write fails in this process; a
SIGKILL between the two steps leaves it). A file whose writers all hold one lock
(``take_lock``) has those removed by the next writer under it (``remove_strays``):
each is a dead writer's, as large as what it wrote, and nothing else ever removes
them. With ``durable=True`` the data and the
directory entry are on disk before the call returns, so a power loss after it
cannot bring back the old contents.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "create_whole",
    "fsync_directory",
    "remove_strays",
    "replacing",
    "take_lock",
    "write_atomically",
]


def write_atomically(
    path: str | os.PathLike[str],
    data: bytes | str,
    *,
    mode: int = 0o600,
    exact_mode: bool = False,
    durable: bool = False,
) -> Path:
    """Replace ``path`` with ``data`` (str is written as UTF-8) and return it as a Path.

    The new file is created exclusive, without following links, with ``mode`` less
    the process umask; ``exact_mode`` sets ``mode`` as given instead (a file keeping
    the mode it had). The mode is in place before any data is. ``durable`` fsyncs the
    file and then its directory. The directory must exist. Any ``OSError``
    propagates after the temporary file is removed; the target is then untouched.
    """
    payload = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    with replacing(path, mode=mode, exact_mode=exact_mode, durable=durable) as fh:
        fh.write(payload)
    return Path(path)


@contextlib.contextmanager
def replacing(
    path: str | os.PathLike[str],
    *,
    mode: int = 0o600,
    exact_mode: bool = False,
    durable: bool = False,
) -> Iterator[BinaryIO]:
    """``write_atomically`` for content written a piece at a time (an export of a whole
    store): the body writes to the yielded file, which replaces ``path`` only when the
    body ends without an exception; otherwise it is removed and ``path`` is untouched."""
    target = Path(path)
    _refuse_special(target)
    tmp = target.with_name(_temp_name(target))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            if exact_mode:
                os.fchmod(fd, mode)
            yield fh
            fh.flush()
            if durable:
                os.fsync(fd)
        _refuse_special(target)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_directory(target.parent)


def _refuse_special(target: Path) -> None:
    """``OSError`` when ``target`` is a device, a pipe or a socket, or a symbolic link to
    one: renamed over, the node itself was replaced by a regular file
    (``sharedos-policy compile -o /dev/full`` run as root turned the machine's
    ``/dev/full`` into a file holding the bundle; ``-o /dev/stdout`` replaced the
    machine's ``/dev/stdout`` link). A link to a regular file (or to nothing) is
    replaced as ever: the link itself, its target untouched."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(target)  # what the link leads to
        except OSError:
            return  # a dangling link: replaced, nothing behind it
    if (
        stat.S_ISCHR(st.st_mode)
        or stat.S_ISBLK(st.st_mode)
        or stat.S_ISFIFO(st.st_mode)
        or stat.S_ISSOCK(st.st_mode)
    ):
        raise OSError(
            errno.EEXIST,
            "not a regular file (a device, a pipe or a socket, or a link to one, is never "
            "replaced)",
            str(target),
        )


def create_whole(path: str | os.PathLike[str], data: bytes | str, *, mode: int = 0o600) -> Path:
    """Create ``path`` holding ``data``, never replacing a file there: for a file that must
    not be overwritten (a key). ``FileExistsError`` naming ``path`` when a name is there
    (a link included, never followed).

    The data is written, with ``mode`` exactly, and fsynced under a temporary name beside
    it, which is then hard-linked to ``path`` (``link`` never replaces a name): a full disk,
    an error or a SIGKILL at any point leaves no ``path``, never an empty or cut one that
    every later attempt would refuse as existing; at worst a stray ``.NAME.*.tmp``."""
    target = Path(path)
    payload = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
    tmp = target.with_name(_temp_name(target))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fd, mode)
            fh.write(payload)
            fh.flush()
            os.fsync(fd)
        try:
            os.link(tmp, target, follow_symlinks=False)
        except FileExistsError:  # made meanwhile
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target)) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    fsync_directory(target.parent)
    return target


def fsync_directory(directory: Path) -> None:
    """``fsync`` a directory: a rename or a new name in it survives a power loss."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_name(target: Path) -> str:
    """The name ``replacing`` and ``create_whole`` give a temporary file of ``target``
    (with ``secrets.token_hex(6)`` in place of ``*``)."""
    return f".{target.name}.{secrets.token_hex(6)}.tmp"


def remove_strays(path: str | os.PathLike[str]) -> int:
    """Remove the temporary files a write of ``path`` killed midway left beside it
    (``.NAME.<12 hex digits>.tmp``); how many were removed.

    Only for a caller holding the lock every writer of ``path`` takes (``take_lock``):
    a temporary file of ``path`` is then never a live writer's. Without this, every
    ``SIGKILL`` during a write left one (a bundle's kept copy: up to 64 MiB each), until
    the disk was full and no write of anything there succeeded. Errors are ignored: a
    stray left is only space."""
    target = Path(path)
    prefix, removed = f".{target.name}.", 0
    with contextlib.suppress(OSError):
        with os.scandir(target.parent) as entries:
            names = [e.name for e in entries if e.name.startswith(prefix)]
        for name in names:
            token = name[len(prefix) :]
            if not (len(token) == 16 and token.endswith(".tmp")):
                continue
            if any(c not in "0123456789abcdef" for c in token[:12]):
                continue
            try:
                os.unlink(target.parent / name)
            except OSError:  # gone meanwhile, or not a file: another's business
                continue
            removed += 1
    return removed


def take_lock(lock_path: Path, *, wait_s: float, mode: int = 0o600, read_only: bool = False) -> int:
    """An exclusive ``flock`` on ``lock_path`` (made with ``mode`` when missing, never
    through a symbolic link), held by the returned descriptor until it is closed.

    ``read_only``: the lock file is opened to read, never made (``FileNotFoundError`` when
    it is missing): ``flock`` needs no write access, so a process that cannot write the
    directory (mounted read-only, another user's) still excludes the writers that can.

    Bounded: a process holding the lock forever (stopped, not dead) does not hang this
    one; ``TimeoutError`` when it is still held after ``wait_s``, ``OSError`` when the
    file cannot be opened. The caller closes the descriptor, which releases the lock."""
    if read_only:
        # O_NONBLOCK: a named pipe put there is not waited on for a writer (O_RDWR never is)
        fd = os.open(lock_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    else:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, mode)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise TimeoutError(f"another process holds {lock_path}") from None
            time.sleep(0.01)
        except BaseException:
            os.close(fd)
            raise
