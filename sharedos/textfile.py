"""Read a file an operator named: whole, bounded, never waiting, never a traceback.

Host files, context and plan files, pins, keys, bundles and credentials are all
named by an operator, and any of them can turn out to be a named pipe nobody
writes to (an ``open`` that never returns), a device (``/dev/zero`` reads
forever), a file far larger than any such file should be, or text that is not
UTF-8. Each of those is an ``UnreadableFile``: an ``OSError`` whose ``strerror``
says what is wrong in words, without any of the file's content (a credential
file's bytes must never reach an error message), so the callers' existing
``except OSError`` turns it into their usual one-line error.

A pipe is read to its end (``--context <(generate)`` works); one with no writer
reads as empty.
"""

from __future__ import annotations

import errno
import os
import stat

from sharedos.errors import SharedOSError

__all__ = [
    "DEFAULT_LIMIT",
    "UnreadableFile",
    "decode_text",
    "read_bytes",
    "read_private",
    "read_secret",
    "read_text",
    "read_trusted",
    "secret_problem",
    "trusted_problem",
]

#: far above any host file, key or bundle SharedOS writes (a 10,000-rule bundle is a few MB)
DEFAULT_LIMIT = 256 * 1024 * 1024


class UnreadableFile(SharedOSError, OSError):
    """The file cannot be used: not a regular file or pipe, too large, or not UTF-8."""

    def __str__(self) -> str:  # the callers name the file themselves
        return str(self.strerror)


def read_bytes(path: str | os.PathLike[str], *, limit: int = DEFAULT_LIMIT) -> bytes:
    """The whole content of ``path``, at most ``limit`` bytes.

    ``OSError`` as ``open`` raises it (missing, no permission); ``UnreadableFile``
    for a device, socket or directory, or content longer than ``limit``.
    """
    return _read(path, limit, private=False)


def read_private(path: str | os.PathLike[str], *, limit: int = 1 << 20) -> bytes:
    """``read_bytes`` for a private key: also ``UnreadableFile`` when other users may
    read or write it (any group or other permission bit), as ``ssh`` refuses one."""
    return _read(path, limit, private=True)


def read_secret(path: str | os.PathLike[str], *, limit: int = 1 << 20) -> bytes:
    """A credential file's content. Opened without following a symbolic link, and
    ``UnreadableFile`` unless what was opened is a regular file owned by this user that
    no other user may read or write: checked on the open file itself, so a link or
    another file swapped in after any earlier look is refused, never read."""
    return _read(path, limit, private=False, secret=True)


def read_trusted(path: str | os.PathLike[str], *, limit: int = 1 << 20) -> bytes:
    """``read_bytes`` for a file that says whom to trust (a public key that verifies bundles,
    seals or checkpoints): also ``UnreadableFile`` when another user could change what it
    says, as ``ssh`` refuses such an ``authorized_keys`` -- the file itself (a symbolic link
    followed to it) writable by its group or by others, or owned by a user other than this
    one or root. Checked on the open file: whoever can write it can make a host trust any
    key (a link to a file in ``/tmp``, a key left ``chmod 666``)."""
    return _read(path, limit, private=False, trusted=True)


def trusted_problem(st: os.stat_result) -> str | None:
    """Why the file ``st`` describes cannot say whom to trust, or None (``read_trusted``)."""
    if st.st_uid not in (os.geteuid(), 0):
        return (
            f"a trusted key file owned by another user (uid {st.st_uid}), who could change "
            "which key is trusted; it must belong to this user or root"
        )
    if st.st_mode & 0o022:
        return (
            "a trusted key file other users can write (mode "
            f"{stat.S_IMODE(st.st_mode):04o}), so they could change which key is trusted; "
            "chmod go-w it"
        )
    return None


def secret_problem(st: os.stat_result) -> str | None:
    """Why the file ``st`` describes cannot hold a credential, or None: it must be a regular
    file owned by this user that no other user may read or write."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return "not owned by the user SharedOS runs as"
    if st.st_mode & 0o077:
        return f"readable or writable by others (mode {stat.S_IMODE(st.st_mode):04o}; chmod 600)"
    return None


def _read(
    path: str | os.PathLike[str],
    limit: int,
    *,
    private: bool,
    secret: bool = False,
    trusted: bool = False,
) -> bytes:
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags | os.O_NOFOLLOW if secret else flags)
    try:
        st = os.fstat(fd)
        mode = st.st_mode
        problem = secret_problem(st) if secret else trusted_problem(st) if trusted else None
        if problem is not None:
            raise UnreadableFile(errno.EACCES, problem, os.fspath(path))
        if private and stat.S_ISREG(mode) and mode & 0o077:
            raise UnreadableFile(
                errno.EACCES,
                f"a private key other users can read or write (mode {stat.S_IMODE(mode):04o}); "
                "chmod 600 it (keygen writes it so)",
                os.fspath(path),
            )
        if stat.S_ISFIFO(mode):
            os.set_blocking(fd, True)
        elif not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise UnreadableFile(errno.EINVAL, kind, os.fspath(path))
        chunks: list[bytes] = []
        size = 0
        # a regular file in one read (plus the one that sees its end); a pipe in steps
        step = min(max(st.st_size + 1, 1 << 16), limit + 1)
        while True:
            chunk = os.read(fd, step)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                raise UnreadableFile(errno.EFBIG, f"larger than {limit:,} bytes", os.fspath(path))
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], *, limit: int = DEFAULT_LIMIT) -> str:
    """``read_bytes`` decoded as UTF-8 (a leading byte-order mark dropped).

    Text that is not UTF-8 is an ``UnreadableFile`` naming the line and column of
    the first bad byte, never the bytes themselves. Line ends read as ``open()``
    reads them by default: ``\r\n`` and ``\r`` become ``\n``.
    """
    data = read_bytes(path, limit=limit)
    try:
        return decode_text(data)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise UnreadableFile(
            errno.EILSEQ, f"not UTF-8 text (line {line}, byte {col} of the line)", os.fspath(path)
        ) from None


def decode_text(data: bytes) -> str:
    """``data`` as ``read_text`` reads a file: UTF-8 without a leading byte-order mark,
    ``\r\n`` and ``\r`` as ``\n``; ``UnicodeDecodeError`` (positions in ``data``)
    for bytes that are not UTF-8, for a caller that shows where."""
    text = data.decode("utf-8-sig")
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text
