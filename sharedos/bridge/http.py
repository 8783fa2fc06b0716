"""Streamable HTTP for one turn: a socket we bind, an embedded uvicorn, a bearer token.

Why not ``uvicorn.run``: stock uvicorn takes over SIGINT/SIGTERM of the host
process, polls every 100 ms, and its shutdown sleeps a fixed 100 ms and then
polls again in 100 ms steps. A turn opens and closes many times per process,
so this module starts uvicorn's pieces directly (no signal capture, no tick
loop) and stops them event-driven: stop accepting, terminate the SDK's session
transports (a legacy client's GET stream would otherwise hold the connection),
close idle keep-alive connections, wait for in-flight responses only as long
as the grace allows, then close what is left.

The socket is created with ``IPPROTO_TCP`` explicitly: asyncio sets
``TCP_NODELAY`` on accepted connections only when the listening socket's proto
is ``IPPROTO_TCP``; with proto 0 every response waits ~40 ms for the peer's
delayed ACK (Nagle).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from sharedos.bridge.diagnostics import REACHED_SERVER

LOOPBACK = "127.0.0.1"


class BridgeStartError(RuntimeError):
    """The turn's HTTP listener could not be started."""


class TurnHttpApp:
    """The whole HTTP surface of one turn, as one ASGI layer.

    - ``lifespan`` runs the SDK's session manager (started when the turn opens,
      stopped when it closes);
    - every HTTP request must carry this turn's bearer token, compared with
      ``hmac.compare_digest`` (constant time), else 401 — checked before anything
      else, so nothing about the endpoint leaks to a caller without it;
    - only ``path`` exists (404 elsewhere);
    - a POST goes through ``RejectedCallRecorder`` (a ``tools/call`` the
      transport rejects is still recorded), then to the SDK's transport, whose
      Host/Origin (DNS-rebinding) check and body-size limit apply as usual.

    Why not the SDK's Starlette app: one listener serves exactly one turn at one
    path with one credential, so its router, two exception middlewares and the
    per-message ``send`` wrappers they add do nothing here but cost latency on
    every call (measured: 6-10 % of a tools/call round trip). uvicorn itself
    answers 500 for an exception that escapes before a response started.
    """

    def __init__(
        self,
        manager: Any,
        *,
        path: str,
        token: str,
        on_rejected: Callable[[Any, int], Any],
    ) -> None:
        if len(token) < 32:
            raise ValueError("a turn token must be at least 32 characters of secret")
        self._manager = manager
        self._path = path
        self._expected = b"bearer " + token.encode("ascii")
        self._handle: ASGIApp = manager.asgi_app
        self._post = RejectedCallRecorder(manager.asgi_app, on_rejected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            if not self._authorized(scope):
                await _unauthorized(send)
            elif scope["path"] != self._path:
                await _not_found(send)
            elif scope["method"] == "POST":
                await self._post(scope, receive, send)
            else:
                await self._handle(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    def _authorized(self, scope: Scope) -> bool:
        presented = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                presented = value
                break
        # Case-insensitive scheme (RFC 7235), exact token.
        return hmac.compare_digest(presented[:7].lower() + presented[7:], self._expected)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        started = False
        try:
            await receive()  # lifespan.startup
            async with self._manager.run():
                await send({"type": "lifespan.startup.complete"})
                started = True
                await receive()  # lifespan.shutdown
        except BaseException as exc:
            failed = "lifespan.shutdown.failed" if started else "lifespan.startup.failed"
            await send({"type": failed, "message": f"{type(exc).__name__}: {exc}"})
            raise
        await send({"type": "lifespan.shutdown.complete"})


class RejectedCallRecorder:
    """ASGI wrapper for POSTs: a ``tools/call`` the SDK's transport rejects is still an attempt.

    Security (ADR 0014: an attempt that leaves no trace is the outcome this
    boundary must not produce): a ``tools/call`` in a JSON-RPC batch, with
    non-object ``params``, a wrong ``jsonrpc`` version, without an ``id`` or
    with an unknown session is answered by the SDK's transport (4xx, or 202
    for a "notification") and never reaches the server, so its handler and
    middleware cannot record it. This layer keeps the POST body and, when the
    response is a rejection (4xx/5xx, or 202) and the body names ``tools/call``, hands
    each such call to ``on_rejected(body_item, status)`` (which records a
    refusal; nothing is run) — unless the server did see the call (then the
    server recorded it; ``REACHED_SERVER`` tells the two apart). The body is
    bounded by the SDK's size limit (413 beyond it), which sits inside this
    layer.
    """

    def __init__(self, app: ASGIApp, on_rejected: Callable[[Any, int], Any]) -> None:
        self._app = app
        self._on_rejected = on_rejected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        chunks: list[bytes] = []
        state = {"status": 0, "complete": False, "recorded": False}
        reached: list[str] = []  # the server appends when a tools/call reached it

        async def keep() -> Any:
            message = await receive()
            if message.get("type") == "http.request":
                chunks.append(message.get("body", b""))
                state["complete"] = not message.get("more_body", False)
            return message

        async def watch(message: Any) -> None:
            if message["type"] == "http.response.start":
                state["status"] = int(message["status"])
                # recorded before the rejection goes out, like every other attempt
                if (
                    _rejected(state["status"])
                    and not reached
                    and state["complete"]
                    and _names_call(chunks)
                ):
                    state["recorded"] = True
                    await self._record(b"".join(chunks), state["status"])
            await send(message)

        marker = REACHED_SERVER.set(reached)
        try:
            await self._app(scope, keep, watch)
        finally:
            REACHED_SERVER.reset(marker)
        if _rejected(state["status"]) and not state["recorded"] and not reached:
            # rejected before the body was read (e.g. a wrong Accept header): read it now
            while not state["complete"] and sum(map(len, chunks)) <= _MAX_REJECTED_BODY:
                if (await keep()).get("type") != "http.request":
                    break
            if state["complete"] and _names_call(chunks):
                await self._record(b"".join(chunks), int(state["status"]))

    async def _record(self, body: bytes, status: int) -> None:
        import json

        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):
            return  # not JSON: no method can be read from it
        items = parsed if isinstance(parsed, list) else [parsed]
        for item in items:
            if isinstance(item, dict) and item.get("method") == "tools/call":
                await self._on_rejected(item, status)


#: the most of a rejected body read only to record the tools/call in it
_MAX_REJECTED_BODY = 1024 * 1024


def _rejected(status: int) -> bool:
    """A status that means the server never handled the message: 4xx/5xx, or 202 (a
    "notification", which a server drops). 0 — no response at all — is a call the
    server did take and that was then cancelled (the kernel recorded that)."""
    return status == 202 or status >= 400


def _names_call(chunks: list[bytes]) -> bool:
    return b"tools/call" in b"".join(chunks)


async def _not_found(send: Send) -> None:
    await _respond(send, 404, b"text/plain; charset=utf-8", b"Not Found")


async def _unauthorized(send: Send) -> None:
    await _respond(
        send,
        401,
        b"application/json",
        b'{"error":"invalid_token","error_description":"Authentication required"}',
        (
            b"www-authenticate",
            b'Bearer error="invalid_token", error_description="Authentication required"',
        ),
    )


async def _respond(
    send: Send, status: int, content_type: bytes, body: bytes, *headers: tuple[bytes, bytes]
) -> None:
    """A whole small response, answered by this layer itself."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _TrackedH11(H11Protocol):
    """h11 protocol that tells the server when a connection goes, so stop can wait on an event."""

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        # uvicorn 0.54 cancels the keep-alive timer only on a clean close (exc is None).
        # Measured: the SDK's 2025-11-25 client resets (ConnectionResetError) the
        # connection of every SSE-answered POST, so each legacy tools/call left a live
        # 5 s timer holding this protocol, its request cycle and buffers (~25 objects;
        # >1000 dead connections at a time under load) for the garbage collector's
        # full passes to walk. A lost connection needs no keep-alive timer.
        self._unset_keepalive_if_required()
        notify: Callable[[], None] | None = getattr(self.server_state, "on_connection_lost", None)
        if notify is not None:
            notify()


class EmbeddedUvicorn(uvicorn.Server):
    """uvicorn without signal capture, without the 100 ms tick loop, with an event-driven stop."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._drained = asyncio.Event()
        self.server_state.on_connection_lost = self._connection_lost  # type: ignore[attr-defined]

    def _connection_lost(self) -> None:
        if not self.server_state.connections:
            self._drained.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """The host process owns its signals; a turn never captures them."""
        yield

    async def start(self, sock: socket.socket) -> None:
        """Run the ASGI lifespan and start accepting on ``sock``; return once serving."""
        config = self.config
        if not config.loaded:
            config.load()
        self.lifespan = config.lifespan_class(config)
        try:
            await self.startup(sockets=[sock])
        except SystemExit as exc:  # uvicorn exits the process on a failed lifespan
            raise BridgeStartError("the bridge's ASGI lifespan failed to start") from exc
        if not self.started:
            raise BridgeStartError("the bridge's HTTP listener did not start")
        # What the tick loop would have done once: fixed default headers.
        await self.on_tick(0)

    async def stop(self, sock: socket.socket, *, grace_s: float) -> None:
        """Stop accepting, drain or close every connection, shut the lifespan down."""
        self.should_exit = True
        for server in self.servers:
            server.close()
        sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        if self.server_state.connections:
            self._drained.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), timeout=grace_s)
        for connection in list(self.server_state.connections):
            transport: Any = getattr(connection, "transport", None)
            if transport is not None:
                transport.close()
        for task in list(self.server_state.tasks):
            task.cancel()
        if self.server_state.tasks:
            await asyncio.wait(list(self.server_state.tasks), timeout=grace_s)
        for server in self.servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), timeout=grace_s)
        await self.lifespan.shutdown()


def bind_loopback() -> socket.socket:
    """A listening TCP socket on 127.0.0.1 with an ephemeral port (``IPPROTO_TCP``: see module doc)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.bind((LOOPBACK, 0))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def embedded_config(app: Any, *, grace_s: float) -> uvicorn.Config:
    """A uvicorn config for one turn: no logging setup, no access log, no server/date headers."""
    return uvicorn.Config(
        app,
        http=_TrackedH11,
        ws="none",
        lifespan="on",
        log_config=None,  # never reconfigure the host's logging
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=max(1, round(grace_s)),  # unused: stop() applies grace_s itself
        loop="none",
    )
