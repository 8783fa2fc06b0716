"""A brokered call's path resource, checked on this host's filesystem before it is forwarded.

The kernel decides on a canonical path *string*; the upstream then opens that
path on disk and follows whatever it finds there. server-filesystem resolves
symbolic links inside its allowed directories, and mcp-server-git opens a
repository through a ``.git`` pointer or borrowed objects: a link in a
directory the caller may use would carry the call to a file the decision
never saw (issue 22). So before a call whose requirement reads
``path(args.X)`` is forwarded, its canonical path is checked with the rules
the built-in files tools apply (``sharedos.pathwalk``, one implementation):

- no symbolic link as any existing component or as the object;
- a regular file has exactly one link (no hard link to a file elsewhere);
- no FIFO, socket or device;
- a path that does not exist yet (a file to be created) has a link-free
  chain of existing parents;
- a directory that is a git repository (holds ``.git``, or is a git
  directory) reaches nothing through git's own indirections: ``.git`` is a
  real directory (not a link, not a ``gitdir:`` pointer of a worktree or
  submodule checkout), it is not a worktree's private directory
  (``commondir``), borrows no objects (``objects/info/alternates``), relocates
  no working tree (``core.worktree``), includes no other config, and holds no
  symbolic link anywhere inside.

A refusal is a ``SandboxError`` whose code the forwarder reports as
``linked_resource``; the upstream receives nothing. What remains between this
check and the upstream's own open (a race) is in docs/upstreams.md, "Links".
"""

from __future__ import annotations

import os
import re
import stat

from sharedos.pathwalk import (
    CHANGED,
    NOT_A_REGULAR_FILE,
    SYMLINK,
    Probe,
    Sandbox,
    SandboxError,
    explain,
    lstat_at,
)

#: codes of the git indirections (beside pathwalk's ``symlink``, ``hard_link`` ...)
GIT_POINTER = "git_pointer"
GIT_ALTERNATES = "git_alternates"
GIT_WORKTREE = "git_worktree"
GIT_TOO_LARGE = "git_too_large"
#: an HTTP upstream on another host with ``path_check`` unset: nothing can be checked here
UNCHECKED = "unchecked_host"
#: most entries of one git directory walked for links per call (a repository past it
#: is refused, not half-checked: ``git gc`` packs loose objects into a few files)
GIT_MAX_ENTRIES = 200_000
#: the largest git config read for ``core.worktree`` and includes
MAX_GIT_CONFIG_BYTES = 1024 * 1024

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: a config line that relocates the working tree or pulls in another file; matched
#: anywhere, whatever the section, so an unusual spelling errs towards refusing
_WORKTREE_KEY = re.compile(rb"(?im)^[ \t]*(?:\[[^\]\n]*\][ \t]*)?worktree[ \t]*(?:=|$)")
_INCLUDE_SECTION = re.compile(rb"(?im)^[ \t]*\[[ \t]*include(?:if)?\b")


def _name(name: str) -> str:
    """A file name as message text (undecodable bytes as ``\\xNN``)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _open_dir(dfd: int, name: str, shown: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dfd)
    except (OSError, ValueError) as exc:
        st = lstat_at(dfd, name, shown)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise SandboxError(SYMLINK, shown, "is a symbolic link") from None
        raise explain(exc, shown) from None


class LocalPaths:
    """Checks path resources on this host's filesystem (one per broker; no state but ``/``)."""

    def __init__(self) -> None:
        self._sandbox = Sandbox("/")

    def check(self, resource: str) -> str | None:
        """Return when ``resource`` leads straight to its object; else ``SandboxError``.

        Cheap checks only (a few ``openat``/``fstatat`` per component, and for a git
        repository its pointers, alternates and config). When ``resource`` is a git
        repository, the path of its git directory is returned: ``walk_git`` must
        still look through it for links (it can take a while; run it off the event
        loop). Only descriptors walked from ``/`` with ``O_NOFOLLOW`` are used, so
        every answer is about the object at the canonical path.
        """
        with self._sandbox.probe(resource) as found:
            if found.kind == "directory":
                return _check_repository(found, resource)
        return None

    def walk_git(self, git_directory: str) -> None:
        """Refuse a symbolic link anywhere inside ``git_directory`` (``SandboxError``)."""
        with self._sandbox.probe(git_directory) as found:
            if found.kind != "directory":
                raise SandboxError(CHANGED, git_directory, "changed while the call was checked")
            _walk_for_links(found.fd, git_directory)


def _check_repository(found: Probe, shown: str) -> str | None:
    """If the directory ``found`` is a git repository, refuse git's own indirections;
    return its git directory (still to be walked for links), or None."""
    base = "" if shown == "/" else shown
    dot_git = lstat_at(found.fd, ".git", f"{base}/.git")
    if dot_git is None:
        if _is_git_directory(found.fd, base):
            _check_git_directory(found.fd, shown)
            return shown
        return None
    where = f"{base}/.git"
    if stat.S_ISLNK(dot_git.st_mode):
        raise SandboxError(SYMLINK, where, "is a symbolic link to a git directory elsewhere")
    if stat.S_ISREG(dot_git.st_mode):
        raise SandboxError(
            GIT_POINTER,
            where,
            "is a 'gitdir:' pointer to a git directory elsewhere (a worktree or submodule "
            "checkout): git would read and write that repository",
        )
    if not stat.S_ISDIR(dot_git.st_mode):
        raise SandboxError(NOT_A_REGULAR_FILE, where, "is not a directory")
    gfd = _open_dir(found.fd, ".git", where)
    try:
        _check_git_directory(gfd, where)
    finally:
        os.close(gfd)
    return where


def _is_git_directory(dfd: int, base: str) -> bool:
    """True when the directory looks like a git directory itself (a bare repository)."""
    head = lstat_at(dfd, "HEAD", f"{base}/HEAD")
    objects = lstat_at(dfd, "objects", f"{base}/objects")
    refs = lstat_at(dfd, "refs", f"{base}/refs")
    return head is not None and objects is not None and refs is not None


def _check_git_directory(gfd: int, shown: str) -> None:
    """Refuse a git directory that reaches another repository or holds a link."""
    if lstat_at(gfd, "commondir", f"{shown}/commondir") is not None:
        raise SandboxError(
            GIT_POINTER,
            shown,
            "is a worktree's git directory: its objects and refs live in another repository "
            "(commondir)",
        )
    _check_alternates(gfd, shown)
    _check_config(gfd, shown)


def _check_alternates(gfd: int, shown: str) -> None:
    objects = lstat_at(gfd, "objects", f"{shown}/objects")
    if objects is None or not stat.S_ISDIR(objects.st_mode):
        return  # a link is refused by the walk; a missing store is git's problem
    ofd = _open_dir(gfd, "objects", f"{shown}/objects")
    try:
        info = lstat_at(ofd, "info", f"{shown}/objects/info")
        if info is None or not stat.S_ISDIR(info.st_mode):
            return
        ifd = _open_dir(ofd, "info", f"{shown}/objects/info")
        try:
            for name in ("alternates", "http-alternates"):
                if lstat_at(ifd, name, f"{shown}/objects/info/{name}") is not None:
                    raise SandboxError(
                        GIT_ALTERNATES,
                        shown,
                        f"borrows objects from another repository (objects/info/{name})",
                    )
        finally:
            os.close(ifd)
    finally:
        os.close(ofd)


def _check_config(gfd: int, shown: str) -> None:
    where = f"{shown}/config"
    st = lstat_at(gfd, "config", where)
    if st is None or not stat.S_ISREG(st.st_mode):
        return  # a link is refused by the walk
    data = _read_config(gfd, where)
    if _WORKTREE_KEY.search(data):
        raise SandboxError(
            GIT_WORKTREE, shown, "relocates its working tree elsewhere (core.worktree in config)"
        )
    if _INCLUDE_SECTION.search(data):
        raise SandboxError(
            GIT_WORKTREE, shown, "includes another config file ([include] / [includeIf])"
        )


def _read_config(gfd: int, where: str) -> bytes:
    try:
        fd = os.open(
            "config", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=gfd
        )
    except (OSError, ValueError) as exc:
        raise explain(exc, where) from None
    try:
        chunks: list[bytes] = []
        left = MAX_GIT_CONFIG_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise explain(exc, where) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_GIT_CONFIG_BYTES:
        raise SandboxError(
            GIT_TOO_LARGE, where, f"is larger than {MAX_GIT_CONFIG_BYTES} bytes; not checked"
        )
    return data


def _walk_for_links(gfd: int, shown: str) -> None:
    """Refuse a symbolic link anywhere in the git directory (git follows them: a linked
    ``objects`` or pack is another repository's content). Hard links are allowed here:
    ``git clone --local`` shares object files by hard link, and an object's name is its
    content's hash."""
    seen = 0
    stack: list[tuple[int, str]] = [(os.dup(gfd), shown)]
    try:
        while stack:
            dfd, where = stack.pop()
            try:
                with os.scandir(dfd) as entries:
                    for entry in entries:
                        seen += 1
                        if seen > GIT_MAX_ENTRIES:
                            raise SandboxError(
                                GIT_TOO_LARGE,
                                shown,
                                f"holds more than {GIT_MAX_ENTRIES} entries, too many to check "
                                "for links on every call (`git gc` packs loose objects)",
                            )
                        path = f"{where}/{_name(entry.name)}"
                        if entry.is_symlink():
                            raise SandboxError(SYMLINK, path, "is a symbolic link")
                        if entry.is_dir(follow_symlinks=False):
                            stack.append((_open_dir(dfd, entry.name, path), path))
            except OSError as exc:
                raise explain(exc, where) from None
            finally:
                os.close(dfd)
    finally:
        for dfd, _ in stack:
            os.close(dfd)
