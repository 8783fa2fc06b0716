"""``open_turn``: one turn's bridge, opened and closed with the turn.

On entry the catalogue is computed once (``kernel.list_tools``) and its
catalogHash is fixed for the life of the turn; on exit the bridge closes and,
for HTTP, the listening port is released, so a harness that outlives its turn
finds a refused connection rather than a door onto a turn that has ended.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from math import inf
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio

from sharedos.bridge.limits import TransportLimits, TransportStats
from sharedos.bridge.server import DEFAULT_SERVER_NAME, TurnEndpoint
from sharedos.context import AccessContext
from sharedos.evidence.turns import evidence_turn
from sharedos.kernel import RuntimeHost, TurnCatalog
from sharedos.redaction import Redactor
from sharedos.toolpolicy import ToolPolicy

if TYPE_CHECKING:
    from sharedos.bridge.turnfile import StdioLaunch

Transport = Literal["http", "stdio"]


@dataclass
class Turn:
    """What a host hands to the harness for one turn, and what it keeps for the record.

    ``url`` and ``token`` are set for HTTP (pass the token as
    ``Authorization: Bearer <token>``; never log it). ``command`` is set for
    stdio (the MCP server command line the harness launches). ``catalog`` and
    ``catalog_hash`` are fixed for the life of the turn. ``transport_stats``
    counts what the HTTP transport refused or bounded (timed-out and refused
    connections, evicted sessions, malformed requests); a stdio bridge runs
    in its own process and keeps its counts there.
    """

    transport: Transport
    context: AccessContext
    tool_policy: ToolPolicy
    catalog: TurnCatalog
    catalog_hash: str
    server_name: str
    url: str | None = None
    token: str | None = field(default=None, repr=False)
    command: list[str] | None = None
    #: stdio, relayed: the secret the bridge process proves itself with (in the turn file);
    #: like ``token``, whatever the harness prints must be scrubbed of it
    relay_secret: str | None = field(default=None, repr=False)
    turn_file: Path | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    endpoint: TurnEndpoint | None = field(default=None, repr=False)
    transport_stats: TransportStats = field(default_factory=TransportStats)
    #: HTTP: also serve this turn on another listening socket (a harness sandbox's own
    #: loopback, ``sharedos.confine``); it closes with the turn
    serve_socket: Callable[[socket.socket], Awaitable[None]] | None = field(
        default=None, repr=False
    )

    @property
    def catalogHash(self) -> str:
        """Alias of ``catalog_hash`` in wire spelling."""
        return self.catalog_hash

    @property
    def port(self) -> int | None:
        """The HTTP port (released when the turn closes)."""
        if self.url is None:
            return None
        return int(self.url.split(":")[2].split("/")[0])

    def headers(self) -> dict[str, str]:
        """HTTP headers a client needs for this turn (the bearer token)."""
        if self.token is None:
            return {}
        return {"Authorization": f"Bearer {self.token}"}


def compute_catalog(
    runtime_host: RuntimeHost, context: AccessContext, tool_policy: ToolPolicy
) -> TurnCatalog:
    """The turn's catalogue: ``kernel.list_tools(context, tool_policy)`` (a ``TurnCatalog``)."""
    return runtime_host.kernel.list_tools(context, tool_policy)


@contextlib.asynccontextmanager
async def open_turn(
    runtime_host: RuntimeHost,
    context: AccessContext,
    tool_policy: ToolPolicy,
    *,
    transport: Transport = "http",
    server_name: str = DEFAULT_SERVER_NAME,
    portable_names: bool = False,
    identity: Mapping[str, Any] | None = None,
    grace_s: float = 0.5,
    stdio: StdioLaunch | None = None,
    limits: TransportLimits | None = None,
) -> AsyncIterator[Turn]:
    """Open one turn's bridge; close it (and release its port) when the block exits.

    ``transport="http"``: streamable HTTP on 127.0.0.1, an ephemeral port, a
    per-turn bearer token, Host/Origin (DNS-rebinding) protection on.
    ``transport="stdio"``: writes a private turn file and yields the command
    line the harness launches (``stdio``: a ``StdioLaunch``, by default a
    relayed one: the bridge process relays every call to this host, which
    runs it with this runtime, brokered upstreams included); closing the turn
    removes the turn's open-marker, and the stdio bridge then refuses (and
    this host records) every further call and exits within
    ``stdio.close_linger_s``.
    ``limits``: the transport's deadlines and caps (``TransportLimits``; the
    defaults suit a harness on loopback).

    A turn id names one turn: opening a turn whose id is open on this host already
    (``RuntimeHost.open_turn_id``) raises ``ValueError`` before anything is listed or
    written; so does one whose id names a turn that has closed (its chain sealed in the
    store: ``evidence_turn``), before the turn is handed out. A turn whose transport fails
    to open writes no record: its id can be opened again.
    """
    started = time.perf_counter()
    if transport not in ("http", "stdio"):
        # refused before the turn's opening record: found after it, the turn was opened and
        # sealed for nothing, and its id, sealed, could not be opened again
        raise ValueError(f"unknown bridge transport {transport!r} (expected 'http' or 'stdio')")
    if isinstance(grace_s, bool) or not isinstance(grace_s, int | float) or not 0 <= grace_s < inf:
        # refused here, before anything is listed, bound or written: found by uvicorn's
        # config, NaN was "cannot convert float NaN to integer", infinity an OverflowError,
        # each after the listener was bound (and left open); a negative one meant 0
        raise ValueError(f"grace_s must be a finite number of seconds, 0 or more (got {grace_s!r})")
    # one open turn per id on a host: the id names the turn's evidence chain (a second
    # turn of it, another principal's, would write into the first's and outlive its seal)
    hold = getattr(runtime_host, "open_turn_id", None)
    with hold(context.turn_id) if hold is not None else contextlib.nullcontext():
        async with _open_turn(
            runtime_host,
            context,
            tool_policy,
            started,
            transport=transport,
            server_name=server_name,
            portable_names=portable_names,
            identity=identity,
            grace_s=grace_s,
            stdio=stdio,
            limits=limits,
        ) as turn:
            yield turn


@contextlib.asynccontextmanager
async def _open_turn(
    runtime_host: RuntimeHost,
    context: AccessContext,
    tool_policy: ToolPolicy,
    started: float,
    *,
    transport: Transport,
    server_name: str,
    portable_names: bool,
    identity: Mapping[str, Any] | None,
    grace_s: float,
    stdio: StdioLaunch | None,
    limits: TransportLimits | None,
) -> AsyncIterator[Turn]:
    catalog = compute_catalog(runtime_host, context, tool_policy)
    # the turn's opening record (its chain's anchor) once its transport is up, its seal when
    # it closes: a transport that fails to open (a listener or relay socket not bound, a
    # turn file not written) leaves no record, and its id can be opened again (opened and
    # sealed for nothing, the retry was refused as a closed turn's). Nobody can make a call
    # before the opening: the token, the turn file are handed out only with the turn
    async with evidence_turn(
        getattr(runtime_host, "evidence", None),
        turn_id=context.turn_id,
        catalog_hash=catalog.catalog_hash,
        policy_hash=getattr(getattr(runtime_host, "kernel", None), "policy_hash", None),
        identity=identity,
        owe=getattr(runtime_host, "owe_evidence", None),
        settle=getattr(runtime_host, "settle_owed", None),
        taken=getattr(runtime_host, "finish_taken", None),
        deferred=True,
        timeout_s=getattr(runtime_host, "evidence_timeout_s", 2.0),
        unopened=getattr(runtime_host, "owe_opening", None),
        redactor=getattr(runtime_host, "host_secrets", None),
    ) as open_chain:
        if transport == "http":
            async with _open_http(
                runtime_host,
                context,
                tool_policy,
                catalog,
                server_name=server_name,
                portable_names=portable_names,
                identity=identity,
                grace_s=grace_s,
                limits=limits or TransportLimits(),
            ) as turn:
                await open_chain()
                turn.diagnostics["openMs"] = round((time.perf_counter() - started) * 1000, 3)
                yield turn
        elif transport == "stdio":
            from sharedos.bridge.turnfile import StdioLaunch, open_stdio_turn

            async with open_stdio_turn(
                stdio if stdio is not None else StdioLaunch(),
                runtime_host,
                context,
                tool_policy,
                catalog,
                server_name=server_name,
                portable_names=portable_names,
                identity=identity,
            ) as turn:
                await open_chain()
                yield turn
        else:
            raise ValueError(f"unknown bridge transport {transport!r} (expected 'http' or 'stdio')")


@contextlib.asynccontextmanager
async def _open_http(
    runtime_host: RuntimeHost,
    context: AccessContext,
    tool_policy: ToolPolicy,
    catalog: TurnCatalog,
    *,
    server_name: str,
    portable_names: bool,
    identity: Mapping[str, Any] | None,
    grace_s: float,
    limits: TransportLimits,
) -> AsyncIterator[Turn]:
    from sharedos.bridge.http import (
        EmbeddedUvicorn,
        TurnHttpApp,
        bind_loopback,
        close_sessions,
        connection_guard,
        embedded_config,
    )

    stats = TransportStats()

    endpoint = TurnEndpoint(
        runtime_host=runtime_host,
        context=context,
        tool_policy=tool_policy,
        catalog=catalog,
        server_name=server_name,
        portable_names=portable_names,
        transport="http",
        identity=identity,
        limits=limits,
        stats=stats,
    )
    server = endpoint.build_server()
    token = secrets.token_urlsafe(32)
    # a model that learns the token (a harness's shell sees it) and passes it into a call
    # must not have it recorded or echoed
    endpoint.turn_secrets = Redactor((token,))
    # Builds and configures the SDK's session manager; its Starlette app is not served
    # (TurnHttpApp is: the same transport, without a router and middleware per call).
    server.streamable_http_app(
        streamable_http_path="/mcp",
        host="127.0.0.1",  # also switches the SDK's DNS-rebinding (Host/Origin) protection on
        # one harness per turn: the SDK's defaults (10 000 sessions, 30 min idle) are for
        # shared servers; at the cap the longest-idle session is evicted (TurnHttpApp)
        max_sessions=limits.max_sessions,
        session_idle_timeout=limits.session_idle_s,
        max_request_body_size=limits.max_frame_bytes,
    )
    manager = server.session_manager
    app = TurnHttpApp(
        manager,
        path="/mcp",
        token=token,
        # only the token holder's attempts are recorded: the recorder sits behind the check
        recorder=endpoint.recorder,
        on_rejected=endpoint.record_rejected_call,
        limits=limits,
    )
    sock = bind_loopback()
    port = sock.getsockname()[1]
    uv = EmbeddedUvicorn(
        embedded_config(app, grace_s=grace_s, keep_alive_s=limits.keep_alive_s),
        connection_guard(limits, stats, app),
    )
    try:
        await uv.start(sock)
    except BaseException:
        sock.close()
        raise
    turn = Turn(
        transport="http",
        context=context,
        tool_policy=tool_policy,
        catalog=catalog,
        catalog_hash=endpoint.catalog_hash,
        server_name=server_name,
        url=f"http://127.0.0.1:{port}/mcp",
        token=token,
        endpoint=endpoint,
        diagnostics={
            "excludedTools": [{"name": e.name, "reason": e.reason} for e in endpoint.excluded],
            "tools": len(endpoint.tools),
            "pages": endpoint.pages,
        },
        transport_stats=stats,
        serve_socket=uv.add_socket,
    )
    try:
        yield turn
    finally:
        endpoint.closed = True
        app.closing = True
        with anyio.CancelScope(shield=True):
            # Requests already past the closing check reach their sessions first (the
            # rest are refused by TurnHttpApp as turn_closed) ...
            await app.quiesce(grace_s)
            # ... calls in flight (both eras) get the grace to be answered ...
            await app.drain_in_flight(grace_s)
            # ... then the SDK's session transports are terminated: a legacy client's GET
            # SSE stream would otherwise keep its connection busy until the grace expires.
            await close_sessions(manager)
            # ... and the 2026-07-28 calls still running are cancelled and answered
            # (an error) before the connections close
            await app.answer_unfinished(grace_s)
            await uv.stop(sock, grace_s=grace_s)
            # ... and the large bodies still being classified are recorded before the turn
            # ends (refused turn_closed; answered only if that was done within the grace)
            await app.settle_all()
            await endpoint.recorder.flush()  # the aggregate of rate-limited garbage, if any
