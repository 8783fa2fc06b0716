"""The stdio relay's messages: newline-delimited JSON objects, and a ``ToolResult`` on the wire.

Bridge process -> host (after the hello ``{"version", "secret"}``):
``{"id", "op": "invoke", "tool", "arguments", "diagnostics", "peer"}``,
``{"id", "op": "refuse", "tool", "arguments", "diagnostics", "reason", "detail"}``,
``{"id", "op": "cancel"}``, ``{"id", "op": "peer", "peer", "result" | "error"}``.

Host -> bridge process: the hello answer ``{"ok", "version", "turnId",
"catalogHash", "toolPolicy", "tools"}``, then per call ``{"id", "progress"}``,
``{"id", "log"}``, ``{"id", "peer", "method", "params"}`` and finally
``{"id", "result"}``.

JSON is written ASCII-escaped, so strings JSON can carry but UTF-8 cannot (a
lone surrogate in a tool name) cross unchanged, and no message contains a raw
newline.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from sharedos.errors import BridgeError
from sharedos.kernel import ToolResult
from sharedos.outcomes import Outcome, ReasonCode

RELAY_VERSION = 1
#: the socket's file name in the turn's private directory
RELAY_SOCKET = "relay.sock"
#: a peer has this long to authenticate
AUTH_TIMEOUT_S = 5.0
MAX_HELLO_BYTES = 4096
#: one message from a bridge process (a call's arguments, its diagnostics) may be this large
#: beside ``3 * max_frame_bytes`` (``bridge_message_bytes``)
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: what the bridge process reads of one message from the host: no cap. The host is the
#: trusted side of the channel, and what it sends (a call's result, the turn's catalogue at
#: the hello) is bounded where it is made (a tool's result limits, the catalogue) and goes
#: out to the harness whole anyway; a cap here only cut the channel, and the turn with it,
#: when a legitimate result was larger than the cap once ASCII-escaped.
MAX_HOST_MESSAGE_BYTES = sys.maxsize


def bridge_message_bytes(max_frame_bytes: int) -> int:
    """The largest message the host reads from a bridge process of a turn with these limits.

    A relayed call carries what one stdio frame of ``max_frame_bytes`` held, re-encoded
    as ASCII JSON: a character of two to four UTF-8 bytes becomes one or two ``\\uXXXX``
    escapes of six bytes each, at most three times its size; plus the diagnostics.
    """
    return MAX_MESSAGE_BYTES + 3 * max_frame_bytes


class RelayProtocolError(BridgeError, ValueError):
    """A relay message that is not a JSON object (the peer is dropped)."""


def encode(message: Mapping[str, Any]) -> bytes:
    """One message as a line of ASCII JSON."""
    return json.dumps(message, separators=(",", ":"), default=str).encode("ascii") + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """One line as a message (a JSON object), or ``RelayProtocolError``."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:
        # RecursionError: nesting deeper than Python's parser reads (~1,000 levels); a
        # bridge process never sends it (it refuses frames deeper than 200), a peer might
        raise RelayProtocolError(f"a line that is not JSON ({exc.__class__.__name__})") from None
    if not isinstance(message, dict):
        raise RelayProtocolError("a JSON value that is not an object")
    return message


def result_to_wire(result: ToolResult) -> dict[str, Any]:
    """What the bridge process needs of a ``ToolResult`` (the decision stays with the host)."""
    return {
        "callId": result.call_id,
        "tool": result.tool,
        "outcome": str(result.outcome),
        "reason": str(result.reason) if result.reason is not None else None,
        "content": result.content,
        "structured": result.structured,
        "error": result.error,
        "seq": result.evidence_seq,
    }


def result_from_wire(data: Mapping[str, Any]) -> ToolResult:
    """The ``ToolResult`` the host sent (``RelayProtocolError`` when it is not one)."""
    try:
        content = data["content"]
        structured = data.get("structured")
        if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
            raise TypeError("content")
        if structured is not None and not isinstance(structured, dict):
            raise TypeError("structured")
        reason = data.get("reason")
        return ToolResult(
            call_id=str(data["callId"]),
            tool=str(data["tool"]),
            outcome=Outcome(data["outcome"]),
            reason=ReasonCode(reason) if reason is not None else None,
            decision=None,
            content=content,
            structured=structured,
            error=data.get("error") if isinstance(data.get("error"), str) else None,
            evidence_seq=int(data.get("seq", -1)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RelayProtocolError(f"a result the host cannot have sent ({exc})") from None
