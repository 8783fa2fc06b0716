"""``files.read|write|list|search|delete``: managed tools over a sandbox root.

Each handler acts on ``hctx.resource`` — the canonical path the policy
decision authorized — never on the raw argument, and only through
``Sandbox`` (no ``..``, no symbolic links, no hard links, nothing outside the
root). Every handler runs inside one boundary (``_handler``): a refusal or a
host failure (missing file, a link, a full disk, a directory where a file was
expected, an entry renamed away mid-call) is a handler-reported error —
outcome ``failed``, reason ``handler_error`` — whose message names the
canonical path and ends with a stable code such as ``(hard_link)``
(docs/files-tools.md lists them). No ``OSError`` leaves a handler.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import fnmatch
import heapq
import itertools
import os
import re
import secrets
import stat
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sharedos.catalog.definition import ToolAnnotations, ToolDefinition, ToolMetadata
from sharedos.catalog.registry import ToolRegistry
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.pathwalk import (
    CHANGED,
    HARD_LINK,
    IS_A_DIRECTORY,
    MAX_DEPTH,
    NOT_A_DIRECTORY,
    NOT_A_REGULAR_FILE,
    NOT_FOUND,
    PERMISSION_DENIED,
    RESERVED_NAME,
    SYMLINK,
    Sandbox,
    SandboxError,
    check_kind,
    check_regular,
    explain,
)
from sharedos.policy.paths import MAX_PATH_CHARS

FILES_TOOL_NAMES = ("files.delete", "files.list", "files.read", "files.search", "files.write")
#: the tool whose policy decides whether a search may look at a file's content
_READ_TOOL = "files.read"
MAX_READ_BYTES = 1024 * 1024
MAX_SEARCH_RESULTS = 1000
#: the most entries ``files.list`` returns (the first by name); ``truncated`` says there
#: were more. A directory of 200,000 entries was a 54 MB result.
MAX_LIST_ENTRIES = 10_000
#: the most directory entries one ``files.search`` looks at, and the most file content it
#: reads for ``text``; past either it stops and says ``truncated``. Unbounded, a search of
#: a huge tree ran past the handler's timeout, and its thread (which nothing can stop)
#: went on walking after the caller was told the call had failed.
MAX_SEARCH_ENTRIES = 100_000
MAX_SEARCH_READ_BYTES = 256 * 1024 * 1024
#: how a search finds an entry that changed under it (it vanished, or is now a link or
#: another kind of file): skipped silently, as a search a moment later would not see it.
#: Any other failure to look (the host refuses access, an I/O error) is ``truncated``:
#: the entry may hold a match the answer cannot rule out.
_CHANGED_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ESTALE})
_SKIPPED_CODES = frozenset(
    {NOT_FOUND, SYMLINK, NOT_A_DIRECTORY, IS_A_DIRECTORY, NOT_A_REGULAR_FILE, HARD_LINK, CHANGED}
)
#: the longest ``files.search`` pattern: the longest path it can be matched against. The
#: pattern is compiled to a regular expression, in time that grows faster than its length
#: (a 600 KB pattern took 12 s of CPU, a frame's 4 MiB one would outlast the handler's
#: timeout, its thread walking on), and nothing else bounded it.
MAX_PATTERN_CHARS = MAX_PATH_CHARS
#: the prefix of ``files.write``'s temporary file, renamed over the target when complete
TEMP_PREFIX = ".sharedos-write-"

_PATH = {"type": "string", "minLength": 1, "description": "Absolute path, e.g. /public/a.txt"}

#: (arguments, the canonical resource, the handler context: ``files.search`` asks it what
#: it may enter)
_Op = Callable[[dict[str, Any], str, HandlerContext], HandlerResult]


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


def _handler(op: _Op) -> Callable[[dict[str, Any], HandlerContext], HandlerResult]:
    """The one boundary of every files handler: host failures become canonical-path errors."""

    def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        resource = hctx.decision.resource
        if resource is None:  # every files tool's requirement names its resource
            raise LookupError("this call was authorized without a resource")
        try:
            _refuse_reserved(resource)
            return op(args, resource, hctx)
        except (SandboxError, OSError, ValueError) as exc:
            # a host failure becomes a message naming the canonical path only
            error = explain(exc, resource)
            return HandlerResult(
                content=[{"type": "text", "text": str(error)}],
                structured={"path": resource, "code": error.code, "message": str(error)},
                is_error=True,
            )

    handler.__name__ = handler.__qualname__ = op.__name__
    handler.__doc__ = op.__doc__
    return handler


def _reserved(name: str) -> bool:
    """Is ``name`` a write's temporary file (see ``_refuse_reserved``)?"""
    return name.startswith(TEMP_PREFIX)


def _refuse_reserved(resource: str) -> None:
    """Refuse a path through or to a name of the ``TEMP_PREFIX`` form.

    Security: a write's temporary file holds the content meant for its target
    until the rename. Served like any file, it let another caller read that
    content (meant for a file it may not read) or write the temporary name, so
    that the rename put the other caller's content into the target.
    """
    if any(_reserved(part) for part in resource.split("/")):
        raise SandboxError(
            RESERVED_NAME, resource, "is a name the files tools reserve for their temporary files"
        )


#: ``files.read``'s text block after the content of a file longer than was read
_CUT = "[files.read: only the first {n} bytes of {path} are shown; the file is longer.]"
#: ``files.search``'s last line when a limit cut it short
_SEARCH_CUT = (
    "(truncated: the search stopped at a limit or could not look everywhere; "
    "files not shown may match)"
)
#: ``files.read``'s text block for a file that is not UTF-8
_NOT_UTF8 = (
    "[files.read: {path} is not UTF-8 text. Each sequence of bytes in it that is not UTF-8 "
    "is shown above as one U+FFFD; writing this text back with files.write would replace "
    "those bytes.]"
)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


#: how a host says it will not give a file that owner (not permitted; an id a user
#: namespace does not map; a filesystem without owners): the write goes on without
_OWNER_KEPT_NOT = frozenset({errno.EPERM, errno.EACCES, errno.EINVAL, errno.EOPNOTSUPP})


def _keep_owner(fd: int, uid: int, gid: int) -> None:
    """Give the file ``fd`` the owner and group of the file it replaces, as far as the
    host lets this process: both (root, ``CAP_CHOWN``), else the group alone (one the
    process is in), else neither (the file is then the writing process's).

    A host running as root otherwise made every file it replaced root's: a user's own
    file, rewritten by a call, could no longer be changed by that user.
    """
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) == (uid, gid):
        return
    for want in ((uid, gid), (-1, gid)):
        try:
            os.fchown(fd, *want)
        except OSError as exc:
            if exc.errno not in _OWNER_KEPT_NOT:
                raise
            continue
        return


def _unlink_quietly(name: str, dfd: int) -> None:
    with contextlib.suppress(OSError):  # best effort: the failure being reported is the write's
        os.unlink(name, dir_fd=dfd)


class _FilesHandlers:
    """Handlers bound to one sandbox root (no state beyond the root)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def read(self, args: dict[str, Any], resource: str, hctx: HandlerContext) -> HandlerResult:
        """Up to ``max_bytes`` of a singly-linked regular file, as UTF-8 text."""
        limit = int(args.get("max_bytes", MAX_READ_BYTES))
        data = self.sandbox.read(resource, limit + 1)
        truncated = len(data) > limit
        if truncated:
            # cut before a character the limit splits: its first bytes alone would show as
            # U+FFFD, a character the file does not hold (copied back, it corrupts the file)
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            text = decoder.decode(data[:limit], final=False)
            data = data[: limit - len(decoder.getstate()[0])]
        else:
            text = data.decode("utf-8", errors="replace")
        content = [{"type": "text", "text": text}]
        if truncated:
            # said in the text too: a client shows the model the content, and the tool has
            # no output schema that would make it look at ``truncated``
            content.append({"type": "text", "text": _CUT.format(n=len(data), path=resource)})
        utf8 = _is_utf8(data)
        if not utf8:
            # said, not only shown: the text looks like the file, but written back it
            # replaces every byte that was not UTF-8 (a Latin-1 "é", a binary's content)
            content.append({"type": "text", "text": _NOT_UTF8.format(path=resource)})
        return HandlerResult(
            content=content,
            structured={
                "path": resource,
                "bytes": len(data),
                "truncated": truncated,
                "utf8": utf8,
                "content": text,
            },
        )

    def write(self, args: dict[str, Any], resource: str, hctx: HandlerContext) -> HandlerResult:
        """Replace (or create) a file atomically: a temporary file renamed over the target.

        Readers see the old content or the new, never a part; a failure (a full
        disk) leaves the old content as it was. The rename replaces the name in
        the authorized directory only, so even a target that became a hard link
        after the check below cannot carry the write into another file.
        """
        payload = str(args["content"]).encode("utf-8")
        with self.sandbox.parent(resource, create=True) as (dfd, name):
            #: the replaced file's permission bits; None for a new file, which is made as
            #: any program makes one (0666 less the host's umask, or the directory's
            #: default ACL): a fixed 0644 made a file world-readable under umask 077
            mode: int | None = None
            #: the replaced file's owner and group, kept where the host lets the process
            owner: tuple[int, int] | None = None
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                check_regular(st, resource)
                if not os.access(name, os.W_OK, dir_fd=dfd, follow_symlinks=False):
                    # the rename could replace it; the host's "read-only" is kept instead
                    raise SandboxError(
                        PERMISSION_DENIED,
                        resource,
                        "cannot be changed: permission denied by the host",
                    )
                mode = stat.S_IMODE(st.st_mode) & 0o777
                owner = (st.st_uid, st.st_gid)
            temp = f"{TEMP_PREFIX}{secrets.token_hex(8)}.tmp"
            fd = os.open(
                temp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o666 if mode is None else 0o600,
                dir_fd=dfd,
            )
            try:
                try:
                    _write_all(fd, payload)
                    if owner is not None:
                        _keep_owner(fd, *owner)
                    if mode is not None:
                        os.fchmod(fd, mode)
                finally:
                    os.close(fd)
                os.replace(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                _unlink_quietly(temp, dfd)
                raise
        return HandlerResult.text(
            f"wrote {len(payload)} bytes to {resource}",
            structured={"path": resource, "bytes": len(payload)},
        )

    def delete(self, args: dict[str, Any], resource: str, hctx: HandlerContext) -> HandlerResult:
        """Remove one name of a regular file (a hard link's other names keep the content)."""
        with self.sandbox.parent(resource) as (dfd, name):
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            check_kind(st, resource, why="; only files are deleted")
            os.unlink(name, dir_fd=dfd)
        return HandlerResult.text(
            f"deleted {resource}", structured={"path": resource, "deleted": True}
        )

    def list(self, args: dict[str, Any], resource: str, hctx: HandlerContext) -> HandlerResult:
        """The first ``MAX_LIST_ENTRIES`` entries of a directory, by name; entries renamed
        away mid-listing are skipped. Memory is bounded by the limit, not the directory."""
        with self.sandbox.directory(resource) as fd:
            first, total = _first_entries(fd, MAX_LIST_ENTRIES)
            entries = [e for e in (_entry(d) for d in first) if e is not None]
        entries.sort(key=lambda e: e["name"])
        truncated = total > len(first)
        lines = [f"{e['type']}\t{e['name']}" for e in entries]
        if truncated:
            lines.append(
                f"(truncated: the first {len(first)} of {total} entries by name are shown)"
            )
        return HandlerResult.text(
            "\n".join(lines) if lines else f"{resource} is empty",
            structured={"path": resource, "entries": entries, "truncated": truncated},
        )

    def search(self, args: dict[str, Any], resource: str, hctx: HandlerContext) -> HandlerResult:
        """Singly-linked regular files below a directory whose name (or path) matches a glob.

        The call was authorized on its root; below it, each directory is entered and
        each file matched (its name shown, its content read for ``text``) only when
        the policy would allow this same search rooted there: a subtree a rule
        forbids stays out of the results, names and content alike. A file's content is
        looked at for ``text`` only where the caller may also read that file.
        """
        pattern = str(args["pattern"])
        needle = args.get("text")
        permits = hctx.permits
        tool = hctx.call.tool

        def allowed(path: str) -> bool:
            return permits is None or permits(tool, {**args, "root": path})

        def readable(path: str) -> bool:
            # ``text`` looks at a file's content: only where the caller may read it. A
            # search permit alone let a caller refused ``files.read`` (a forbid, or no
            # permit) confirm a file's content guess by guess ("salary=1", "salary=12"…)
            return permits is None or permits(_READ_TOOL, {"path": path})

        walk = _Walk(
            pattern,
            None if needle is None else str(needle).encode("utf-8"),
            int(args.get("max_results", MAX_SEARCH_RESULTS)),
            allowed,
            readable,
        )
        with self.sandbox.directory(resource) as fd:
            depth = 0 if resource == "/" else resource.count("/")
            walk.run(fd, "" if resource == "/" else resource, depth)
        matches = walk.matches
        lines = matches or [f"no match for {pattern!r} under {resource}"]
        if walk.truncated:
            lines = [*lines, _SEARCH_CUT]
        return HandlerResult.text(
            "\n".join(lines),
            structured={
                "root": resource,
                "pattern": pattern,
                "matches": matches,
                "truncated": walk.truncated,
            },
        )


def _scan(fd: int, limit: int) -> tuple[list[os.DirEntry[str]], bool]:
    """At most ``limit`` entries of an open directory, sorted by name, without writes'
    temporary files (no call may reach one: ``_refuse_reserved``); and whether there were
    more (then which ones were kept is the directory's order, not the names')."""
    with os.scandir(fd) as it:
        got = list(itertools.islice((e for e in it if not _reserved(e.name)), limit + 1))
    return sorted(got[:limit], key=lambda e: e.name), len(got) > limit


def _first_entries(fd: int, limit: int) -> tuple[list[os.DirEntry[str]], int]:
    """The first ``limit`` entries of an open directory by name (without writes'
    temporary files), and how many entries it has; holds at most ``limit`` at a time."""
    total = 0

    def counted(it: Iterator[os.DirEntry[str]]) -> Iterator[os.DirEntry[str]]:
        nonlocal total
        for entry in it:
            if not _reserved(entry.name):
                total += 1
                yield entry

    with os.scandir(fd) as it:
        first = heapq.nsmallest(limit, counted(it), key=lambda e: e.name)
    return first, total


def _entry(entry: os.DirEntry[str]) -> dict[str, Any] | None:
    """A listing entry; ``None`` for one that vanished since the directory was read."""
    try:
        st = entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError:
        return {"name": _shown(entry.name), "type": "other", "size": None}
    if stat.S_ISLNK(st.st_mode):
        kind = "symlink"  # listed, never followed
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISREG(st.st_mode):
        # a second name of a file that may live elsewhere: no attribute of it is shown
        kind = "hardlink" if st.st_nlink > 1 else "file"
    else:
        kind = "other"
    return {
        "name": _shown(entry.name),
        "type": kind,
        "size": st.st_size if kind == "file" else None,
    }


#: control characters (C0, DEL, C1) -> their ``\\xNN`` spelling in a shown name
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), *range(0x7F, 0xA0))}


def _shown(name: str) -> str:
    """A file name as text a result can carry: undecodable bytes and control characters
    as ``\\xNN`` escapes.

    Security: a name that is not UTF-8 (``b"x\\xff"``) comes back from the OS
    with a lone surrogate, which no JSON encoder can put on the wire; one such
    name planted in a directory made every listing of it hang the harness. A
    name holding a newline or a tab (``"a.txt\\ndir\\tpasswords"``) made the
    listing's text show entries that do not exist.
    """
    if name.isascii() and name.isprintable():
        return name
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text.translate(_CONTROL)


class _Walk:
    """One search: depth-first over real directories (links are never entered or matched)."""

    def __init__(
        self,
        pattern: str,
        needle: bytes | None,
        limit: int,
        allowed: Callable[[str], bool] = lambda path: True,
        readable: Callable[[str], bool] = lambda path: True,
    ) -> None:
        # NFC, as the names it is matched against: a name typed as a call would name it
        # (``café.txt``) found nothing on disk in NFD, though the search showed it so
        self.pattern = unicodedata.normalize("NFC", pattern)
        #: compiled for this search only: ``fnmatch``'s own cache is the process's, and
        #: kept up to 32,768 compiled patterns of any size from any caller
        self._match = re.compile(fnmatch.translate(self.pattern)).match
        #: a pattern with a ``/`` is matched against a file's path below the search's
        #: root (``src/*.py``) as well as its absolute path (``/repo/src/*.py``): against
        #: the absolute path alone, the pattern a user writes for the tree they search
        #: found nothing, and the search answered "no match"
        self._by_path = "/" in self.pattern
        self._below = 1
        self.needle, self.limit = needle, limit
        #: may the caller's search reach this path (a directory to enter, a file to match)?
        self.allowed = allowed
        #: may the caller read this file (its content looked at for ``text``)?
        self.readable = readable
        self.matches: list[str] = []
        self.truncated = False
        #: what is left of the search's budgets (``MAX_SEARCH_ENTRIES``, ``..._READ_BYTES``)
        self.entries_left = MAX_SEARCH_ENTRIES
        self.bytes_left = MAX_SEARCH_READ_BYTES

    def run(self, dfd: int, prefix: str, depth: int, *, top: bool = True) -> None:
        """Search the open directory ``dfd`` (shown as ``prefix``, ``depth`` components deep)."""
        if top:  # where a path below the search's root starts in a shown path
            self._below = len(prefix) + 1
        try:
            entries, cut = _scan(dfd, self.entries_left)
        except OSError as exc:
            if top:
                raise
            self._could_not_look(exc)  # a subdirectory that cannot be read: skipped, not fatal
            return
        self.entries_left -= len(entries)
        if cut:  # the search has looked at as many entries as it may
            self.truncated = True
        for entry in entries:
            if len(self.matches) >= self.limit:
                self.truncated = True
                return
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                self._could_not_look(exc)  # vanished since the directory was read, or denied
                continue
            # the NFC spelling: the one a call can name (the policy refuses others) and
            # the files tools reach an NFD entry by (docs/files-tools.md, "Unicode names")
            path = f"{prefix}/{_shown(unicodedata.normalize('NFC', entry.name))}"
            if len(path) > MAX_PATH_CHARS:  # no call can name it: left out, and said so
                self.truncated = True
                continue
            if stat.S_ISDIR(st.st_mode):
                if self.allowed(path):
                    self._enter(dfd, entry.name, path, depth)
            elif self._matches(st, entry, dfd, path):
                self.matches.append(path)

    def _could_not_look(self, exc: OSError) -> None:
        """An entry the walk could not look at: said (``truncated``) unless it changed
        under the search (``_CHANGED_ERRNOS``)."""
        if exc.errno not in _CHANGED_ERRNOS:
            self.truncated = True

    def _enter(self, dfd: int, name: str, path: str, depth: int) -> None:
        if depth + 1 >= MAX_DEPTH:  # its files would be deeper than any path the tools serve
            self.truncated = True
            return
        try:
            sub = os.open(
                name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd
            )
        except OSError as exc:
            # vanished or swapped for a link since it was read: skip, never follow
            self._could_not_look(exc)
            return
        try:
            self.run(sub, path, depth + 1, top=False)
        finally:
            os.close(sub)

    def _matches(self, st: os.stat_result, entry: os.DirEntry[str], dfd: int, path: str) -> bool:
        """A singly-linked regular file whose name (or path) matches, holding the text if asked."""
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return False  # a hard link is neither matched nor listed: it may be another's file
        # the shown (NFC) path or name: the one the search answers with and decides on
        if self._by_path:
            found = self._match(path) is not None or self._match(path[self._below :]) is not None
        else:
            found = self._match(path.rpartition("/")[2]) is not None
        if not found or not self.allowed(path):
            return False
        if self.needle is None:
            return True
        return self.readable(path) and self._contains(dfd, entry.name, path)

    def _contains(self, dfd: int, name: str, path: str) -> bool:
        assert self.needle is not None
        if self.bytes_left <= 0:  # the search has read as much content as it may
            self.truncated = True
            return False
        try:
            fd = Sandbox.open_regular(dfd, name, path)  # re-checks type and links on the fd
        except SandboxError as exc:
            if exc.code not in _SKIPPED_CODES:
                self.truncated = True  # its content could not be looked at
            return False
        try:
            data = _read_at_most(fd, MAX_READ_BYTES + 1)
        except OSError as exc:
            self._could_not_look(exc)
            return False
        finally:
            os.close(fd)
        self.bytes_left -= len(data)
        if self.needle in data[:MAX_READ_BYTES]:
            return True
        if len(data) > MAX_READ_BYTES:  # not looked for past the first MiB: said
            self.truncated = True
        return False


def files_tools(
    root: str | os.PathLike[str], *, source: str = "sharedos.builtin"
) -> list[ToolDefinition]:
    """The five files tools bound to sandbox ``root`` (an existing directory)."""
    handlers = _FilesHandlers(Sandbox(root))
    read, write, list_, search, delete = (
        _handler(op)
        for op in (handlers.read, handlers.write, handlers.list, handlers.search, handlers.delete)
    )
    meta = ToolMetadata(namespace="files", source=source)
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    def tool(
        name: str,
        description: str,
        schema: dict[str, Any],
        handler: Callable[[dict[str, Any], HandlerContext], HandlerResult],
        annotations: ToolAnnotations,
    ) -> ToolDefinition:
        return ToolDefinition(
            name=name,
            description=description,
            input_schema=schema,
            annotations=annotations,
            metadata=meta,
            handler=handler,
        )

    max_bytes = {"type": "integer", "minimum": 1, "maximum": MAX_READ_BYTES}
    return [
        tool(
            "files.read",
            "Read a text file. Returns its content (UTF-8, up to 1 MiB).",
            _schema({"path": _PATH, "max_bytes": max_bytes}, ["path"]),
            read,
            read_only,
        ),
        tool(
            "files.write",
            "Write a text file, creating it (and missing parent directories) or replacing it.",
            _schema({"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
            write,
            ToolAnnotations(destructive_hint=True, idempotent_hint=True, open_world_hint=False),
        ),
        tool(
            "files.list",
            "List the entries of a directory (name and type; symbolic links are listed, not followed).",
            _schema({"path": _PATH}, ["path"]),
            list_,
            read_only,
        ),
        tool(
            "files.search",
            "Find files under a directory whose name matches a glob pattern (e.g. '*.txt'; a "
            "pattern containing '/' matches the path below the directory, e.g. 'src/*.py', or "
            "the absolute path), optionally only those containing some text.",
            _schema(
                {
                    "root": _PATH,
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_PATTERN_CHARS,
                    },
                    "text": {"type": "string"},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_RESULTS},
                },
                ["root", "pattern"],
            ),
            search,
            read_only,
        ),
        tool(
            "files.delete",
            "Delete one file (not a directory).",
            _schema({"path": _PATH}, ["path"]),
            delete,
            ToolAnnotations(destructive_hint=True, idempotent_hint=False, open_world_hint=False),
        ),
    ]


def paths_within_root(
    root: str | os.PathLike[str], paths: Iterable[str | os.PathLike[str]]
) -> list[str]:
    """Those of ``paths`` that the files tools over ``root`` could reach: each resolved
    (symbolic links followed, a file not made yet by its directory) and found to be
    ``root`` or under it. A host refuses to serve the files tools over a root that holds
    its own state (the evidence store, the rules, its keys): a permitted ``files.write``
    or ``files.delete`` would change the record of its own calls or the next policy."""
    base = os.path.realpath(root)
    prefix = base.rstrip("/") + "/"
    found = []
    for path in paths:
        real = os.path.realpath(path)
        if real == base or real.startswith(prefix):
            found.append(os.fspath(path))
    return found


def paths_around_root(
    root: str | os.PathLike[str], paths: Iterable[str | os.PathLike[str]]
) -> list[str]:
    """Those of ``paths`` (resolved, as ``paths_within_root``) that are directories ``root``
    lies strictly under: what the files tools write under ``root`` is written into them.
    A rules directory is compiled recursively (every ``*.sos`` below it), so a permitted
    ``files.write`` of ``/x.sos`` under a root inside it added rules to the next run."""
    base = os.path.realpath(root)
    found = []
    for path in paths:
        real = os.path.realpath(path)
        if base.startswith(real.rstrip("/") + "/"):
            found.append(os.fspath(path))
    return found


def root_holds_state(
    root: str | os.PathLike[str], state: Iterable[str | os.PathLike[str]]
) -> str | None:
    """Why the files tools must not be served over ``root``, or None: the paths of
    SharedOS's own ``state`` (the evidence store's files, the rules, the bundle, the
    host's keys) that lie within it (``paths_within_root``), or the state directories
    (a rules directory) it lies within (``paths_around_root``)."""
    state = list(state)
    held = paths_within_root(root, state)
    if held:
        return (
            f"{os.fspath(root)} holds SharedOS's own state ({', '.join(held)}): a files tool "
            "could read or change it; keep the evidence store, the rules and the host's keys "
            "outside the files root"
        )
    around = paths_around_root(root, state)
    if around:
        return (
            f"{os.fspath(root)} lies inside SharedOS's own state ({', '.join(around)}): a "
            "file a files tool writes there becomes part of it (a .sos file under a rules "
            "directory is compiled into the next run's policy); keep the files root outside "
            "the rules and the host's other state"
        )
    return None


def root_holds_runs(
    root: str | os.PathLike[str], runs: Iterable[str | os.PathLike[str]]
) -> str | None:
    """Why the files tools must not be served over ``root``, or None: the directories of
    ``runs`` (``sharedos run --workdir``, the runs' private bases in the temporary
    directory) that lie within it. They hold every turn's directory: the harness's HOME
    and settings, its transcript and tool results, and while the turn runs its MCP
    configuration with the bridge's bearer token; a files tool over them read the token or
    rewrote the harness's settings. A root inside one is served (it reaches no turn
    directory beside it)."""
    held = paths_within_root(root, runs)
    if not held:
        return None
    return (
        f"{os.fspath(root)} holds SharedOS's run directories ({', '.join(held)}): a files "
        "tool could read the harness's transcript and bearer token or change its settings; "
        "give --workdir outside the files root (and no files root holding the temporary "
        "directory)"
    )


def root_holds_code(
    root: str | os.PathLike[str],
    code: Iterable[str | os.PathLike[str]],
    *,
    trees: Iterable[str | os.PathLike[str]] = (),
    inside: Iterable[str | os.PathLike[str]] = (),
) -> str | None:
    """Why the files tools must not be served over ``root``, or None: the paths of ``code``
    the host runs outside any sandbox (the harness CLI, an unconfined stdio upstream's
    program and the ``PATH`` directories a bare name is found in:
    ``confine.programs.code_paths``; the directories the host's Python imports from:
    ``confine.programs.import_dirs``) that lie within ``root``, and the ``trees`` of code
    (SharedOS's own installation: its package, its Python environment, the pinned
    harness CLIs) that lie within ``root`` or that ``root`` lies within, and the directories
    of other code ``inside`` (``cli.run.host_trees``: a repository's git directory an
    unconfined upstream runs git in, a package runner's installs) likewise.

    ``files.write`` replacing a file keeps its permission bits, so an executable stays
    one: a permitted write of ``/.venv/lib/.../sharedos/kernel/authorize.py`` (a root
    over a project holding SharedOS's virtualenv), or of an upstream's server script,
    changed the code the host runs next, outside every sandbox, the policy's enforcement
    included. A confined upstream may not write these paths either
    (``SandboxView.build``'s ``never_writable``). A root inside a program's own directory
    (``~/project/sandbox`` beside ``~/project/server.py``) is served: a file written
    there is new (made without execute bits) and replaces none of the program's."""
    trees = list(trees)
    held = [*paths_within_root(root, code), *paths_within_root(root, trees)]
    keep = (
        "keep SharedOS's installation, the directories Python imports from (sys.path, "
        "PYTHONPATH; an unconfined upstream's env's PYTHONPATH, NODE_PATH, LD_LIBRARY_PATH, LD_PRELOAD "
        "or BASH_ENV, and the cwd "
        "of its python -m: give it a cwd outside the root; its Python's user site-packages: "
        "give it PYTHONNOUSERSITE=1; the cwd of a package runner, npx, npm, pnpm, yarn, bunx or uv run, "
        "whose .npmrc and node_modules there are code: give it a cwd outside the root), the harness CLI, the upstreams' programs, the git repositories an "
        "unconfined upstream is pointed at, git's global configuration (~/.gitconfig, "
        "~/.config/git/config, or the GIT_CONFIG_GLOBAL file that upstream's env names, "
        "the files it includes, its core.hooksPath and the programs it names: core.fsmonitor, "
        "diff.external, a credential.helper, a filter driver) and "
        "a package runner's installs (~/.npm) outside the files root, or confine that "
        "upstream (declare its roots in the host file)"
    )
    if held:
        return (
            f"{os.fspath(root)} holds code SharedOS runs outside any sandbox "
            f"({', '.join(dict.fromkeys(held))}): a files.write there would change the "
            f"program the host runs next; {keep}"
        )
    around = paths_around_root(root, trees)
    if around:
        # said as it is: the root lies inside the installation, it does not hold it
        return (
            f"{os.fspath(root)} lies inside SharedOS's own installation "
            f"({', '.join(dict.fromkeys(around))}): a files.write there would add to or "
            f"change the code the host runs next; {keep}"
        )
    inside = list(inside)
    if os.sep in inside:  # ``host_trees``: an unconfined git server given no repository
        return (
            f"{os.fspath(root)} can be made a git repository that an unconfined "
            "mcp-server-git given no --repository runs git in (its calls name any "
            "repo_path): a files.write of .git/config there would run as the host at its "
            "next git_status; give it --repository REPO outside the files root, or confine "
            "it (declare its roots in the host file)"
        )
    held = paths_within_root(root, inside)
    around = paths_around_root(root, inside)
    if held or around:
        return (
            f"{os.fspath(root)} {'holds' if held else 'lies inside'} code SharedOS runs "
            f"outside any sandbox ({', '.join(dict.fromkeys([*held, *around]))}): a "
            f"files.write there would change the program the host runs next; {keep}"
        )
    return None


def register_files_tools(
    registry: ToolRegistry, root: str | os.PathLike[str], *, source: str = "sharedos.builtin"
) -> list[ToolDefinition]:
    """Register the files tools over sandbox ``root`` in ``registry``; return them."""
    return registry.register_many(files_tools(root, source=source))
