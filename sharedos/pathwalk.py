"""Walk a canonical path on the real filesystem, one component at a time, never through a link.

The one implementation of "the object is where the canonical path says"
(issue 22): the built-in files tools (``sharedos.tools.files``) open files
through it, and the upstream broker checks a brokered call's path resource
with it before forwarding (``sharedos.upstream.localpaths``).

``Sandbox(root)`` stands for ``/`` of a resource space: ``/public/a.txt`` ->
``<root>/public/a.txt`` (the files tools' sandbox root; the broker uses ``/``
itself, because a brokered path resource *is* a host path). Every open walks
that path one component at a time from a descriptor of the root, with
``dir_fd`` and ``O_NOFOLLOW``: a symbolic link anywhere on the way (a link in
``/public`` to ``/private``, or out of the root) is refused, and a link
swapped in while the call runs is still not followed, because nothing is ever
resolved by name from the top again. (There is no ``realpath`` check: it
added a second, racy resolution whose ``OSError`` carried the host path.)

A regular file is opened only if it has exactly one link (``st_nlink == 1``,
read from the opened descriptor): a hard link is the same file under a second
name, so a link placed in ``/public`` to a file in ``/private`` would
otherwise carry the forbidden file's content out, and a write would change it.

``Sandbox.probe`` applies the same rules without opening the object (what the
broker needs: the upstream, not SharedOS, opens it): every existing component
a real directory, the object a directory, a singly-linked regular file, or
absent (a file to be created, whose existing parent chain was walked
link-free). A component that does not exist is looked up as an upstream
that finds names by Unicode equivalence would (``café`` -> ``cafe\u0301``),
and that entry is what is checked.

Errors are ``SandboxError`` only. ``explain`` is the one place an ``OSError``
becomes a message: it names the canonical path and a fixed phrase per
``errno`` — never the host path, never ``str(exc)``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from sharedos.errors import SharedOSError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO planted in the tree must not hang the handler; O_NOCTTY: a
# terminal device swapped in after the type check must not become the host's controlling
# terminal (a host without one, a service, would then die of SIGHUP when it hangs up)
_FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
#: the most components a served path may have: a deeper tree (one write could create
#: thousands of levels) breaks the recursive tools operators clean up with
MAX_DEPTH = 64
#: how often an open that raced a concurrent ``mkdir`` is retried before giving up
_RACE_RETRIES = 3

# The refusal codes (docs/files-tools.md). Each message ends with "(<code>)".
NOT_CANONICAL = "not_canonical"
NOT_FOUND = "not_found"
SYMLINK = "symlink"
NOT_A_DIRECTORY = "not_a_directory"
IS_A_DIRECTORY = "is_a_directory"
NOT_A_REGULAR_FILE = "not_a_regular_file"
HARD_LINK = "hard_link"
PERMISSION_DENIED = "permission_denied"
NAME_TOO_LONG = "name_too_long"
TOO_DEEP = "path_too_deep"
INVALID_NAME = "invalid_name"
NO_SPACE = "no_space"
CHANGED = "changed_during_call"
HOST_ERROR = "host_error"
EQUIVALENT_NAMES = "equivalent_names"
RESERVED_NAME = "reserved_name"

ERROR_CODES = frozenset(
    {
        NOT_CANONICAL,
        NOT_FOUND,
        SYMLINK,
        NOT_A_DIRECTORY,
        IS_A_DIRECTORY,
        NOT_A_REGULAR_FILE,
        HARD_LINK,
        PERMISSION_DENIED,
        NAME_TOO_LONG,
        TOO_DEEP,
        INVALID_NAME,
        NO_SPACE,
        CHANGED,
        HOST_ERROR,
        EQUIVALENT_NAMES,
        RESERVED_NAME,
    }
)


class SandboxError(SharedOSError):
    """A refusal or failure of the sandbox: ``code`` is one of ``ERROR_CODES``.

    The message names the canonical path only and ends with ``(<code>)``.
    """

    def __init__(self, code: str, shown: str, what: str) -> None:
        super().__init__(f"{shown} {what} ({code})")
        self.code = code
        self.shown = shown


# errno -> (code, phrase); the phrase follows the canonical path in the message
_BY_ERRNO: dict[int, tuple[str, str]] = {
    errno.ENOENT: (NOT_FOUND, "does not exist"),
    errno.ELOOP: (SYMLINK, "is a symbolic link; files tools do not follow links"),
    errno.EMLINK: (SYMLINK, "is a symbolic link; files tools do not follow links"),
    errno.ENOTDIR: (NOT_A_DIRECTORY, "is not a directory (or a path component is not)"),
    errno.EISDIR: (IS_A_DIRECTORY, "is a directory"),
    errno.ENXIO: (NOT_A_REGULAR_FILE, "is not a regular file"),
    errno.ENODEV: (NOT_A_REGULAR_FILE, "is not a regular file"),
    errno.EACCES: (PERMISSION_DENIED, "cannot be accessed: permission denied by the host"),
    errno.EPERM: (PERMISSION_DENIED, "cannot be accessed: permission denied by the host"),
    errno.EROFS: (PERMISSION_DENIED, "cannot be changed: the host filesystem is read-only"),
    errno.ENAMETOOLONG: (NAME_TOO_LONG, "has a name too long for the host filesystem"),
    errno.ENOSPC: (NO_SPACE, "could not be written: no space left on the host"),
    errno.EDQUOT: (NO_SPACE, "could not be written: the host's disk quota is exceeded"),
    errno.EFBIG: (NO_SPACE, "could not be written: too large for the host filesystem"),
    errno.EEXIST: (CHANGED, "changed while the call ran; try again"),
    errno.ENOTEMPTY: (CHANGED, "changed while the call ran; try again"),
    errno.ESTALE: (CHANGED, "changed while the call ran; try again"),
    errno.EMFILE: (HOST_ERROR, "could not be opened: the host is out of file descriptors"),
    errno.ENFILE: (HOST_ERROR, "could not be opened: the host is out of file descriptors"),
    errno.EIO: (HOST_ERROR, "could not be read or written: input/output error on the host"),
}


def explain(exc: BaseException, shown: str) -> SandboxError:
    """The ``SandboxError`` for a host failure, naming ``shown`` (a canonical path) only.

    The one place an ``OSError`` (or an unencodable name) becomes a message:
    the text is a fixed phrase chosen by ``errno``; nothing of ``exc``'s own
    message (which carries the host path) is used.
    """
    if isinstance(exc, SandboxError):
        return exc
    if isinstance(exc, OSError):
        code, phrase = _BY_ERRNO.get(
            exc.errno or 0, (HOST_ERROR, "could not be accessed: the host filesystem failed")
        )
        return SandboxError(code, shown, phrase)
    if isinstance(exc, UnicodeError | ValueError):
        # os.* refuse lone surrogates that are not escaped bytes, and embedded NULs
        return SandboxError(INVALID_NAME, shown, "is not a valid file name on this host")
    return SandboxError(HOST_ERROR, shown, "could not be accessed: the files tool failed")


@contextmanager
def contained(shown: str) -> Iterator[None]:
    """Turn any host failure inside the block into a ``SandboxError`` naming ``shown``."""
    try:
        yield
    except SandboxError:
        raise
    except (OSError, ValueError) as exc:
        raise explain(exc, shown) from None


def segments_of(resource: str) -> tuple[str, ...]:
    """Segments of a canonical path; raise ``SandboxError`` if it is not canonical."""
    if not isinstance(resource, str) or not resource.startswith("/") or "\x00" in resource:
        raise SandboxError(NOT_CANONICAL, "the resource", "is not a canonical absolute path")
    if resource == "/":
        return ()
    parts = tuple(resource[1:].split("/"))
    if any(p in ("", ".", "..") for p in parts):
        raise SandboxError(NOT_CANONICAL, "the resource", "is not a canonical path")
    if len(parts) > MAX_DEPTH:
        raise SandboxError(
            TOO_DEEP, "/" + "/".join(parts[:3]) + "/...", f"is more than {MAX_DEPTH} levels deep"
        )
    return parts


def _shown(parts: tuple[str, ...]) -> str:
    return "/" + "/".join(parts)


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):  # nothing written through it that a close could lose
        os.close(fd)


class Sandbox:
    """A directory that stands for ``/`` of the files tools' resource space."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        real = os.path.realpath(os.fspath(root))
        if not os.path.isdir(real):
            raise ValueError(f"sandbox root {os.fspath(root)!r} is not a directory")
        self.root = real
        st = os.stat(real)
        # the directory the sandbox was opened on; a root replaced later is refused
        self._identity = (st.st_dev, st.st_ino)

    def _open_root(self) -> int:
        with contained("/"):
            fd = os.open(self.root, _DIR_FLAGS)
            try:
                st = os.fstat(fd)
            except BaseException:
                _close_quietly(fd)
                raise
        if (st.st_dev, st.st_ino) != self._identity:
            _close_quietly(fd)
            raise SandboxError(CHANGED, "/", "is no longer the directory the files tools serve")
        return fd

    def _walk(
        self, parts: tuple[str, ...], *, create: bool, made: list[tuple[int, str]] | None = None
    ) -> int:
        """An fd of the directory ``parts`` below the root, walked without following links.

        ``made`` (with ``create``) collects ``(fd of its parent, name)`` of each directory
        this walk created, the fds open (``_unmake`` closes them)."""
        fd = self._open_root()
        try:
            for i, part in enumerate(parts):
                nxt, created = self._open_dir(fd, part, _shown(parts[: i + 1]), create=create)
                if created and made is not None:
                    made.append((fd, part))
                else:
                    _close_quietly(fd)
                fd = nxt
        except BaseException:
            _close_quietly(fd)  # the deepest one reached: never a parent in ``made``
            raise
        return fd

    @staticmethod
    def _open_dir(fd: int, part: str, shown: str, *, create: bool) -> tuple[int, bool]:
        """An fd of directory ``part`` in ``fd``, and whether this call created it.

        A missing ``part`` is looked up by Unicode equivalence first (``_equivalent``):
        the directory ``cafe\u0301`` (made on macOS) is the one ``café`` names."""
        created = False
        for _ in range(_RACE_RETRIES):
            with contained(shown):
                try:
                    return _open_directory(fd, part, shown), created
                except FileNotFoundError:
                    alias = _equivalent(fd, part, shown)
                    if alias is not None:
                        return _open_directory(fd, alias, shown), False
                    if not create:
                        raise
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                    created = True
                except FileExistsError:
                    continue  # made by someone else since our open: open theirs (checked alike)
        raise SandboxError(CHANGED, shown, "changed while the call ran; try again")

    @contextmanager
    def directory(self, resource: str) -> Iterator[int]:
        """An fd of the directory ``resource``, opened without following links."""
        fd = self._walk(segments_of(resource), create=False)
        try:
            yield fd
        finally:
            _close_quietly(fd)

    @contextmanager
    def parent(self, resource: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
        """``(fd of the parent directory, final name)``; ``create`` makes missing parents.

        When the block fails, the parents it made are removed again (each if still
        empty): a failed call (a full disk) does not leave a new directory tree behind.
        """
        parts = segments_of(resource)
        if not parts:
            raise SandboxError(IS_A_DIRECTORY, "/", "is the root directory, not a file")
        made: list[tuple[int, str]] = []
        try:
            fd = self._walk(parts[:-1], create=create, made=made)
        except BaseException:
            _unmake(made)
            raise
        try:
            yield fd, _existing_spelling(fd, parts[-1], resource)
        except BaseException:
            _close_quietly(fd)
            fd = -1
            _unmake(made)
            raise
        finally:
            if fd >= 0:
                _close_quietly(fd)
            for parent_fd, _name in made:
                _close_quietly(parent_fd)

    @contextmanager
    def probe(self, resource: str) -> Iterator[Probe]:
        """What is at ``resource``, checked with the files tools' rules, without opening it.

        Refuses (``SandboxError``) a symbolic link as any existing component or as
        the object (``symlink``), a regular file with more than one hard link
        (``hard_link``), and a FIFO, socket or device (``not_a_regular_file``).
        Everything is looked at relative to descriptors walked from the root with
        ``O_NOFOLLOW``, so the answer is about the object at the canonical path and
        nothing else. A directory's descriptor is yielded open for further checks
        and closed when the block ends.
        """
        parts = segments_of(resource)
        found = _probe(self._open_root(), parts)
        try:
            yield found
        finally:
            if found.fd >= 0:
                _close_quietly(found.fd)

    def read(self, resource: str, limit: int) -> bytes:
        """Up to ``limit`` bytes of the singly-linked regular file ``resource``, opened
        without following links (``parent`` + ``open_regular``); ``SandboxError`` naming
        ``resource`` for anything else."""
        with self.parent(resource) as (dfd, name):
            fd = self.open_regular(dfd, name, resource)
        try:
            chunks: list[bytes] = []
            left = limit
            with contained(resource):
                while left > 0:
                    chunk = os.read(fd, min(left, 65536))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    left -= len(chunk)
        finally:
            _close_quietly(fd)
        return b"".join(chunks)

    @staticmethod
    def open_regular(dfd: int, name: str, shown: str, *, write: bool = False) -> int:
        """Open ``name`` in ``dfd`` as a singly-linked regular file; return its fd.

        ``write`` opens it for writing, creating it if missing, and does *not*
        truncate (``O_TRUNC`` would empty a refused file before the check):
        the caller truncates the checked descriptor. The type and the link
        count are read from the opened descriptor, so a swap between a check
        and the open cannot slip another file in.

        A FIFO, socket or device is refused before it is opened: opening one is
        an effect of its own (a terminal became the host's controlling terminal,
        a FIFO's waiting writer was let through, a watchdog device starts).
        """
        flags = (os.O_WRONLY | os.O_CREAT) if write else os.O_RDONLY
        st = lstat_at(dfd, name, shown)
        if st is not None:
            check_kind(st, shown)
        with contained(shown):
            fd = os.open(name, flags | _FILE_FLAGS, 0o644, dir_fd=dfd)
        try:
            with contained(shown):
                st = os.fstat(fd)
            check_regular(st, shown)
        except BaseException:
            _close_quietly(fd)
            raise
        return fd


def _open_directory(dfd: int, name: str, shown: str) -> int:
    """``openat(dfd, name, O_DIRECTORY | O_NOFOLLOW)``; a symbolic link there is refused
    as one (``symlink``).

    The kernel answers such an open of a link with ``ENOTDIR`` (or ``ELOOP``), which
    alone said "``/public/docs`` is not a directory (not_a_directory)" of a link to a
    directory: the model was told the path names a file, not that a link was refused.
    """
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dfd)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        st = lstat_at(dfd, name, shown)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise _refuse_link(shown) from None
        raise


def _existing_spelling(dfd: int, name: str, shown: str) -> str:
    """``name``, or the entry of ``dfd`` that spells it in another Unicode normalization
    form when ``name`` itself does not exist (``_equivalent``).

    A canonical path is NFC, and the policy decided on it; a file made on macOS (or
    copied from there) is named in NFD. Without this, such a file was listed but could
    be neither read nor deleted by any spelling, and a write made a second, identical-
    looking file beside it.
    """
    if lstat_at(dfd, name, shown) is not None:
        return name
    return _equivalent(dfd, name, shown) or name


def _unmake(made: list[tuple[int, str]]) -> None:
    """Remove the directories a failed call made, deepest first, each only while empty
    (``rmdir`` never follows a link, and leaves a directory someone has used); close
    their parents' fds."""
    for parent_fd, name in reversed(made):
        with contextlib.suppress(OSError):  # best effort: the failure being reported stands
            os.rmdir(name, dir_fd=parent_fd)
        _close_quietly(parent_fd)
    made.clear()


def check_kind(st: os.stat_result, shown: str, *, why: str = "") -> None:
    """Refuse anything but a regular file, each kind with its own code: a symbolic link
    (``symlink``), a directory (``is_a_directory``), a FIFO, socket or device
    (``not_a_regular_file``). ``why`` is added to the message.

    One place for the kinds: a read of a directory said ``not_a_regular_file`` (the code
    of a FIFO or a device), and so did a delete of a directory or of a link, while a
    write of the same paths said ``is_a_directory`` and ``symlink``.
    """
    if stat.S_ISREG(st.st_mode):
        return
    if stat.S_ISLNK(st.st_mode):
        raise SandboxError(
            SYMLINK, shown, f"is a symbolic link; files tools do not follow links{why}"
        )
    if stat.S_ISDIR(st.st_mode):
        raise SandboxError(IS_A_DIRECTORY, shown, f"is a directory{why}")
    raise SandboxError(NOT_A_REGULAR_FILE, shown, f"is not a regular file{why}")


def check_regular(st: os.stat_result, shown: str) -> None:
    """Refuse anything but a regular file with exactly one link (see the module docstring)."""
    check_kind(st, shown)
    if st.st_nlink > 1:
        raise SandboxError(
            HARD_LINK,
            shown,
            f"has {st.st_nlink} hard links; files tools refuse a file that is also reachable "
            "under another name, which may be outside what this call was allowed",
        )
    if st.st_nlink == 0:
        raise SandboxError(CHANGED, shown, "was removed while the call ran; try again")


#: What ``Sandbox.probe`` found at a canonical path.
ProbeKind = Literal["missing", "directory", "file"]


@dataclass(frozen=True, slots=True)
class Probe:
    """The object at a canonical path, as a link-free walk found it.

    ``kind`` is ``missing`` (some component does not exist, or is not a
    directory: nothing is there to be reached through a link), ``directory``
    (``fd`` is an open descriptor of it, valid inside the ``with`` block) or
    ``file`` (a regular file with exactly one link; ``fd`` is -1).
    """

    kind: ProbeKind
    fd: int = -1


def lstat_at(dfd: int, name: str, shown: str) -> os.stat_result | None:
    """``lstat`` of ``name`` in ``dfd`` (never follows a link); None when it does not
    exist; any other failure as a ``SandboxError`` naming ``shown``."""
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as exc:
        raise explain(exc, shown) from None


def _refuse_link(shown: str) -> SandboxError:
    return SandboxError(SYMLINK, shown, "is a symbolic link")


#: the ASCII characters some other character normalizes to under NFC (U+037E GREEK
#: QUESTION MARK, U+1FEF GREEK VARIA, U+212A KELVIN SIGN: the only ones, checked against
#: the running Python's Unicode database by the tests)
ASCII_TARGETS = frozenset(";`K")


def _unassigned(name: str) -> bool:
    """Does ``name`` hold a code point this Python's Unicode database does not know?"""
    return not name.isascii() and any(unicodedata.category(c) == "Cn" for c in name)


def _equivalent(dfd: int, part: str, shown: str, *, strict: bool = False) -> str | None:
    """The entry of ``dfd`` that is ``part`` in another Unicode normalization form, for a
    ``part`` that does not exist; None when there is none.

    An upstream that looks a missing name up by Unicode equivalence (server-filesystem:
    ``café`` finds ``cafe\u0301``) opens that entry instead, following links as it goes:
    the probe must check the object it will open, not report the canonical spelling
    missing. Two such entries are refused (``equivalent_names``): which one is opened is
    the upstream's choice.

    ``strict`` (the probe of a path an upstream opens): the upstream compares with *its*
    Unicode database, which may know characters this Python's does not (Node 20 has
    Unicode 17, Python 3.11 has 14: to Node, U+105D2 U+0307 is TODHRI LETTER EI, to
    Python two unrelated code points). A ``part`` or an entry holding such a character
    cannot be compared here, so it is refused (``equivalent_names``) rather than called
    missing while the upstream opens that entry.
    """
    want = unicodedata.normalize("NFC", part)
    if want.isascii() and not ASCII_TARGETS.intersection(want):
        # No other spelling exists to look for: an ASCII name is its own NFC form, and the
        # only other characters whose NFC form is ASCII are ``ASCII_TARGETS``' sources. The
        # scan would read the whole directory on every call that names a new file in it
        # (37 ms for a directory of 100,000 entries).
        return None
    if strict and _unassigned(want):
        raise _undecidable(shown)
    try:
        with os.scandir(dfd) as entries:
            found: list[str] = []
            for e in entries:
                if unicodedata.normalize("NFC", e.name) == want:
                    found.append(e.name)
                elif strict and _unassigned(e.name):
                    raise _undecidable(shown)
    except OSError as exc:
        raise explain(exc, shown) from None
    if len(found) > 1:
        raise SandboxError(
            EQUIVALENT_NAMES,
            shown,
            f"does not exist, and {len(found)} names in its directory are spellings of it "
            "in other Unicode normalization forms",
        )
    return found[0] if found and found[0] != part else None


def _undecidable(shown: str) -> SandboxError:
    return SandboxError(
        EQUIVALENT_NAMES,
        shown,
        "does not exist, and whether a name in its directory is a spelling of it cannot be "
        f"decided here: one of them holds a character newer than this host's Unicode "
        f"database ({unicodedata.unidata_version}), which an upstream may know",
    )


def _probe_final(dfd: int, name: str, shown: str) -> Probe:
    st = lstat_at(dfd, name, shown)
    if st is None:
        alias = _equivalent(dfd, name, shown, strict=True)
        st = None if alias is None else lstat_at(dfd, alias, shown)
        if alias is None or st is None:
            return Probe("missing")
        name = alias  # what an upstream looking names up by equivalence opens
    if stat.S_ISLNK(st.st_mode):
        raise _refuse_link(shown)
    if stat.S_ISREG(st.st_mode):
        if st.st_nlink > 1:
            raise SandboxError(
                HARD_LINK,
                shown,
                f"has {st.st_nlink} hard links: the same file is reachable under another name, "
                "which may be outside what this call was allowed",
            )
        return Probe("file")
    if not stat.S_ISDIR(st.st_mode):
        raise SandboxError(NOT_A_REGULAR_FILE, shown, "is not a regular file or a directory")
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
    except (OSError, ValueError) as exc:
        again = lstat_at(dfd, name, shown)
        if again is not None and stat.S_ISLNK(again.st_mode):
            raise _refuse_link(shown) from None  # swapped for a link since the lstat
        raise explain(exc, shown) from None
    return Probe("directory", fd)


def _probe(fd: int, parts: tuple[str, ...]) -> Probe:
    """Walk ``parts`` from the root descriptor ``fd`` (consumed) without following links
    (see ``Sandbox.probe``); the caller closes the ``fd`` of a directory found."""
    if not parts:
        return Probe("directory", fd)
    try:
        for i, part in enumerate(parts[:-1]):
            shown = _shown(parts[: i + 1])
            try:
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    alias = _equivalent(fd, part, shown, strict=True)
                    if alias is None:
                        return Probe("missing")
                    part = alias  # what an upstream looking names up by equivalence opens
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                return Probe("missing")
            except (OSError, ValueError) as exc:
                # O_DIRECTORY|O_NOFOLLOW answers ENOTDIR (or ELOOP) for a link: look at it
                st = lstat_at(fd, part, shown)
                if st is None:
                    return Probe("missing")
                if stat.S_ISLNK(st.st_mode):
                    raise _refuse_link(shown) from None
                if not stat.S_ISDIR(st.st_mode):
                    return Probe("missing")  # a file is not a directory: nothing lies beyond it
                raise explain(exc, shown) from None
            _close_quietly(fd)
            fd = nxt
        return _probe_final(fd, parts[-1], _shown(parts))
    finally:
        _close_quietly(fd)
