"""Every reach into the mcp SDK's private state, for mcp 2.3.0 only.

- The session manager has no public "close all sessions": a turn that closes
  while a 2025-11-25 client holds its GET stream would otherwise wait out the
  whole grace period (``_server_instances``).
- It has no public "evict a session" either: at its session cap it answers
  503 to every new ``initialize``, so abandoned sessions would lock a turn
  out until they expire (``_server_instances``, ``_discard_session``).
- The SDK puts its OpenTelemetry middleware on every ``Server``; it lives in
  the private ``mcp.server._otel`` module.

Importing this module on any other mcp version raises ``VendorVersionError``.
"""

from __future__ import annotations

import contextlib
import math
from typing import TypeVar

from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

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


def remove_sdk_tracing(server: Server[_Lifespan]) -> None:
    """Take the SDK's OpenTelemetry middleware off ``server`` (the rest of its middleware stays)."""
    server.middleware[:] = [
        m for m in server.middleware if not isinstance(m, OpenTelemetryMiddleware)
    ]
