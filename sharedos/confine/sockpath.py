"""A Unix socket's path as ``bind`` and ``connect`` take it, however long the path.

``sun_path`` holds 107 bytes (and a NUL). A socket that must stay in a private
directory (a stdio turn's relay socket) is not moved elsewhere when
its path is longer: it is reached through a descriptor of its directory,
``/proc/self/fd/N/NAME``, which names the same file. Before, the relay's socket
went to a fresh directory directly in the temporary directory, which no
sandbox masks: an upstream with that directory as a root saw it, and with a
read-write root could put its own listener there.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

#: the longest path ``bind``/``connect`` take for a Unix socket (``sun_path`` less its NUL)
MAX_SOCKET_PATH = 107


@contextlib.contextmanager
def socket_address(path: str | os.PathLike[str]) -> Iterator[str]:
    """``path`` itself when it fits, else an alias of it through a descriptor of its
    directory, valid inside the block; ``OSError`` (``ENAMETOOLONG``) when neither fits."""
    text = os.fspath(path)
    if len(os.fsencode(text)) <= MAX_SOCKET_PATH:
        yield text
        return
    parent, name = Path(text).parent, Path(text).name
    fd = os.open(parent, getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        alias = f"/proc/self/fd/{fd}/{name}"
        if len(os.fsencode(alias)) > MAX_SOCKET_PATH or not os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENAMETOOLONG, "Unix socket path too long", text)
        yield alias
    finally:
        os.close(fd)
