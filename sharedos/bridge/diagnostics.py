"""Bridge diagnostics: harness aliases, ``_meta`` correlation keys, client identity.

All of this is presentation and correlation. It is handed to
``RuntimeHost.invoke_tool(diagnostics=...)``, which stores it on the evidence
record; it is never put on the ``ToolCall`` and no decision reads it, so no
alias can reach authorization even by mistake (ADR 0014, "Names").
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sharedos.names import codex_sanitized, dsh_public_name, harness_sanitized, pi_public_names

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

#: Per HTTP request: a list the server side appends to when a ``tools/call`` reached
#: it. The SDK runs each message's handling in the sending request's context, so
#: the transport layer can tell a call the server saw (and recorded) from one the
#: transport rejected before it (see ``RejectedCallRecorder`` in ``sharedos.bridge.http``). Never shared:
#: each request sets its own list.
REACHED_SERVER: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "sharedos_reached_server", default=None
)

#: ``_meta`` keys harnesses send on ``tools/call`` that correlate an attempt with the model's call.
CORRELATION_META_KEYS: tuple[str, ...] = (
    "claudecode/toolUseId",  # Claude Code: equals the model's tool_use.id
    "callId",  # Codex: equals the model's function_call call_id
    "x-codex-turn-metadata",  # Codex: {session_id, thread_id, turn_id, model, ...}
    "threadId",
    "sessionId",
    "itemId",
    "progressToken",
)

_MAX_DIAG_STR = 512


def harness_aliases(server_name: str, tool: str) -> dict[str, Any]:
    """The names each harness would show the model for ``tool`` on server ``server_name``.

    Measured: Claude Code ``mcp__<server>__<tool>``; Codex namespace
    ``mcp__<server>`` + function ``<tool>`` (``-`` also becomes ``_``,
    ``codex_sanitized``); Pi's built-in MCP uses the Claude
    form (``-`` also becomes ``_``; a name over 64 characters is cut and hashed,
    ``pi_public_names``) and pi-mcp-adapter's proxy ``<server>_<tool>``; every
    character outside ``[A-Za-z0-9_-]`` becomes ``_``. dsh uses the Claude form and, when
    sanitizing changed the name, appends ``_`` and 12 hex digits of a hash
    (``mcp__sharedos__files_read_369b5d85e292``).
    """
    server = harness_sanitized(server_name)
    name = harness_sanitized(tool)
    return {
        "claude-code": f"mcp__{server}__{name}",
        "codex": {
            "namespace": f"mcp__{codex_sanitized(server_name)}",
            "name": codex_sanitized(tool),
        },
        "pi": [f"{server}_{name}", pi_public_names(server_name, tool)[0]],
        "dsh": dsh_public_name(server_name, tool),
    }


def bounded(value: object, depth: int = 0) -> object:
    """A JSON-safe, size-bounded copy (diagnostics come from the harness: never trust their size)."""
    if depth > 4:
        return "…"
    if isinstance(value, str):
        return value if len(value) <= _MAX_DIAG_STR else value[:_MAX_DIAG_STR] + "…"
    if isinstance(value, bool | int | float) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k)[:128]: bounded(v, depth + 1) for k, v in list(value.items())[:32]}
    if isinstance(value, list | tuple):
        return [bounded(v, depth + 1) for v in list(value)[:32]]
    return bounded(str(value), depth + 1)


def correlation_from_meta(meta: object) -> dict[str, Any]:
    """The correlation keys found in a request's ``_meta`` (Claude Code, Codex, progress token)."""
    if meta is None:
        return {}
    found: Mapping[str, object]
    if isinstance(meta, Mapping):
        found = meta
    else:
        dump = getattr(meta, "model_dump", None)
        if dump is None:
            return {}
        found = dump(by_alias=True, exclude_none=True)
    return {key: bounded(found[key]) for key in CORRELATION_META_KEYS if key in found}


_SAFE_TOKEN_RE = re.compile(r"[^\x20-\x7e]")


def client_identity(session: ServerSession) -> dict[str, Any]:
    """Client name/version (from ``initialize`` or the 2026 envelope) and the negotiated version."""
    out: dict[str, Any] = {}
    try:
        params = session.client_params
        if params is not None and params.client_info is not None:
            out["clientName"] = _SAFE_TOKEN_RE.sub("?", params.client_info.name)[:128]
            out["clientVersion"] = _SAFE_TOKEN_RE.sub("?", params.client_info.version or "")[:64]
    except Exception:
        pass
    with contextlib.suppress(Exception):
        out["protocolVersion"] = session.protocol_version
    return out
