"""JSON-RPC answers the bridge writes itself, for requests the SDK never sees.

A ``tools/call`` that cannot be delivered (see ``sharedos.bridge.frames``) is
refused and recorded by the runtime; its ``ToolResult`` is answered here as
an ordinary ``CallToolResult`` (``isError: true``) in the shape of the
protocol revision the request named — a refusal is a result, never a
JSON-RPC error (ADR 0014). Other undeliverable requests get the JSON-RPC
error a server owes them.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp_types.methods import serialize_server_result
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from sharedos.bridge.frames import RequestId
from sharedos.bridge.results import to_wire_result
from sharedos.kernel import ToolResult

logger = logging.getLogger(__name__)

#: JSON-RPC 2.0 error codes
PARSE_ERROR = -32700
INVALID_REQUEST = -32600

#: the revision assumed when a request names none (the handshake era's default)
DEFAULT_VERSION = "2025-11-25"
_KNOWN = frozenset((*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS))


def call_result(result: ToolResult, version: str | None) -> dict[str, Any]:
    """``result`` as a ``CallToolResult`` wire dict for protocol ``version``."""
    version = version if version in _KNOWN else DEFAULT_VERSION
    wire = to_wire_result(result)
    data: dict[str, Any] = (
        wire.model_dump(by_alias=True, mode="json", exclude_none=True)
        if isinstance(wire, BaseModel)
        else dict(wire)
    )
    if version in MODERN_PROTOCOL_VERSIONS:
        data.setdefault("resultType", "complete")
    try:
        return serialize_server_result("tools/call", str(version), data)
    except Exception:  # never fail an answer: the text alone is always valid
        logger.warning("bridge: a refusal did not fit the %s result model; sent as text", version)
        fallback: dict[str, Any] = {"content": data.get("content", []), "isError": True}
        if version in MODERN_PROTOCOL_VERSIONS:
            fallback["resultType"] = "complete"
        return fallback


def result_message(
    request_id: RequestId, result: ToolResult, version: str | None
) -> dict[str, Any]:
    """A JSON-RPC response carrying ``result`` for ``request_id``."""
    return {"jsonrpc": "2.0", "id": request_id, "result": call_result(result, version)}


#: the JSON-RPC error code of a request whose session ended before it was answered (the
#: code the MCP SDK clients themselves use for a connection that closed under a request)
CONNECTION_CLOSED = -32000
#: its message (HTTP and stdio alike)
UNANSWERED = (
    "the turn closed (or the session ended) before this request was answered; "
    "a tool call still running was cancelled, and recorded as cancelled"
)


def error_message(request_id: RequestId | None, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error response (``id`` null when the request's id could not be read)."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
