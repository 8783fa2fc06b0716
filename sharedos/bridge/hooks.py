"""Transport hooks a bridge hands to a handler (``HandlerContext.progress/log/peer``).

They are built per request from the SDK's request context, so a handler's
progress and log notifications ride the response stream of the call that
produced them, and a peer request (sampling, elicitation) goes to the client
that made the call — never to another turn's client.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server.connection import allowed_log_levels
from mcp.server.context import ServerRequestContext

#: The SDK's per-request context as the bridge's handlers receive it (default lifespan state;
#: the request object is the transport's own: a Starlette request on HTTP, None on stdio).
RequestContext = ServerRequestContext[dict[str, Any], Any]

_LEVELS: tuple[str, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)


class LogGate:
    """The minimum log level a handshake-era client asked for with ``logging/setLevel`` (per turn)."""

    def __init__(self) -> None:
        self.minimum: str = "debug"

    def allows(self, level: str) -> bool:
        """True when ``level`` is at or above the client's requested minimum."""
        try:
            return _LEVELS.index(level) >= _LEVELS.index(self.minimum)
        except ValueError:
            return False


class BridgePeer:
    """Server→client requests for one call: sampling and elicitation, where the transport allows."""

    def __init__(self, ctx: RequestContext) -> None:
        self._ctx = ctx

    @property
    def can_request(self) -> bool:
        """Whether this call's channel can carry a server→client request (stateful sessions, stdio)."""
        try:
            return bool(self._ctx.session.can_send_request)
        except Exception:
            return False

    def client_supports(self, capability: str) -> bool:
        """Whether the client declared ``capability`` (``"sampling"``, ``"elicitation"``).

        ``elicitation`` means form mode, the only mode ``elicit`` sends: a client that
        declared URL mode alone must not be sent a form (2025-11-25: a server MUST NOT
        send a mode the client did not declare; an empty ``elicitation`` is form mode).
        """
        caps = self._ctx.session.client_capabilities
        declared = getattr(caps, capability, None) if caps is not None else None
        if declared is None:
            return False
        if capability == "elicitation":
            return declared.form is not None or declared.url is None
        return True

    def client_name(self) -> str | None:
        """The name and version the client gave in ``initialize`` (None when it gave none)."""
        try:
            info = self._ctx.session.client_params.client_info  # type: ignore[union-attr]
        except Exception:
            return None
        name = getattr(info, "name", None)
        version = getattr(info, "version", None)
        return f"{name} {version}" if name and version else (str(name) if name else None)

    async def create_message(self, prompt: str, *, max_tokens: int = 100) -> dict[str, Any]:
        """Ask the client's model (``sampling/createMessage``); the result as a wire dict."""
        request = types.CreateMessageRequest(
            params=types.CreateMessageRequestParams(
                messages=[
                    types.SamplingMessage(
                        role="user", content=types.TextContent(type="text", text=prompt)
                    )
                ],
                max_tokens=max_tokens,
            )
        )
        from mcp.shared.message import ServerMessageMetadata

        result = await self._ctx.session.send_request(
            request,
            types.CreateMessageResult,
            metadata=ServerMessageMetadata(related_request_id=self._ctx.request_id),
        )
        dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return dumped

    async def elicit(self, message: str, requested_schema: dict[str, Any]) -> dict[str, Any]:
        """Ask the user through the client (``elicitation/create``, form mode); the result as a wire dict."""
        result = await self._ctx.session.elicit_form(
            message, requested_schema, related_request_id=self._ctx.request_id
        )
        dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return dumped


def carriable(value: object, depth: int = 0) -> object:
    """``value`` with every string (or key) UTF-8 cannot encode spelled in backslash escapes.

    A lone surrogate (a file name decoded with ``surrogateescape``, say) is text no
    JSON encoder can put on the wire. A handler's progress message or log data
    holding one made the SDK fail to serialize the notification: on HTTP the
    call's stream broke and its answer never arrived, on stdio the whole bridge
    exited. Their words are informational; ``\\udcff`` keeps them legible.
    Plain text is returned as it is (an ASCII string costs one check).
    """
    if isinstance(value, str):
        if value.isascii():
            return value
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if depth > 100:
        return value
    if isinstance(value, dict):
        return {carriable(k, depth + 1): carriable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [carriable(v, depth + 1) for v in value]
    return value


def make_hooks(ctx: RequestContext, gate: LogGate) -> dict[str, Any]:
    """``{"progress", "log", "peer"}`` for one ``tools/call`` request context."""
    session = ctx.session

    async def progress(
        value: float, total: float | None = None, message: str | None = None
    ) -> None:
        # A no-op unless the request carried _meta.progressToken (SDK behaviour).
        if message is not None:
            message = str(carriable(message))
        await session.report_progress(value, total, message)

    async def log(level: str, data: object) -> None:
        # The request's allowed levels are worked out only when a handler logs
        # (most calls never do): this hook is built on every tools/call.
        modern_levels = allowed_log_levels(
            ctx.protocol_version, dict(ctx.meta) if ctx.meta else None
        )
        if level not in _LEVELS or level not in modern_levels or not gate.allows(level):
            return
        # Request-scoped: on 2026-07-28 a log may only ride the call's own stream.
        await session.send_notification(
            types.LoggingMessageNotification(
                params=types.LoggingMessageNotificationParams(level=level, data=carriable(data))
            ),
            related_request_id=ctx.request_id,
        )

    peer = BridgePeer(ctx) if session.can_send_request else None
    return {"progress": progress, "log": log, "peer": peer}
