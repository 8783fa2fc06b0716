"""Open files strictly beneath a sandbox root, for one canonical resource path.

A managed files tool acts on the canonical resource its decision authorized,
mapped under the root: ``/public/a.txt`` -> ``<root>/public/a.txt``. Two
independent guards keep it there:

* the resolved real path must equal ``<real root>/<canonical path>``
  (``os.path.realpath``), so a symlink anywhere on the way (a link in
  ``/public`` to ``/private``, or out of the root) is refused;
* the open itself walks the path one component at a time with ``dir_fd`` and
  ``O_NOFOLLOW``, so a link swapped in after that check is still not followed.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SandboxError(Exception):
    """An operation the sandbox refuses or cannot perform; the message names the canonical path."""


def segments_of(resource: str) -> tuple[str, ...]:
    """Segments of a canonical path; raise ``SandboxError`` if it is not canonical."""
    if not isinstance(resource, str) or not resource.startswith("/") or "\x00" in resource:
        raise SandboxError(f"{resource!r} is not a canonical absolute path")
    if resource == "/":
        return ()
    parts = tuple(resource[1:].split("/"))
    if any(p in ("", ".", "..") for p in parts):
        raise SandboxError(f"{resource!r} is not a canonical path")
    return parts


class Sandbox:
    """A directory that stands for ``/`` of the files tools' resource space."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        real = os.path.realpath(os.fspath(root))
        if not os.path.isdir(real):
            raise ValueError(f"sandbox root {os.fspath(root)!r} is not a directory")
        self.root = real

    def host_path(self, resource: str) -> str:
        """``<root>/<canonical path>`` (not resolved)."""
        parts = segments_of(resource)
        return os.path.join(self.root, *parts) if parts else self.root

    def check_real(self, resource: str) -> str:
        """The host path of ``resource``, after proving no symlink redirects it."""
        expected = self.host_path(resource)
        if os.path.realpath(expected) != expected:
            raise SandboxError(
                f"{resource} resolves through a symbolic link; files tools do not follow links"
            )
        return expected

    @contextmanager
    def parent_fd(self, resource: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
        """``(fd of the parent directory, final name)``, walked without following links."""
        parts = segments_of(resource)
        if not parts:
            raise SandboxError("/ has no parent")
        self.check_real(resource)
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for i, part in enumerate(parts[:-1]):
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise SandboxError(f"/{'/'.join(parts[: i + 1])} does not exist") from None
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _explain(exc, "/" + "/".join(parts[: i + 1])) from None
                os.close(fd)
                fd = nxt
            yield fd, parts[-1]
        finally:
            os.close(fd)

    @contextmanager
    def dir_fd(self, resource: str) -> Iterator[int]:
        """An fd of the directory ``resource``, opened without following links."""
        self.check_real(resource)
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for i, part in enumerate(segments_of(resource)):
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    parts = segments_of(resource)
                    raise _explain(exc, "/" + "/".join(parts[: i + 1])) from None
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def display(self, host: str | Path) -> str:
        """The canonical resource path of a host path beneath the root."""
        rel = os.path.relpath(os.fspath(host), self.root)
        return "/" if rel == "." else "/" + rel.replace(os.sep, "/")


def _explain(exc: OSError, shown: str) -> SandboxError:
    if exc.errno == errno.ENOENT:
        return SandboxError(f"{shown} does not exist")
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return SandboxError(f"{shown} is a symbolic link; files tools do not follow links")
    if exc.errno == errno.ENOTDIR:
        return SandboxError(f"{shown} is not a directory")
    if exc.errno == errno.EISDIR:
        return SandboxError(f"{shown} is a directory")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return SandboxError(f"{shown}: permission denied by the host filesystem")
    return SandboxError(f"{shown}: {exc.strerror or exc}")


def explain(exc: OSError, shown: str) -> SandboxError:
    """A ``SandboxError`` naming the canonical path (never the host path) for an ``OSError``."""
    return _explain(exc, shown)
