"""Every reach into the mcp SDK's private state, for mcp 2.3.0 only.

- The session manager has no public "close all sessions": a turn that closes
  while a 2025-11-25 client holds its GET stream would otherwise wait out the
  whole grace period (``_server_instances``).
- It has no public "evict a session" either: at its session cap it answers
  503 to every new ``initialize``, so abandoned sessions would lock a turn
  out until they expire (``_server_instances``, ``_discard_session``).
- The SDK puts its OpenTelemetry middleware on every ``Server``; it lives in
  the private ``mcp.server._otel`` module.
- The 2025-11-25-era transport answers every request POST with an
  ``sse_starlette`` stream, built inline in a private method. A turn's bridge
  decides JSON or stream by the request's first event instead
  (``sharedos.bridge.sse_answer``): ``route_request_streams`` puts a factory in
  the transport module's place of ``EventSourceResponse`` that builds the
  bridge's response for the request POSTs of a bridge (``REQUEST_STREAM``, set
  per request) and the SDK's own everywhere else.
- The stdio client transport reads a server's whole line before parsing it
  (quadratically: each chunk re-joins and re-splits the line so far), so a
  brokered upstream's answer cannot be bounded while it is read. SharedOS's own
  bounded reader (``sharedos.upstream.transport``) reuses the SDK's process
  handling (``spawn_stdio_server``, ``stop_stdio_server``, ``drain_stdio``:
  private helpers of ``mcp.client.stdio``) so spawning and shutdown stay the SDK's.
- The client session checks every tool result against the output schema of its
  own latest listing, on the event loop (seconds for a few MiB of
  ``structuredContent``), and has no switch for it: a brokered upstream's
  session has its ``validate_tool_result`` replaced (``skip_result_validation``);
  the forwarder checks against the schema the turn published, off the loop.

- The streamable-HTTP client cancels a handshake-era (2025-11-25) request by
  POSTing ``notifications/cancelled`` and leaves the request's own POST running:
  its stream stayed open (and was resumed, in a loop) for as long as the
  upstream kept it so, after the caller had given up. ``end_abandoned_posts``
  wraps the transport's private ``_consume_modern_cancellation`` so that the
  abandoned request's POST also ends (its private ``_in_flight_posts`` scope),
  as it does at 2026-07-28; the notification is still sent.
- The same client resumes a request's SSE stream (``Last-Event-ID``) every time
  it ends without the answer, by recursion and with no limit on resumptions that
  connect: an upstream ending each one after an event with an id (``retry: 0``)
  had it GET a hundred times a second until the recursion limit, past which
  the loop swallowed its own cancellation and outlived the call and the session.
  ``end_abandoned_posts`` also wraps the private ``_handle_reconnection``: past
  ``MAX_RESUMES`` resumptions of one request it is answered with an error
  (``TOO_MANY_RESUMES``) instead.

Importing this module on any other mcp version raises ``VendorVersionError``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from collections.abc import Callable
from typing import Any, TextIO, TypeVar

from mcp.client import stdio as _stdio
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import StreamableHTTPTransport
from mcp.server import streamable_http as _streamable_http
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCNotification

from sharedos.compat import require_version

_Lifespan = TypeVar("_Lifespan")

#: the mcp release this module was read against and tested with
WRITTEN_FOR = "2.3.0"
INSTALLED = require_version("mcp", WRITTEN_FOR, __name__)


def session_transports(
    manager: StreamableHTTPSessionManager,
) -> list[tuple[str, StreamableHTTPServerTransport]]:
    """The manager's open stateful sessions (2025-11-25 era), as ``(session id, transport)``."""
    return list(manager._server_instances.items())


async def terminate_sessions(manager: StreamableHTTPSessionManager) -> None:
    """Terminate every open session transport (their GET streams end; in-flight calls are cancelled)."""
    for _, transport in session_transports(manager):
        with contextlib.suppress(Exception):
            await transport.terminate()


def at_session_cap(manager: StreamableHTTPSessionManager) -> bool:
    """True when a request that opens a session would be answered 503 (the cap is reached)."""
    cap = manager.max_sessions
    return cap is not None and len(manager._server_instances) >= cap


async def evict_idle_session(manager: StreamableHTTPSessionManager) -> bool:
    """End the session that has been idle longest (no request in flight); False if none is idle.

    A session with a request in flight — an open GET stream included — has
    an idle deadline of +inf and is never chosen. The session is forgotten at
    once (its id answers 404 from now on, as after the SDK's own idle expiry)
    and its server task ends.
    """
    idle: list[tuple[float, str, StreamableHTTPServerTransport]] = []
    for session_id, transport in session_transports(manager):
        scope = transport.idle_scope
        if scope is not None and math.isfinite(scope.deadline):
            idle.append((scope.deadline, session_id, transport))
    if not idle:
        return False
    _, session_id, transport = min(idle, key=lambda item: item[0])
    if transport.idle_scope is not None:
        transport.idle_scope.cancel()  # what the SDK's idle timeout does when it fires
    await manager._discard_session(session_id, transport)
    return True


#: the SDK's SSE response class, as the transport module imported it
SdkEventSourceResponse: Any = vars(_streamable_http)["EventSourceResponse"]
_RUN_SSE_WRITER = StreamableHTTPServerTransport._run_sse_writer

#: builds the response of a request POST from ``(content, data_sender, headers)``;
#: set by a bridge for the request it hands to the transport (None: the SDK's stream)
REQUEST_STREAM: contextvars.ContextVar[Callable[..., Any] | None] = contextvars.ContextVar(
    "sharedos_request_stream", default=None
)


def _event_source_response(*args: Any, **kwargs: Any) -> Any:
    """The transport's ``EventSourceResponse``: the bridge's for its request POSTs, else the SDK's.

    A request POST's stream is the one whose data sender is the transport's
    ``_run_sse_writer`` (its standalone GET stream and a replay have others).
    """
    build = REQUEST_STREAM.get()
    sender = kwargs.get("data_sender_callable")
    if (
        build is not None
        and not args
        and isinstance(sender, functools.partial)
        and getattr(sender.func, "__func__", None) is _RUN_SSE_WRITER
    ):
        return build(kwargs["content"], sender, kwargs.get("headers") or {})
    return SdkEventSourceResponse(*args, **kwargs)


def route_request_streams() -> None:
    """Let ``REQUEST_STREAM`` choose the response of a request POST (idempotent)."""
    vars(_streamable_http)["EventSourceResponse"] = _event_source_response


def remove_sdk_tracing(server: Server[_Lifespan]) -> None:
    """Take the SDK's OpenTelemetry middleware off ``server`` (the rest of its middleware stays)."""
    server.middleware[:] = [
        m for m in server.middleware if not isinstance(m, OpenTelemetryMiddleware)
    ]


#: seconds the stdio writer may flush accepted messages before stdin closes (the SDK's)
STDIO_WRITER_FLUSH_TIMEOUT: float = _stdio._WRITER_FLUSH_TIMEOUT


async def spawn_stdio_server(params: StdioServerParameters, errlog: TextIO) -> Any:
    """Start a stdio server exactly as ``mcp.client.stdio.stdio_client`` does (its own process
    group, the SDK's minimal inherited environment plus ``params.env``)."""
    command = await _stdio._get_executable_command(params.command)
    return await _stdio._create_platform_compatible_process(
        command=command,
        args=params.args,
        env=_stdio.get_default_environment() | (params.env or {}),
        errlog=errlog,
        cwd=params.cwd,
    )


async def stop_stdio_server(process: Any) -> None:
    """The SDK's shutdown: close stdin, wait, then kill the whole process tree."""
    await _stdio._stop_server_process(process)


async def drain_stdio(process: Any) -> None:
    """Consume and discard what the server still writes (shielded; ends when the pipe closes)."""
    await _stdio._drain_stdout(process)


async def _no_result_validation(name: str, result: Any) -> None:
    return None


def skip_result_validation(session: Any) -> None:
    """Turn off ``session``'s own check of tool results against its listed output schemas
    (see the module docstring: the caller checks them, off the event loop)."""
    if not callable(getattr(session, "validate_tool_result", None)):
        raise AttributeError("this mcp ClientSession has no validate_tool_result to replace")
    session.validate_tool_result = _no_result_validation


_CONSUME_CANCELLATION = StreamableHTTPTransport._consume_modern_cancellation
_HANDLE_RECONNECTION = StreamableHTTPTransport._handle_reconnection
#: resumptions of one request's SSE stream before it is answered with an error instead
MAX_RESUMES = 32
#: JSON-RPC code of that error (SharedOS's range: sharedos.upstream.transport)
TOO_MANY_RESUMES = -32094


def _consume_cancellation(self: StreamableHTTPTransport, session_message: SessionMessage) -> bool:
    """The SDK's own handling of an outbound cancel; then, if the request's POST is still
    in flight (a handshake-era session: the SDK only POSTs the notification), end it too."""
    swallowed = _CONSUME_CANCELLATION(self, session_message)
    message = session_message.message
    if (
        not swallowed
        and isinstance(message, JSONRPCNotification)
        and message.method == "notifications/cancelled"
    ):
        request_id = cancelled_request_id_from_params(message.params)
        post = self._in_flight_posts.get(request_id) if request_id is not None else None
        if post is not None:
            post.scope.cancel()
    return swallowed


async def _bounded_reconnection(
    self: StreamableHTTPTransport,
    ctx: Any,
    last_event_id: str,
    retry_interval_ms: int | None = None,
    attempt: int = 0,
) -> None:
    """The SDK's resumption of a request's stream, at most ``MAX_RESUMES`` times a request
    (the SDK's own recursion comes back through here, so each resumption is counted)."""
    request_id = ctx.session_message.message.id
    counts: dict[Any, int] = self.__dict__.setdefault("_sharedos_resumes", {})
    outermost = request_id not in counts
    counts[request_id] = counts.get(request_id, 0) + 1
    try:
        if counts[request_id] > MAX_RESUMES:
            await self._resolve_abandoned_request(
                ctx.read_stream_writer,
                request_id,
                f"the upstream ended the answer's stream {MAX_RESUMES} times without the "
                "answer; SharedOS stopped resuming it",
                code=TOO_MANY_RESUMES,
            )
            return
        await _HANDLE_RECONNECTION(self, ctx, last_event_id, retry_interval_ms, attempt)
    finally:
        if outermost:
            counts.pop(request_id, None)


def end_abandoned_posts() -> None:
    """Have every streamable-HTTP client end the POST of a request it cancelled, and stop
    resuming a request's stream after ``MAX_RESUMES`` (see the module docstring; idempotent)."""
    StreamableHTTPTransport._handle_reconnection = _bounded_reconnection  # type: ignore[method-assign]
    StreamableHTTPTransport._consume_modern_cancellation = _consume_cancellation  # type: ignore[method-assign]
