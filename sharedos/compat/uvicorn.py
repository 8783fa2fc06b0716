"""Every reach into uvicorn's undocumented internals, for uvicorn 0.55.0 only.

uvicorn's public API (``uvicorn.run`` / ``Server.serve``) takes over the host
process's SIGINT/SIGTERM, polls every 100 ms, sleeps a fixed 100 ms on
shutdown and has no read deadline for request headers or bodies. A turn
bridge opens and closes many times in one host process and must not be held
open by a stalled peer, so this module drives uvicorn's pieces itself:

- ``EmbeddedUvicorn`` subclasses ``uvicorn.Server`` and uses its internals
  (``startup``, ``servers``, ``lifespan``, ``server_state``, ``on_tick``,
  ``capture_signals``) for a signal-free, event-driven start and stop;
- ``GuardedH11`` subclasses uvicorn's h11 protocol (its ``conn``, ``cycle``,
  ``timeout_keep_alive_task`` and ``_unset_keepalive_if_required``) to add a
  header read deadline (which also bounds a connection that never sends a
  byte), a body read deadline, and a per-listener connection cap;
- the listening socket asyncio accepts on is a ``PacedListener``
  (``sharedos.compat.asyncio_accept``): out of descriptors, it fails one
  ``accept()`` per pause, not ``backlog`` of them, in one line.

Importing this module on any other uvicorn version raises ``VendorVersionError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import h11
import uvicorn
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from sharedos.compat import require_version
from sharedos.compat.asyncio_accept import PacedListener, quiet_accept_failures
from sharedos.errors import BridgeError

#: the uvicorn release this module was read against and tested with
WRITTEN_FOR = "0.55.0"
INSTALLED = require_version("uvicorn", WRITTEN_FOR, __name__)

#: set in a request's ASGI ``scope["extensions"]`` when its body read deadline expired
BODY_DEADLINE_EXTENSION = "sharedos.body_deadline_expired"

Phase = Literal["headers", "body"]


class BridgeStartError(BridgeError, RuntimeError):
    """The turn's HTTP listener could not be started."""


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Read deadlines and the connection cap of one listener.

    ``header_timeout_s`` runs from the moment a connection is waiting for a
    request (accepted, or its first byte of a keep-alive follow-up) until the
    request's headers are complete; ``body_timeout_s`` from the end of the
    headers until the end of the body. Neither restarts when a byte arrives,
    so trickling bytes does not hold a connection.
    """

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 128


class ConnectionCounters(Protocol):
    """Where the guard counts what it refused (the bridge's ``TransportStats`` is one)."""

    #: connections closed because their request headers did not arrive in time
    header_timeouts: int
    #: connections closed because their request body did not arrive in time
    body_timeouts: int
    #: connections closed at once: the cap was reached and none could make room
    connections_refused: int
    #: idle or stalled connections closed to make room for a new one at the cap
    connections_evicted: int


@dataclass(slots=True)
class _Counters:
    header_timeouts: int = 0
    body_timeouts: int = 0
    connections_refused: int = 0
    connections_evicted: int = 0


class ConnectionGuard:
    """The open connections of one listener, in arrival order, under its limits."""

    def __init__(
        self,
        limits: ConnectionLimits,
        stats: ConnectionCounters,
        trusted: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.limits = limits
        self.stats = stats
        #: whether a request (its ASGI scope) is the listener's own client's (it holds the
        #: turn's token): a connection that carried one is evicted only after all others
        self.trusted = trusted
        self._open: dict[GuardedH11, None] = {}
        #: set whenever no connection is open (stop waits on it)
        self.drained = asyncio.Event()
        self.drained.set()

    @property
    def open(self) -> int:
        """How many connections are open now."""
        return len(self._open)

    def admit(self, connection: GuardedH11) -> bool:
        """Register a new connection; at the cap, close one to make room (``_victim``) or refuse.

        Connections that never carried a request of the listener's own client go first, the
        oldest waiting one before any busy one: the harness's idle keep-alive connection is
        the oldest, and connections without its token (a few silent ones, reopened as they
        time out) evicted it, so its next call went out on a closed socket and was never
        made."""
        if len(self._open) >= self.limits.max_connections:
            victim = self._victim()
            if victim is None:
                self.stats.connections_refused += 1
                return False
            self.stats.connections_evicted += 1
            self.release(victim)
            victim.close()
        self._open[connection] = None
        self.drained.clear()
        return True

    def _victim(self) -> GuardedH11 | None:
        """The connection to close for a new one at the cap, or None when none may go.

        First a waiting one that never carried a request of the listener's own client; then,
        when the listener knows that client, a busy one that never did: such a connection
        is only ever answered 401, and one whose client pipelines requests and reads none
        of the answers stays busy for good, its answer waiting for the client to read (no
        deadline runs while a response is written). Only then one of the client's own: a
        waiting one not ``kept`` (its client has not read its last answer) before a kept one.
        The client's own busy connections are never closed (an answer it is being given).

        Before, a waiting connection not ``kept`` went first whoever's it was: one whose
        client was still reading a large answer (any answer larger than the socket buffers,
        for as long as the client takes to read it) was closed under that answer for a
        connection without the token, while the stranger's own connections stayed open (the
        call ran and was recorded; its answer was lost). And only waiting connections could
        go: a process without the token held the cap with a few hundred kilobytes of
        pipelined requests, and the harness's own connections were refused for good."""
        waiting = [c for c in self._open if c.waiting]
        stranger = next((c for c in waiting if not c.trusted), None)
        if stranger is None and self.trusted is not None:
            stranger = next((c for c in self._open if not c.trusted), None)
        if stranger is not None:
            return stranger
        unread = next((c for c in waiting if not c.kept), None)
        return unread if unread is not None else next(iter(waiting), None)

    def release(self, connection: GuardedH11) -> None:
        """Forget a connection (closed, refused or evicted)."""
        self._open.pop(connection, None)
        if not self._open:
            self.drained.set()


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with read deadlines and the listener's connection cap."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        guard: ConnectionGuard,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._guard = guard
        self._phase: Phase | None = None
        self._deadline: asyncio.TimerHandle | None = None
        #: a request of the listener's own client came on this connection (``ConnectionGuard``)
        self.trusted = False
        self._judged: object = None

    # -- asyncio.Protocol -----------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Accept the connection under the cap, and start its header deadline."""
        super().connection_made(transport)
        if not self._guard.admit(self):
            transport.close()
            return
        self._track()

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the deadline and the keep-alive timer, and tell the guard."""
        super().connection_lost(exc)
        self._set_phase(None)
        # uvicorn cancels the keep-alive timer only on a clean close (exc is None).
        # Measured: the SDK's 2025-11-25 client resets (ConnectionResetError) the
        # connection of every SSE-answered POST, so each legacy tools/call left a live
        # 5 s timer holding this protocol and its request cycle for the collector.
        self._unset_keepalive_if_required()
        self._guard.release(self)

    def data_received(self, data: bytes) -> None:
        """Hand the bytes to h11; the deadline follows the request's progress."""
        super().data_received(data)
        self._track()

    def on_response_complete(self) -> None:
        """A response ended: a pipelined follow-up may already be waiting for its body."""
        super().on_response_complete()
        self._track()

    # -- guard ------------------------------------------------------------------
    @property
    def waiting(self) -> bool:
        """True while no response is being produced: idle, mid-headers or mid-body."""
        return self._phase is not None or self.cycle is None or self.cycle.response_complete

    @property
    def kept(self) -> bool:
        """Evicted only after every other waiting connection: it carried a request of the
        listener's own client (``ConnectionGuard.trusted``), whose client reads its answers."""
        return self.trusted and not self.flow.write_paused

    def close(self) -> None:
        """Close the connection now (no response; bytes not yet sent are dropped)."""
        self._set_phase(None)
        if self.transport is not None:
            drop(self.transport)

    def _track(self) -> None:
        scope = self.scope
        if not self.trusted and scope is not None and scope is not self._judged:
            self._judged = scope
            judge = self._guard.trusted
            self.trusted = judge is not None and judge(scope)  # type: ignore[arg-type]
        if self.transport is None or self.transport.is_closing():
            self._set_phase(None)
            return
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self._set_phase("body")
        elif state is h11.IDLE and self.timeout_keep_alive_task is None and self.waiting:
            # Between requests uvicorn's own keep-alive timer is armed; it is unset
            # as soon as a byte of the next request arrives, and then this deadline runs.
            self._set_phase("headers")
        else:
            self._set_phase(None)

    def _set_phase(self, phase: Phase | None) -> None:
        if phase == self._phase:
            return  # a deadline is never pushed back by more bytes of the same part
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        if phase is not None:
            limits = self._guard.limits
            delay = limits.header_timeout_s if phase == "headers" else limits.body_timeout_s
            self._deadline = self.loop.call_later(delay, self._expire, phase)

    def _expire(self, phase: Phase) -> None:
        self._deadline = None
        stats = self._guard.stats
        if phase == "headers":
            stats.header_timeouts += 1
        else:
            stats.body_timeouts += 1
            if self.scope is not None:
                extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
                extensions[BODY_DEADLINE_EXTENSION] = {}
        self._phase = None
        drop(self.transport)


def drop(transport: asyncio.BaseTransport) -> None:
    """Close ``transport`` now, dropping what it has not sent yet.

    ``close()`` waits for the write buffer to drain first: a peer that stops
    reading a large response (a window of zero) kept such a connection, its
    descriptor and its buffered response (megabytes) forever, past the
    deadline, the eviction or the turn that meant to be rid of it.
    """
    if isinstance(transport, asyncio.Transport):
        transport.abort()
    else:
        transport.close()


class EmbeddedUvicorn(uvicorn.Server):
    """uvicorn without signal capture, without the 100 ms tick loop, with an event-driven stop."""

    def __init__(self, config: Config, guard: ConnectionGuard | None = None) -> None:
        super().__init__(config)
        self.guard = guard or ConnectionGuard(ConnectionLimits(), _Counters())
        if config.http is GuardedH11:
            config.http = functools.partial(GuardedH11, guard=self.guard)  # type: ignore[assignment]

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
        quiet_accept_failures()
        try:
            await self.startup(sockets=[PacedListener.of(sock)])
        except SystemExit as exc:  # uvicorn exits the process on a failed lifespan
            raise BridgeStartError("the bridge's ASGI lifespan failed to start") from exc
        if not self.started:
            raise BridgeStartError("the bridge's HTTP listener did not start")
        # What the tick loop would have done once: fixed default headers.
        await self.on_tick(0)

    async def add_socket(self, sock: socket.socket) -> None:
        """Also accept on ``sock`` (a listener handed out of a harness sandbox's own loopback).

        The same protocol factory ``startup`` uses (uvicorn 0.55 builds it inline),
        so every connection shares the server state, the guard and the app; ``stop``
        closes it with the others.
        """
        config = self.config

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
                _loop=_loop,
            )

        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            create_protocol, sock=PacedListener.of(sock), backlog=config.backlog
        )
        self.servers.append(server)

    async def stop(self, sock: socket.socket, *, grace_s: float) -> None:
        """Stop accepting, drain or close every connection, shut the lifespan down."""
        self.should_exit = True
        for server in self.servers:
            server.close()
        sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        if self.server_state.connections:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.guard.drained.wait(), timeout=grace_s)
        for connection in list(self.server_state.connections):
            transport: asyncio.BaseTransport | None = getattr(connection, "transport", None)
            if transport is not None:
                drop(transport)
        for task in list(self.server_state.tasks):
            task.cancel()
        if self.server_state.tasks:
            await asyncio.wait(list(self.server_state.tasks), timeout=grace_s)
        for server in self.servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), timeout=grace_s)
        await self.lifespan.shutdown()


def embedded_config(app: Any, *, grace_s: float, keep_alive_s: float) -> Config:
    """A uvicorn config for one turn: guarded h11, no logging setup, no access log, no proxy
    headers, idle keep-alive connections closed after ``keep_alive_s``.

    ``app`` is any ASGI 3 application (uvicorn types it loosely itself).
    """
    return Config(
        app,
        http=GuardedH11,
        ws="none",
        lifespan="on",
        log_config=None,  # never reconfigure the host's logging
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
        proxy_headers=False,  # nothing in front of a loopback turn listener may rewrite the peer
        timeout_keep_alive=keep_alive_s,  # type: ignore[arg-type]  # uvicorn reads a float
        timeout_graceful_shutdown=max(1, round(grace_s)),  # unused: stop() applies grace_s itself
        loop="none",
    )
