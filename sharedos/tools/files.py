"""``files.read|write|list|search|delete``: managed tools over a sandbox root.

Each handler acts on ``hctx.resource`` — the canonical path the policy
decision authorized — never on the raw argument, and only through
``Sandbox`` (no ``..``, no symlinks, nothing outside the root). Failures
(missing file, a link, a directory where a file was expected) are
handler-reported errors: outcome ``failed``, reason ``handler_error``.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Callable
from typing import Any

from sharedos.catalog.definition import ToolAnnotations, ToolDefinition, ToolMetadata
from sharedos.catalog.registry import ToolRegistry
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.tools.sandbox import Sandbox, SandboxError, explain

FILES_TOOL_NAMES = ("files.delete", "files.list", "files.read", "files.search", "files.write")
MAX_READ_BYTES = 1024 * 1024
MAX_SEARCH_RESULTS = 1000
_FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC

_PATH = {"type": "string", "minLength": 1, "description": "Absolute path, e.g. /public/a.txt"}


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


class _FilesHandlers:
    """Handlers bound to one sandbox root (no state beyond the root)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def read(self, args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        resource = hctx.resource
        limit = int(args.get("max_bytes", MAX_READ_BYTES))
        try:
            with self.sandbox.parent_fd(resource) as (dfd, name):
                try:
                    # O_NONBLOCK: opening a FIFO planted in the tree must not hang the handler
                    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _FILE_FLAGS, dir_fd=dfd)
                except OSError as exc:
                    raise explain(exc, resource) from None
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)
                    raise SandboxError(f"{resource} is not a regular file")
                with os.fdopen(fd, "rb") as fh:
                    data = fh.read(limit + 1)
        except SandboxError as exc:
            return HandlerResult.error(str(exc))
        truncated = len(data) > limit
        data = data[:limit]
        text = data.decode("utf-8", errors="replace")
        return HandlerResult.text(
            text,
            structured={
                "path": resource,
                "bytes": len(data),
                "truncated": truncated,
                "content": text,
            },
        )

    def write(self, args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        resource = hctx.resource
        payload = str(args["content"]).encode("utf-8")
        try:
            with self.sandbox.parent_fd(resource, create=True) as (dfd, name):
                try:
                    fd = os.open(
                        name,
                        os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | _FILE_FLAGS,
                        0o644,
                        dir_fd=dfd,
                    )
                except OSError as exc:
                    raise explain(exc, resource) from None
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)
                    raise SandboxError(f"{resource} is not a regular file")
                with os.fdopen(fd, "wb") as fh:
                    fh.write(payload)
        except SandboxError as exc:
            return HandlerResult.error(str(exc))
        return HandlerResult.text(
            f"wrote {len(payload)} bytes to {resource}",
            structured={"path": resource, "bytes": len(payload)},
        )

    def delete(self, args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        resource = hctx.resource
        try:
            with self.sandbox.parent_fd(resource) as (dfd, name):
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError as exc:
                    raise explain(exc, resource) from None
                if not stat.S_ISREG(st.st_mode):
                    raise SandboxError(f"{resource} is not a regular file; only files are deleted")
                os.unlink(name, dir_fd=dfd)
        except SandboxError as exc:
            return HandlerResult.error(str(exc))
        return HandlerResult.text(
            f"deleted {resource}", structured={"path": resource, "deleted": True}
        )

    def list(self, args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        resource = hctx.resource
        try:
            with self.sandbox.dir_fd(resource) as fd:
                entries = [_entry(e) for e in os.scandir(fd)]
        except SandboxError as exc:
            return HandlerResult.error(str(exc))
        entries.sort(key=lambda e: e["name"])
        lines = [f"{e['type']}\t{e['name']}" for e in entries]
        return HandlerResult.text(
            "\n".join(lines) if lines else f"{resource} is empty",
            structured={"path": resource, "entries": entries},
        )

    def search(self, args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        resource = hctx.resource
        pattern = str(args["pattern"])
        needle = args.get("text")
        limit = int(args.get("max_results", MAX_SEARCH_RESULTS))
        prefix = "" if resource == "/" else resource
        matches: list[str] = []
        try:
            with self.sandbox.dir_fd(resource) as fd:
                _walk(fd, prefix, pattern, needle, matches, limit)
        except SandboxError as exc:
            return HandlerResult.error(str(exc))
        return HandlerResult.text(
            "\n".join(matches) if matches else f"no match for {pattern!r} under {resource}",
            structured={"root": resource, "pattern": pattern, "matches": matches},
        )


def _entry(entry: os.DirEntry[str]) -> dict[str, Any]:
    st = entry.stat(follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        kind = "symlink"  # listed, never followed
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISREG(st.st_mode):
        kind = "file"
    else:
        kind = "other"
    return {
        "name": _shown(entry.name),
        "type": kind,
        "size": st.st_size if kind == "file" else None,
    }


def _shown(name: str) -> str:
    """A file name as text a result can carry: undecodable bytes as ``\\xNN`` escapes.

    Security: a name that is not UTF-8 (``b"x\\xff"``) comes back from the OS
    with a lone surrogate, which no JSON encoder can put on the wire; one such
    name planted in a directory made every listing of it hang the harness.
    """
    if name.isascii():
        return name
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _walk(dfd: int, prefix: str, pattern: str, needle: Any, out: list[str], limit: int) -> None:
    """Depth-first over real directories only (links are never entered or matched)."""
    for entry in sorted(os.scandir(dfd), key=lambda e: e.name):
        if len(out) >= limit:
            return
        st = entry.stat(follow_symlinks=False)
        path = f"{prefix}/{_shown(entry.name)}"
        if stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | _FILE_FLAGS, dir_fd=dfd)
            except OSError:
                continue  # vanished or swapped for a link since scandir: skip, never follow
            try:
                _walk(sub, path, pattern, needle, out, limit)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            target = path if "/" in pattern else _shown(entry.name)
            if not fnmatch.fnmatchcase(target, pattern):
                continue
            if needle is not None and not _contains(dfd, entry.name, str(needle)):
                continue
            out.append(path)


def _contains(dfd: int, name: str, needle: str) -> bool:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _FILE_FLAGS, dir_fd=dfd)
    except OSError:
        return False
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return False
    with os.fdopen(fd, "rb") as fh:
        return needle.encode("utf-8") in fh.read(MAX_READ_BYTES)


def files_tools(
    root: str | os.PathLike[str], *, source: str = "sharedos.builtin"
) -> list[ToolDefinition]:
    """The five files tools bound to sandbox ``root`` (an existing directory)."""
    handlers = _FilesHandlers(Sandbox(root))
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
            handlers.read,
            read_only,
        ),
        tool(
            "files.write",
            "Write a text file, creating it (and missing parent directories) or replacing it.",
            _schema({"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
            handlers.write,
            ToolAnnotations(destructive_hint=True, idempotent_hint=True, open_world_hint=False),
        ),
        tool(
            "files.list",
            "List the entries of a directory (name and type; symbolic links are listed, not followed).",
            _schema({"path": _PATH}, ["path"]),
            handlers.list,
            read_only,
        ),
        tool(
            "files.search",
            "Find files under a directory whose name matches a glob pattern (e.g. '*.txt'; a "
            "pattern containing '/' matches the path), optionally only those containing some text.",
            _schema(
                {
                    "root": _PATH,
                    "pattern": {"type": "string", "minLength": 1},
                    "text": {"type": "string"},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_RESULTS},
                },
                ["root", "pattern"],
            ),
            handlers.search,
            read_only,
        ),
        tool(
            "files.delete",
            "Delete one file (not a directory).",
            _schema({"path": _PATH}, ["path"]),
            handlers.delete,
            ToolAnnotations(destructive_hint=True, idempotent_hint=False, open_world_hint=False),
        ),
    ]


def register_files_tools(
    registry: ToolRegistry, root: str | os.PathLike[str], *, source: str = "sharedos.builtin"
) -> list[ToolDefinition]:
    """Register the files tools over sandbox ``root`` in ``registry``; return them."""
    return registry.register_many(files_tools(root, source=source))
