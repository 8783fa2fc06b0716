"""One turn's MCP server: a low-level SDK ``Server`` with closures over that turn's catalogue.

Nothing here is shared between turns: each turn builds its own ``Server``
(0.15 ms), its own tool list and its own call handler. ``tools/call`` never
decides anything: it turns the request into a ``ToolCall`` carrying the raw
name received and hands it to ``RuntimeHost.invoke_tool``, which
re-authorizes, runs and records it. ``on_call_tool`` never raises (an
exception in a low-level handler would become a JSON-RPC error); the only
thing that escapes is cancellation, after the kernel has recorded it.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import anyio
import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.context import CallNext, HandlerResult
from mcp.server.lowlevel.server import Server
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from sharedos.bridge.diagnostics import (
    REACHED_SERVER,
    bounded,
    client_identity,
    correlation_from_meta,
    harness_aliases,
)
from sharedos.bridge.frames import CallAttempt, Problem
from sharedos.bridge.hooks import LogGate, RequestContext, make_hooks
from sharedos.bridge.limits import TransportLimits, TransportStats
from sharedos.bridge.malformed import WireRecorder
from sharedos.bridge.pages import InvalidCursor, PageCursors, cut_pages
from sharedos.bridge.results import internal_error_result, to_wire_result
from sharedos.bridge.wire import CATALOG_HASH_META_KEY, WIRE_SIEVE, ExcludedTool
from sharedos.context import AccessContext, ToolCall, new_call_id
from sharedos.evidence import MAX_STORED_ARGUMENTS, EncodedJson, plain_json, storable_json_text
from sharedos.kernel import ToolResult, TurnCatalog
from sharedos.kernel.handlers import LogHook, ProgressHook
from sharedos.names import PortableNameMap, unlisted_portable
from sharedos.outcomes import ReasonCode
from sharedos.redaction import Redactor
from sharedos.toolpolicy import ToolPolicy

logger = logging.getLogger(__name__)

#: The server name harnesses see; aliases (``mcp__sharedos__files_read``) are derived from it.
DEFAULT_SERVER_NAME = "sharedos"

#: A turn's low-level SDK server.
TurnServer = Server[dict[str, Any]]

#: Per tools/call request: set by the middleware, marked by ``on_call_tool`` when it ran, so a
#: failure before the handler (the SDK's params validation) is told from one after it.
_HANDLER_RAN: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "sharedos_handler_ran", default=None
)


class CallRuntime(Protocol):
    """What a turn's endpoint hands calls to: ``RuntimeHost`` in the host, or, in a relayed
    stdio bridge process, ``RelayRuntime`` (the same calls, run in the host)."""

    async def invoke_tool(
        self,
        call: ToolCall,
        context: AccessContext,
        tool_policy: ToolPolicy,
        *,
        catalog: TurnCatalog | None = None,
        diagnostics: Mapping[str, Any] | None = None,
        identity: Mapping[str, Any] | None = None,
        progress: ProgressHook | None = None,
        log: LogHook | None = None,
        peer: Any = None,
        turn_secrets: Redactor | None = None,
    ) -> ToolResult:
        """Re-authorize, record and run ``call`` (see ``RuntimeHost.invoke_tool``)."""
        ...

    async def refuse(
        self,
        call: ToolCall,
        context: AccessContext,
        tool_policy: ToolPolicy,
        reason: ReasonCode,
        *,
        catalog: TurnCatalog | None = None,
        diagnostics: Mapping[str, Any] | None = None,
        identity: Mapping[str, Any] | None = None,
        detail: str | None = None,
        turn_secrets: Redactor | None = None,
    ) -> ToolResult:
        """Record and return a refusal decided outside the kernel (see ``RuntimeHost.refuse``)."""
        ...


@dataclass
class TurnEndpoint:
    """The per-turn state behind one MCP server: catalogue, context, policy and the runtime."""

    runtime_host: CallRuntime
    context: AccessContext
    tool_policy: ToolPolicy
    catalog: TurnCatalog
    server_name: str = DEFAULT_SERVER_NAME
    portable_names: bool = False
    transport: str = "http"
    identity: Mapping[str, Any] | None = None
    closed: bool = False
    #: for transports whose closing is learned from outside (stdio: the open-marker)
    is_open: Callable[[], bool] | None = None
    limits: TransportLimits = field(default_factory=TransportLimits)
    stats: TransportStats = field(default_factory=TransportStats)
    tools: list[types.Tool] = field(default_factory=list)
    excluded: list[ExcludedTool] = field(default_factory=list)
    log_gate: LogGate = field(default_factory=LogGate)
    recorder: WireRecorder = field(init=False)
    _portable: PortableNameMap | None = None
    _pages: list[tuple[int, int]] = field(default_factory=list)
    _cursors: PageCursors = field(init=False)
    _schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: (received, tool, client name, client version, versions) -> (static diagnostics, its text)
    _static: dict[tuple[object, ...], tuple[dict[str, Any], str | None]] = field(
        default_factory=dict
    )
    #: (client name, client version, protocol version) -> sanitized identity, per turn
    _clients: dict[tuple[object, object, object], dict[str, Any]] = field(default_factory=dict)
    _bridge: dict[str, str] = field(default_factory=dict)
    #: what this turn knows is secret (the HTTP bridge's bearer token): scrubbed from every
    #: record and answer of its calls, as the host's secrets are
    turn_secrets: Redactor | None = None
    #: told the JSON-RPC id of every tools/call that reaches the server's middleware (the
    #: stdio transport records the ones the SDK turned away before it: ``record_rejected_call``)
    on_call_reached: Callable[[object], object] | None = None

    def __post_init__(self) -> None:
        # Encoded once per turn; every evidence record of the turn stores this text.
        self.identity = plain_json(self.identity)
        self._bridge = {"transport": self.transport, "server": self.server_name}
        self.recorder = WireRecorder(
            self._refuse_for_transport,
            turn_id=self.context.turn_id,
            transport=self.transport,
            server_name=self.server_name,
            canonical_name=self.canonical_name,
            limits=self.limits,
            stats=self.stats,
        )
        # Remembered per published definition across turns (WIRE_SIEVE): a turn of
        # 10,000 known tools costs a hash lookup per tool here, not a schema check.
        self.tools, sizes, self.excluded = WIRE_SIEVE.sieve_sized(self.catalog.tools)
        for gone in self.excluded:
            logger.warning("bridge: tool %r left out of tools/list: %s", gone.name, gone.reason)
        if self.portable_names:
            self._portable = PortableNameMap(t.name for t in self.tools)
            portable = [self._portable.to_portable(t.name) for t in self.tools]
            sizes = [
                n + len(p) - len(t.name)
                for n, p, t in zip(sizes, portable, self.tools, strict=True)
            ]
            self.tools = [
                t.model_copy(update={"name": p}) for t, p in zip(self.tools, portable, strict=True)
            ]
        # Pages are cut once: the catalogue is fixed for the turn, and so are its pages.
        self._pages = cut_pages(
            sizes, max_items=self.limits.list_page_size, max_bytes=self.limits.list_page_bytes
        )
        self._cursors = PageCursors(len(self._pages))
        # Listed name -> inputSchema, for the SDK's Mcp-Param header check on 2026-07-28.
        # Without it the SDK runs the whole tools/list handler (and serializes the
        # result) on every tools/call just to find one schema.
        self._schemas = {t.name: t.input_schema for t in self.tools}

    @property
    def catalog_hash(self) -> str:
        """The turn's catalogHash, fixed when the turn opened."""
        return str(self.catalog.catalog_hash)

    # -- handlers ---------------------------------------------------------------
    @property
    def pages(self) -> int:
        """How many ``tools/list`` pages the turn's catalogue takes (``TransportLimits``)."""
        return len(self._pages)

    async def on_list_tools(
        self, ctx: RequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """One page of the turn's tools (ttlMs 0, cacheScope private); ``nextCursor`` names the next.

        The pages are the same for the whole turn. A cursor this turn did not
        issue (stale, from another turn, altered) is JSON-RPC -32602.
        """
        cursor = None if params is None else params.cursor
        try:
            page = 0 if cursor is None else self._cursors.page(cursor)
        except InvalidCursor:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=(
                    "tools/list: invalid cursor: this turn did not issue it (it is from another "
                    "turn or an earlier listing, or it was altered); list again without a cursor"
                ),
            ) from None
        start, end = self._pages[page]
        following = page + 1
        return types.ListToolsResult(
            tools=self.tools[start:end],
            next_cursor=self._cursors.cursor(following) if following < len(self._pages) else None,
            _meta={CATALOG_HASH_META_KEY: self.catalog_hash},
        )

    async def on_set_logging_level(
        self, ctx: RequestContext, params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        """Handshake-era ``logging/setLevel``: the minimum level of handler log notifications."""
        self.log_gate.minimum = str(params.level)
        return types.EmptyResult()

    def canonical_name(self, received: str) -> str:
        """The raw name, or the canonical name a portable name stands for (mapped back, injectively)."""
        if self._portable is not None:
            canonical = self._portable.to_canonical(received)
            if canonical is not None:
                return canonical
            # a tool the turn did not list, by the portable name it would have: that tool
            # (a relayed bridge has no kernel here: the host maps it, RelayTurn)
            kernel = getattr(self.runtime_host, "kernel", None)
            if kernel is not None:
                return unlisted_portable(
                    received, lambda n: kernel.lookup(n, self.context, self.catalog) is not None
                )
        return received

    def diagnostics(self, ctx: RequestContext, received: str, tool: str) -> dict[str, Any]:
        """What the evidence record keeps about the transport (never read by a decision).

        Only the correlation keys and the JSON-RPC id change from call to call;
        the rest (bridge, aliases, client, protocol version) is built and encoded
        once per tool, client and version for the turn, and the record is handed
        an ``EncodedJson`` whose text is stored as is.
        """
        dynamic = {
            "correlation": correlation_from_meta(ctx.meta),
            "jsonrpcId": bounded(ctx.request_id),
        }
        static, static_text = self._static_diagnostics(ctx, received, tool)
        try:
            text = storable_json_text(dynamic)
        except Exception:  # bounded() output is plain JSON; never fail a call over this
            return {**static, **dynamic}
        combined = f"{static_text[:-1]},{text[1:]}" if static_text else ""
        if not combined or len(combined) > MAX_STORED_ARGUMENTS:
            return {**static, **dynamic}  # plain_json encodes it and applies the cap
        # the static dicts are shared by the turn's records and never mutated
        return EncodedJson({**static, **dynamic}, combined)

    def _static_diagnostics(
        self, ctx: RequestContext, received: str, tool: str
    ) -> tuple[dict[str, Any], str | None]:
        try:
            session = ctx.session
            params = session.client_params
            info = params.client_info if params is not None else None
            key = (
                received,
                tool,
                None if info is None else info.name,
                None if info is None else info.version,
                session.protocol_version,
                ctx.protocol_version,
            )
            cached = self._static.get(key)
        except Exception:  # odd session objects: build it uncached
            key, cached = None, None
        if cached is not None:
            return cached
        diag: dict[str, Any] = {"bridge": self._bridge}
        # Aliases exist only for published tools (an unpublished name was never shown
        # to the model under any alias).
        if tool in self.catalog.names:
            diag["aliases"] = harness_aliases(self.server_name, tool)
        diag.update(self._client_identity(ctx.session))
        diag.setdefault("protocolVersion", ctx.protocol_version)
        if received != tool:
            diag["portableName"] = received
        try:
            text: str | None = storable_json_text(diag)
        except Exception:
            text = None
        if text is not None and len(text) > MAX_STORED_ARGUMENTS // 2:
            text = None  # oversized: plain_json applies its cap to the whole record
        if key is not None:
            if len(self._static) >= 256:  # names vary per unpublished call: stay bounded
                self._static.clear()
            self._static[key] = (diag, text)
        return diag, text

    def _client_identity(self, session: ServerSession) -> dict[str, Any]:
        """``client_identity(session)``, sanitized once per distinct client for this turn."""
        try:
            params = session.client_params
            info = params.client_info if params is not None else None
            key = (
                None if info is None else info.name,
                None if info is None else info.version,
                session.protocol_version,
            )
            cached = self._clients.get(key)
        except Exception:  # odd session objects: the uncached path copes with them
            return client_identity(session)
        if cached is None:
            cached = client_identity(session)
            if len(self._clients) >= 16:  # clients vary per request on 2026-07-28: stay bounded
                self._clients.clear()
            self._clients[key] = cached
        return cached

    async def on_call_tool(
        self, ctx: RequestContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """Hand the raw call to ``RuntimeHost.invoke_tool`` and map its outcome; never raises."""
        ran = _HANDLER_RAN.get()
        if ran is not None:
            ran.append(True)
        received = params.name
        tool = received
        try:
            tool = self.canonical_name(received)
            # the id is passed in: pydantic's default_factory path costs more than the call
            call = ToolCall(
                call_id=new_call_id(),
                tool=tool,
                arguments=params.arguments,
                turn_id=self.context.turn_id,
            )
            diagnostics = self.diagnostics(ctx, received, tool)
            if self.turn_closed():
                result = await self.refuse_closed(call, diagnostics)
            else:
                result = await self.runtime_host.invoke_tool(
                    call,
                    self.context,
                    self.tool_policy,
                    catalog=self.catalog,
                    diagnostics=diagnostics,
                    identity=self.identity,
                    turn_secrets=self.turn_secrets,
                    **make_hooks(ctx, self.log_gate),
                )
            # A dict for the common text-only success (see to_wire_result); the SDK
            # types on_call_tool as returning the model but takes either.
            return cast(types.CallToolResult, to_wire_result(result))
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:  # fail closed, as a result, never a JSON-RPC error
            logger.exception("bridge: internal failure handling tools/call %r", tool)
            return await self._internal_failure(ctx, received, tool, params.arguments, exc)

    async def refuse_closed(
        self, call: ToolCall, diagnostics: Mapping[str, Any] | None
    ) -> ToolResult:
        """Record and return the ``turn_closed`` refusal of a call that reached a closed turn."""
        return await record_refusal(
            self.runtime_host,
            call,
            self.context,
            self.tool_policy,
            ReasonCode.TURN_CLOSED,
            catalog=self.catalog,
            diagnostics=diagnostics,
            identity=self.identity,
            detail="the turn this bridge served has closed",
            turn_secrets=self.turn_secrets,
        )

    async def _internal_failure(
        self, ctx: RequestContext, received: str, tool: str, arguments: object, exc: Exception
    ) -> types.CallToolResult:
        detail = f"internal error in the bridge ({type(exc).__name__})"
        try:
            call = ToolCall(tool=tool, arguments=arguments, turn_id=self.context.turn_id)
            await record_refusal(
                self.runtime_host,
                call,
                self.context,
                self.tool_policy,
                ReasonCode.INTERNAL_ERROR,
                catalog=self.catalog,
                diagnostics={"bridge": {"transport": self.transport}, "receivedName": received},
                identity=self.identity,
                detail=detail,
                turn_secrets=self.turn_secrets,
            )
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            logger.exception("bridge: could not record the internal failure of %r", tool)
        declares = any(t.name == tool and t.output_schema is not None for t in self.catalog.tools)
        return internal_error_result(tool, detail, output_schema=declares)

    async def record_malformed_calls(
        self, ctx: RequestContext, call_next: CallNext
    ) -> HandlerResult:
        """Server middleware: a ``tools/call`` the SDK rejects as malformed is still an attempt.

        A non-string name or non-object arguments fail the SDK's params
        validation before ``on_call_tool`` runs. The attempt must not vanish,
        and it is answered like every other call — as a result: the raw values
        go to the kernel, which refuses and records them (``tool_unavailable``
        / ``invalid_arguments``), and that refusal is the answer.
        """
        if ctx.method != "tools/call":
            return await call_next(ctx)
        reached = REACHED_SERVER.get()
        if reached is not None:
            reached.append("tools/call")  # this server records it: the transport must not
        if self.on_call_reached is not None:
            self.on_call_reached(ctx.request_id)
        ran: list[bool] = []
        marker = _HANDLER_RAN.set(ran)
        try:
            return await call_next(ctx)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            if ran or ctx.request_id is None:
                raise  # the handler ran (and recorded); this is the SDK's own error
            params = ctx.params if isinstance(ctx.params, Mapping) else {}
            name, arguments = params.get("name"), params.get("arguments")
            if not isinstance(name, str) or not (arguments is None or isinstance(arguments, dict)):
                # the kernel has the words for these (tool_unavailable / invalid_arguments)
                result = await self._record_malformed(ctx, name, arguments)
            else:
                # a valid name and arguments, but params the SDK could not accept
                # (a malformed _meta ...): never run what the protocol layer refused
                result = await self._refuse_params(ctx, name, arguments)
            if result is None:
                raise
            return cast(HandlerResult, to_wire_result(result))
        finally:
            _HANDLER_RAN.reset(marker)

    async def _record_malformed(
        self, ctx: RequestContext, name: object, arguments: object
    ) -> ToolResult | None:
        tool = name if isinstance(name, str) else json.dumps(name, default=repr)[:1024]
        try:
            diagnostics = {**self.diagnostics(ctx, tool, tool), "malformedRequest": True}
            return await self.runtime_host.invoke_tool(
                ToolCall(tool=tool, arguments=arguments, turn_id=self.context.turn_id),
                self.context,
                self.tool_policy,
                catalog=self.catalog,
                diagnostics=diagnostics,
                identity=self.identity,
                turn_secrets=self.turn_secrets,
            )
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            logger.exception("bridge: could not record a malformed tools/call")
            return None

    async def _refuse_params(
        self, ctx: RequestContext, name: str, arguments: object
    ) -> ToolResult | None:
        request_id = ctx.request_id
        attempt = CallAttempt(
            request_id=request_id if isinstance(request_id, int | str) else None,
            name=name,
            arguments=arguments,
            arguments_intact=True,
            protocol_version=ctx.protocol_version,
        )
        try:
            return await self.recorder.refuse_call(attempt, Problem.NOT_JSONRPC, size=0)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            logger.exception("bridge: could not record a tools/call with invalid params")
            return None

    async def record_rejected_call(
        self, item: Mapping[str, object], status: int | None, *, code: int | None = None
    ) -> None:
        """Record a ``tools/call`` the SDK's transport rejected after the bridge passed it on.

        (A wrong ``Accept`` header, an unknown session, a 2026-07-28 header that
        does not match the body; on stdio a ``_meta`` envelope the SDK's runner
        refuses ...) ``status`` is the HTTP status of the rejection, ``code`` the
        JSON-RPC error code of one answered without HTTP; the SDK answers it
        itself. Nothing is run.
        """
        params = item.get("params")
        params = params if isinstance(params, Mapping) else {}
        request_id = item.get("id")
        attempt = CallAttempt(
            request_id=request_id if isinstance(request_id, int | str) else None,
            name=params.get("name"),
            arguments=params.get("arguments"),
            arguments_intact=True,
            protocol_version=None,
        )
        how = f" (HTTP {status})" if status is not None else ""
        if code is not None:
            how = f" (JSON-RPC error {code})"
        try:
            await self.recorder.refuse_call(
                attempt,
                Problem.REJECTED,
                size=0,
                status=status,
                detail=f"the MCP transport rejected this tools/call request{how}; it was not run",
            )
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            logger.exception("bridge: could not record a tools/call the transport rejected")

    async def _refuse_for_transport(
        self, call: ToolCall, reason: ReasonCode, diagnostics: Mapping[str, Any], detail: str
    ) -> ToolResult:
        """``RuntimeHost.refuse`` bound to this turn (the transport's refusals: ``WireRecorder``)."""
        return await record_refusal(
            self.runtime_host,
            call,
            self.context,
            self.tool_policy,
            reason,
            catalog=self.catalog,
            diagnostics=diagnostics,
            identity=self.identity,
            detail=detail,
            turn_secrets=self.turn_secrets,
        )

    def turn_closed(self) -> bool:
        """True once the turn has closed (for stdio, learned from the open-marker)."""
        if not self.closed and self.is_open is not None and not self.is_open():
            self.closed = True
        return self.closed

    # -- server -----------------------------------------------------------------
    def build_server(self) -> TurnServer:
        """A fresh low-level SDK server for this turn (never shared)."""
        server: TurnServer = Server(
            self.server_name,
            version=_version(),
            instructions=None,
            cache_hints={
                "tools/list": CacheHint(ttl_ms=0, scope="private"),
            },
            on_list_tools=self.on_list_tools,
            on_call_tool=self.on_call_tool,
            get_tool_input_schema=self._schemas.get,
        )
        # logging/setLevel only exists on handshake-era versions; registering it directly
        # avoids the SDK's deprecation warning for the 2026 era.
        server.add_request_handler(
            "logging/setLevel", types.SetLevelRequestParams, self.on_set_logging_level
        )
        if not tracing_configured():
            # The SDK puts an OpenTelemetry middleware on every server. With no tracer
            # provider configured its spans record nothing, yet it costs each request a
            # span, a context attach and an attribute dict (~2-3 % of a tools/call round
            # trip in A/B runs); the evidence record is the per-call trace either way.
            from sharedos.compat.mcp_sdk import remove_sdk_tracing

            remove_sdk_tracing(server)
        server.middleware.append(self.record_malformed_calls)
        return server


def tracing_configured() -> bool:
    """True when the process has an OpenTelemetry tracer provider (spans would be recorded).

    Without one, ``get_tracer_provider()`` returns the API's proxy, whose spans
    are non-recording until a provider is set; a turn opened after that keeps
    the SDK's tracing middleware.
    """
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


async def record_refusal(
    runtime_host: CallRuntime,
    call: ToolCall,
    context: AccessContext,
    tool_policy: ToolPolicy,
    reason: ReasonCode,
    *,
    catalog: TurnCatalog,
    diagnostics: Mapping[str, Any] | None,
    detail: str,
    turn_secrets: Redactor | None = None,
    identity: Mapping[str, Any] | None = None,
) -> ToolResult:
    """Record (durably, before returning) a refusal the bridge issues without a decision.

    ``turn_closed`` (a call reaching a bridge whose turn has ended),
    ``internal_error`` (the bridge could not hand the call to the kernel) and
    ``malformed_request`` (the transport could not deliver the call). The
    runtime records them (``RuntimeHost.refuse``) exactly like any other
    attempt, with the turn's ``identity`` as every other record of the turn.
    """
    result = await runtime_host.refuse(
        call,
        context,
        tool_policy,
        reason,
        catalog=catalog,
        diagnostics=diagnostics,
        identity=identity,
        detail=detail,
        turn_secrets=turn_secrets,
    )
    return result


@functools.cache
def _version() -> str:
    try:
        from importlib.metadata import version

        return version("sharedos")
    except Exception:
        return "0"
