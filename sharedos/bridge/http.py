"""Streamable HTTP for one turn: a socket we bind, an embedded uvicorn, a bearer token, a POST gate.

Why not ``uvicorn.run``: stock uvicorn takes over SIGINT/SIGTERM of the host
process, polls every 100 ms, and has no read deadlines. A turn opens and
closes many times per process, so ``sharedos.compat.uvicorn`` drives
uvicorn's pieces directly (no signal capture, no tick loop, an event-driven
stop, header/body read deadlines and a connection cap).

The socket is created with ``IPPROTO_TCP`` explicitly: asyncio sets
``TCP_NODELAY`` on accepted connections only when the listening socket's proto
is ``IPPROTO_TCP``; with proto 0 every response waits ~40 ms for the peer's
delayed ACK (Nagle).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.server.streamable_http import check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp_types import JSONRPCMessage, JSONRPCRequest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sharedos.bridge.answers import (
    CONNECTION_CLOSED,
    INVALID_REQUEST,
    UNANSWERED,
    error_message,
    result_message,
)
from sharedos.bridge.diagnostics import REACHED_SERVER
from sharedos.bridge.frames import (
    PROBLEM_TEXT,
    Frame,
    Problem,
    classify,
    deliverable,
    oversized,
    truncated,
    undeliverable,
    unread_call,
)
from sharedos.bridge.limits import TransportLimits, TransportStats
from sharedos.bridge.malformed import WireRecorder
from sharedos.bridge.sse_answer import AnswerOrStream
from sharedos.compat import mcp_sdk
from sharedos.compat.asyncio_accept import PacedListener
from sharedos.compat.uvicorn import (
    BODY_DEADLINE_EXTENSION,
    BridgeStartError,
    ConnectionGuard,
    ConnectionLimits,
    EmbeddedUvicorn,
    embedded_config,
)
from sharedos.jsonrpc_id import EDGE_BYTES
from sharedos.outcomes import ReasonCode

__all__ = [
    "LOOPBACK",
    "BridgeStartError",
    "ConnectionGuard",
    "ConnectionLimits",
    "EmbeddedUvicorn",
    "TurnHttpApp",
    "bind_loopback",
    "embedded_config",
]

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
#: frames above this size are classified in a worker thread; smaller ones too, unless they
#: are one deliverable message (``frames.deliverable``: the fast path, microseconds)
_THREAD_CLASSIFY_BYTES = 64 * 1024

#: records a tools/call the SDK's transport rejected (``TurnEndpoint.record_rejected_call``)
OnRejected = Callable[[dict[str, object], int], Awaitable[None]]


class TurnHttpApp:
    """The whole HTTP surface of one turn, as one ASGI layer.

    - ``lifespan`` runs the SDK's session manager (started when the turn opens,
      stopped when it closes);
    - every HTTP request must carry this turn's bearer token in exactly one
      ``Authorization`` header, compared with ``hmac.compare_digest`` (constant
      time), else 401 — checked before anything else, so nothing about the
      endpoint leaks to a caller without it;
    - only ``path`` exists (404 elsewhere);
    - a POST body is read here, within the turn's size limit (413 beyond it)
      and classified (``sharedos.bridge.frames``): one valid JSON-RPC message
      goes on to the SDK's transport, whose Host/Origin (DNS-rebinding) check
      applies as usual; anything else is refused, recorded and answered here.
      A request's answer goes back as one ``application/json`` body when its
      first event is that answer (``sharedos.bridge.sse_answer``); otherwise as
      the SDK's stream, that event first.
      A body cut off by the client or by the body read deadline is recorded
      as ``malformed_request``.

    Why not the SDK's Starlette app: one listener serves exactly one turn at one
    path with one credential, so its router, two exception middlewares and the
    per-message ``send`` wrappers they add do nothing here but cost latency on
    every call (measured: 6-10 % of a tools/call round trip).
    """

    def __init__(
        self,
        manager: StreamableHTTPSessionManager,
        *,
        path: str,
        token: str,
        recorder: WireRecorder,
        on_rejected: OnRejected,
        limits: TransportLimits,
    ) -> None:
        if len(token) < 32:
            raise ValueError("a turn token must be at least 32 characters of secret")
        self._manager = manager
        self._path = path
        self._expected = b"bearer " + token.encode("ascii")
        self._handle: ASGIApp = manager.asgi_app
        #: the SDK transport's own Host/Origin/Content-Type check, with the turn's settings
        self._security = TransportSecurityMiddleware(manager.security_settings)
        mcp_sdk.route_request_streams()  # request POSTs answered by AnswerOrStream
        self._recorder = recorder
        self._on_rejected = on_rejected
        self._limits = limits
        #: set when the turn closes: requests cancelled from then on end with one log line
        self.closing = False
        #: (session id, str(request id)) of the 2025-11-25 requests in flight: the SDK's
        #: transport keys a session's request streams by ``str(id)``, and a second request
        #: with a key in flight would take the first one's stream (which then never ends)
        self._in_flight: set[tuple[str, str]] = set()
        #: the 2026-07-28 requests running (cancelled, and answered, as the turn closes)
        self._modern_in_flight: set[anyio.CancelScope] = set()
        #: POSTs past the closing check whose message the SDK's transport has not read yet
        self._entering = 0
        #: POSTs whose body was read whole and is being classified (or refused) before the
        #: closing check, one not deliverable as it is perhaps waiting for ``_classify_threads``
        self._classifying = 0
        #: the tasks classifying (and refusing) those bodies, kept until they end
        self._settling: set[asyncio.Task[Any]] = set()
        #: set once the close has waited its grace for them: the large bodies still queued
        #: for the classifying thread are refused from their edges, unread (``settle_all``)
        self._unread = False
        #: one worker thread classifies this turn's large frames at a time. Classifying
        #: holds the GIL (``pydantic_core`` does not release it), so every such thread
        #: takes a share of the interpreter from the event loop all turns of the process
        #: run on; in anyio's default pool (40 threads, shared with the turns' evidence
        #: writes) twenty 4 MiB POSTs to one turn held another turn's call for 41 s.
        #: Per turn: a turn's flood waits behind itself, not another turn's large frame.
        #: Every frame that is not one deliverable message comes here too, whatever its
        #: size (``_post``: reading a damaged one is the slow path).
        self._classify_threads = anyio.CapacityLimiter(1)
        #: cut-off bodies waiting for (or in) that thread (``_cut_off``: bounded)
        self._cut_off_held = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return
        try:
            if not self._authorized(scope):
                await _unauthorized(send)
            elif scope["path"] != self._path:
                await _not_found(send)
            elif scope["method"] == "POST":
                await self._post(_accept_joined(scope), receive, send)
            else:
                await self._handle(_without_resumption(_accept_joined(scope)), receive, send)
        except anyio.get_cancelled_exc_class():
            if not self.closing:
                raise
            # the turn closed under a request in flight: the runtime recorded the
            # call as cancelled; there is no one left to answer
            logger.info("bridge: a %s request was cancelled as the turn closed", scope["method"])

    def authorized(self, scope: Scope) -> bool:
        """Whether the request ``scope`` holds the turn's token (``ConnectionGuard``)."""
        return self._authorized(scope)

    def _authorized(self, scope: Scope) -> bool:
        presented = [value for name, value in scope["headers"] if name == b"authorization"]
        # Exactly one Authorization field (RFC 9110 section 5.3: it is no list, a sender
        # never repeats it): with two, which one counts would depend on their order (the
        # first was read, so [token, junk] passed and [junk, token] did not) and on who
        # reads them. Case-insensitive scheme (RFC 7235), exact token, constant time.
        value = bytes(presented[0]) if len(presented) == 1 else b""
        return hmac.compare_digest(value[:7].lower() + value[7:], self._expected)

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

    # -- POST -------------------------------------------------------------------
    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope = _media_type_checked(scope)
        limit = self._limits.max_frame_bytes
        declared = _content_length(scope)
        over = _Edges() if declared is not None and declared > limit else None
        body = bytearray()
        complete = False
        try:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    break  # http.disconnect
                chunk: bytes = message.get("body", b"")
                if over is None and len(body) + len(chunk) > limit:
                    over = _Edges()
                    over.add(bytes(body))
                    body = bytearray()
                if over is not None:
                    over.add(chunk)  # only its edges are kept
                else:
                    body += chunk
                if not message.get("more_body", False):
                    complete = True
                    break
        except anyio.get_cancelled_exc_class():
            if self.closing:
                self._cut_off(bytes(body), over, declared, "was cut off by the turn's close")
            raise
        if over is not None:
            # Refused from its edges, read to its end (or to the body deadline), as a stdio
            # line over the limit is: they show whether it is a tools/call and the id to
            # answer. Before, a body announced over the limit was refused unread, and one
            # found over it mid-read kept 64 bytes of its head: the record said no call
            # (``looksLikeCall`` false, the fingerprint of no bytes) for every oversized call
            # a client sends with a Content-Length, and the id at a body's end (where the
            # TypeScript SDK writes it) was never answered.
            size = max(over.size, declared or 0)
            await self._refuse(oversized(size, over.head, over.tail), send, status=413, scope=scope)
            return
        data = bytes(body)
        if not complete:
            expired = BODY_DEADLINE_EXTENSION in (scope.get("extensions") or {})
            why = "timed out" if expired else "was cut off (the client disconnected)"
            self._cut_off(data, None, None, why, status=408 if expired else None)
            return
        # A small body that is one deliverable message is classified here, on the fast path.
        # Any other goes to the turn's classifying thread: reading a damaged frame is the
        # slow path (flattening a deep one is a Python loop per bracket), and a 64 KiB body
        # of ``{"a":`` repeated held the event loop every turn of the process runs on for
        # 0.1-0.15 s, each POST of it, where the thread shares the interpreter with it.
        fast = None if len(data) > _THREAD_CLASSIFY_BYTES else deliverable(data)
        if fast is None:
            # A body read whole and classified in the thread is refused or handed on even
            # as the turn closes: in a task of its own, which the cancellation of the turn's
            # requests past its grace (uvicorn's Task.cancel, which no cancel scope shields)
            # does not end, and waited for (within the grace) by ``quiesce``. It waits for
            # this turn's one classifying thread behind the others; cancelled there, a call
            # the client had sent whole was dropped, neither answered nor recorded.
            self._classifying += 1
            try:
                settling = asyncio.ensure_future(self._settle(scope, data, send, None))
                self._settling.add(settling)
                settling.add_done_callback(self._settled)
                taken = await asyncio.shield(settling)
            finally:
                self._classifying -= 1
        else:
            taken = await self._settle(scope, data, send, fast)
        if taken is None:  # refused, and answered
            return
        data, frame, valid = taken
        if self.closing:  # it closed as the task ended
            await self._refuse_closed(scope, data, valid, send)
            return
        # no checkpoint between the closing check and the entry: ``quiesce`` sees one or
        # the other
        entry = _Entry(self)
        try:
            if (
                mcp_sdk.at_session_cap(self._manager)
                and await self._opens_session(scope, valid)
                and await mcp_sdk.evict_idle_session(self._manager)
            ):
                self._recorder.stats.sessions_evicted += 1
            await self._deliver(scope, data, frame, receive, send, entry)
        finally:
            entry.leave()

    def _cut_off(
        self,
        data: bytes,
        over: _Edges | None,
        declared: int | None,
        why: str,
        *,
        status: int | None = None,
    ) -> None:
        """Record a POST body cut off mid-read (``why``: by its client, by the body deadline
        or by the turn's close), in a task of its own, off the event loop.

        Recorded in a task which the close's cancellation of the requests still running
        past its grace (uvicorn's ``Task.cancel``) does not end and ``settle_all`` waits for
        before the turn ends: a body the close cut off was dropped unrecorded, and one its
        client cut off just before was lost when the close cancelled its record. A body
        over the frame limit is recorded ``oversized`` from its edges. One under it is
        read in the turn's classifying thread, as every frame that is not one deliverable
        message is (``_post``): read on the event loop, a 4 MiB body of ``{"a":`` cut off
        one byte short held every turn of the process for 0.7 s, each POST of it. At most
        ``max_connections`` such bodies wait for that thread (the bound the connection cap
        puts on bodies read whole: a cut-off body's connection no longer counts against
        it); beyond, or past the close's grace (``settle_all``), from its edges."""
        if over is None and self._cut_off_held >= self._limits.max_connections:
            frame: Frame | None = unread_call(data, Problem.TRUNCATED)
            data = b""
        else:
            frame = (
                None
                if over is None
                else oversized(max(over.size, declared or 0), over.head, over.tail)
            )
        size = over.size if over is not None else len(data) if frame is None else frame.size
        held = frame is None
        if held:
            self._cut_off_held += 1

        async def record() -> None:
            nonlocal frame, data
            try:
                if frame is None:
                    async with self._classify_threads:
                        # past the grace, behind another body: from its edges, as ``_settle`` does
                        if self._unread:
                            frame = unread_call(data, Problem.TRUNCATED)
                        else:
                            frame = await anyio.to_thread.run_sync(truncated, data)
            finally:
                if held:
                    self._cut_off_held -= 1
                data = b""
            await self._recorder.refuse(frame, status=status)

        logger.warning(
            "bridge: a POST body %s after %d bytes; recorded as malformed_request", why, size
        )
        task = asyncio.ensure_future(record())
        self._settling.add(task)
        task.add_done_callback(self._settled)

    def _settled(self, task: asyncio.Task[Any]) -> None:
        """A ``_settle`` task ended: forgotten, and a failure nobody awaited is logged."""
        self._settling.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.warning("bridge: classifying a request failed: %s: %s", type(exc).__name__, exc)

    async def _settle(
        self, scope: Scope, data: bytes, send: Send, fast: Frame | None
    ) -> tuple[bytes, Frame, JSONRPCMessage] | None:
        """Classify a body read whole (``fast``: already, a deliverable message); refuse and
        answer it here (None) when it is not one valid message or the turn is closing, else
        what ``_post`` hands on."""
        frame = fast
        if frame is None:
            async with self._classify_threads:
                if self._unread:
                    # the close is past its grace: recorded and answered now, not after
                    # every body queued before it was read (seconds each, one at a time)
                    await self._refuse_unread(scope, data, send)
                    return None
                frame = await anyio.to_thread.run_sync(classify, data)
        valid = frame.message
        if valid is None:
            await self._refuse(frame, send, status=None, scope=scope)
            return None
        if frame.substituted:  # an answer the server cannot read: the error in its place
            data = valid.model_dump_json(by_alias=True, exclude_none=True).encode()
        if self.closing:
            await self._refuse_closed(scope, data, valid, send)
            return None
        return data, frame, valid

    async def quiesce(self, timeout: float) -> None:
        """Once ``closing`` is set: let every POST already past the closing check reach its session.

        Closing ends the SDK's session transports next. A request between the
        closing check and the moment the transport hands its message to the
        session (the last step of which is a checkpoint inside the stream's
        ``send``) found its stream closed under it: the SDK logged an ERROR
        traceback, uvicorn answered 500, and a ``tools/call`` was never recorded.
        Such a request runs without waiting on anything else, so this is brief;
        ``timeout`` bounds it all the same. A POST whose body is being classified (a large
        one, perhaps behind others of this turn) is waited for too: it is refused as the
        turn closed, and answered if it is done within ``timeout`` (recorded either way).
        """
        with anyio.move_on_after(timeout):
            while self._entering or self._classifying:
                await anyio.sleep(0.001)
        # those that have read their message now wait at that checkpoint: let them pass it
        await anyio.sleep(0)

    async def settle_all(self) -> None:
        """Once the listener has stopped: wait for every body still being classified (or
        refused) to be recorded, each as it is done with the turn's classifying thread.

        ``quiesce`` waits for them only within the grace; past it their requests are
        cancelled and their tasks run on, unwaited. The turn then ended without their
        records: sealed before them, and when the process ended with the turn (``sharedos
        run`` exits as its turn closes) the event loop cancelled those tasks, and calls the
        client had sent whole were neither answered nor recorded. The grace is over by now:
        the one body being classified is finished, those queued behind it are refused from
        their edges, unread (``_refuse_unread``), so the wait is one classification and
        one record per connection (its answer goes to a connection that is closed by now).
        """
        # past the grace, those still queued are refused from their edges: at most the one
        # being classified still reads its body (before, each queued one was read in turn,
        # seconds each: a harness holding 128 connections held its turn's close for minutes)
        self._unread = True
        while self._settling:
            await asyncio.wait(set(self._settling))

    async def drain_in_flight(self, timeout: float) -> None:
        """Once ``closing`` is set: wait (at most ``timeout``) for the requests in flight
        to be answered (those of both eras: one grace).

        A 2025-11-25 answer travels on its session's transport, which closing ends next
        (a legacy GET stream would hold its connection); ending it first cancelled every
        legacy call at once. A 2026-07-28 call still running after this is cancelled and
        answered (``answer_unfinished``)."""
        with anyio.move_on_after(timeout):
            while self._in_flight or self._modern_in_flight:
                await anyio.sleep(0.005)

    async def _opens_session(self, scope: Scope, message: JSONRPCMessage) -> bool:
        """Whether the SDK's transport would open a 2025-11-25 session for this POST.

        Only then may an idle session be evicted to make room. The SDK admits a
        session for every POST without an ``Mcp-Session-Id`` and discards it when
        the request fails, but only an ``initialize`` routed to the handshake era
        that passes the transport's Host/Origin, Content-Type and Accept checks
        establishes one; anything else (a call sent without the header, an
        unknown ``MCP-Protocol-Version``, a DNS-rebinding request) would end a
        live client's session and open none.
        """
        if _header(scope, b"mcp-session-id") is not None or _modern(scope):
            return False
        if not isinstance(message, JSONRPCRequest) or message.method != "initialize":
            return False
        request = Request(scope)
        if await self._security.validate_request(request, is_post=True) is not None:
            return False
        has_json, has_sse = check_accept_headers(request)
        return has_json and (has_sse or self._manager.json_response)

    async def _deliver(
        self, scope: Scope, data: bytes, frame: Frame, receive: Receive, send: Send, entry: _Entry
    ) -> None:
        """Hand a valid message to the SDK's transport; record a tools/call it rejects."""
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                entry.leave()  # read by the transport: it goes on to its session without waiting
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        message = frame.message
        if not isinstance(message, JSONRPCRequest):
            await self._handle(scope, replay, send)  # the SDK's 202, as before
            return
        session = _header(scope, b"mcp-session-id")
        # 2026-07-28 requests are stateless: the SDK keeps no streams for them to share
        key = None if session is None or _modern(scope) else (session, str(message.id))
        if key is not None and key in self._in_flight:
            duplicate = undeliverable(data, json.loads(data), Problem.DUPLICATE_ID)
            await self._refuse(duplicate, send, status=None, scope=scope)
            return
        if key is not None:
            self._in_flight.add(key)
        # answered as one JSON body when its stream would carry nothing else
        # (sharedos.bridge.sse_answer)
        ident = message.id
        stream_marker = mcp_sdk.REQUEST_STREAM.set(
            lambda content, sender, headers: AnswerOrStream(content, sender, headers, ident)
        )
        try:
            if _modern(scope):
                await self._deliver_modern(scope, data, message, replay, send)
            else:
                await self._deliver_request(scope, data, message, replay, send)
        finally:
            mcp_sdk.REQUEST_STREAM.reset(stream_marker)
            if key is not None:
                self._in_flight.discard(key)

    async def _deliver_modern(
        self, scope: Scope, data: bytes, message: JSONRPCRequest, replay: Receive, send: Send
    ) -> None:
        """A 2026-07-28 request, answered even when the turn closes under it.

        Past the grace, closing cancels it (``answer_unfinished``): its handler
        is cancelled (a call is recorded ``cancelled``) and, when nothing of its
        response went out yet, it is answered with a JSON-RPC error for its id.
        Before, its connection was aborted: the Python SDK client's whole
        session failed with ``RemoteProtocolError``, not just the call.
        """
        started = False

        async def watch(out: Message) -> None:
            nonlocal started
            started = True
            await send(out)

        with anyio.CancelScope() as running:
            self._modern_in_flight.add(running)
            try:
                await self._deliver_request(scope, data, message, replay, watch)
            finally:
                self._modern_in_flight.discard(running)
        if running.cancelled_caught and not started:
            logger.info(
                "bridge: a request was cancelled as the turn closed; answered with an error"
            )
            answer = error_message(message.id, CONNECTION_CLOSED, UNANSWERED)
            await _respond(
                send, 200, b"application/json", _compact(answer), (b"connection", b"close")
            )

    async def answer_unfinished(self, timeout: float) -> None:
        """Once ``closing`` is set and the grace is over: cancel the 2026-07-28 requests still
        running, each answered with an error (``_deliver_modern``), within ``timeout``."""
        for running in list(self._modern_in_flight):
            running.cancel()
        with anyio.move_on_after(timeout):
            while self._modern_in_flight:
                await anyio.sleep(0.001)

    async def _deliver_request(
        self, scope: Scope, data: bytes, message: JSONRPCRequest, replay: Receive, send: Send
    ) -> None:
        if message.method != "tools/call":
            await self._handle(scope, replay, send)
            return
        reached: list[str] = []  # the server appends when the tools/call reached it

        async def watch(out: Message) -> None:
            if out["type"] == "http.response.start" and int(out["status"]) >= 400 and not reached:
                # the SDK's transport turned the call away (headers, session, Accept ...):
                # recorded before the rejection goes out, like every other attempt
                await self._on_rejected(json.loads(data), int(out["status"]))
            await send(out)

        marker = REACHED_SERVER.set(reached)
        try:
            await self._handle(scope, replay, watch)
        finally:
            REACHED_SERVER.reset(marker)

    async def _refuse_closed(
        self, scope: Scope, data: bytes, message: JSONRPCMessage, send: Send
    ) -> None:
        """Refuse a valid message that arrived as the turn closed; record a ``tools/call``.

        Closing ends the SDK's session transports before the listener and its
        kept-alive connections close: a request that arrives in between must not
        reach the SDK (a call on an ended session was recorded as a transport
        rejection rather than ``turn_closed``, and an ``initialize`` opened a new
        session on the closed turn). A call gets the ``turn_closed`` refusal as
        its result (recorded), anything else a 404 (its session is gone); the
        connection is closed after the answer.
        """
        closing = (b"connection", b"close")
        rebinding = await self._security.validate_request(Request(scope), is_post=False)
        # made out of the message read already: parsed again (``json.loads`` on the event
        # loop), a large body held every turn of the process for as long as its first read
        request = (
            {"id": message.id, "method": message.method, "params": message.params}
            if isinstance(message, JSONRPCRequest)
            else {}
        )
        frame = undeliverable(data, request, Problem.TURN_CLOSED)
        request_id = message.id if isinstance(message, JSONRPCRequest) else None
        text = PROBLEM_TEXT[Problem.TURN_CLOSED]
        status, answer = 404, error_message(request_id, INVALID_REQUEST, text)
        if isinstance(message, JSONRPCRequest) and message.method == "tools/call" and frame.calls:
            attempt = frame.calls[0]
            result = await self._recorder.refuse_call(
                attempt,
                Problem.TURN_CLOSED,
                size=frame.size,
                status=None if rebinding is None else rebinding.status_code,
                reason=ReasonCode.TURN_CLOSED,
            )
            version = attempt.protocol_version or _header(scope, b"mcp-protocol-version")
            status, answer = 200, result_message(message.id, result, version)
        if rebinding is not None:  # the DNS-rebinding refusal, as for every other POST
            body, media = bytes(rebinding.body), b"text/plain; charset=utf-8"
            await _respond(send, rebinding.status_code, media, body, closing)
            return
        await _respond(send, status, b"application/json", _compact(answer), closing)

    async def _refuse_unread(self, scope: Scope, data: bytes, send: Send) -> None:
        """Refuse a large body the closing turn did not read (``settle_all``): a
        ``tools/call`` its edges show is recorded ``turn_closed`` (its name and arguments
        unread) and answered when its id shows; anything else gets a 404, as on a closed
        turn."""
        closing = (b"connection", b"close")
        frame = unread_call(data, Problem.TURN_CLOSED)
        text = PROBLEM_TEXT[Problem.TURN_CLOSED]
        status, answer = 404, error_message(None, INVALID_REQUEST, text)
        if frame.calls:
            attempt = frame.calls[0]
            result = await self._recorder.refuse_call(
                attempt,
                Problem.TURN_CLOSED,
                size=frame.size,
                reason=ReasonCode.TURN_CLOSED,
                detail=f"{text}; this tools/call was refused unread (its name and arguments "
                "were not read: the close does not wait for every large body queued to be "
                "read) and was not run",
            )
            if attempt.request_id is not None:
                version = _header(scope, b"mcp-protocol-version")
                status, answer = 200, result_message(attempt.request_id, result, version)
        await _respond(send, status, b"application/json", _compact(answer), closing)

    async def _refuse(
        self, frame: Frame, send: Send, *, status: int | None, scope: Scope | None = None
    ) -> None:
        """Record an undeliverable frame and answer it here.

        A request whose ``Host`` or ``Origin`` the SDK's transport would refuse
        (DNS rebinding) gets that refusal (421 / 403, as the specification
        requires), not the JSON-RPC answers: those went only to a request the
        transport would have let through. Its calls are recorded all the same.
        """
        version = _header(scope, b"mcp-protocol-version") if scope is not None else None
        rebinding = None
        if scope is not None:
            rebinding = await self._security.validate_request(Request(scope), is_post=False)
        if rebinding is not None:
            status = rebinding.status_code
        answers = await self._recorder.refuse(frame, status=status, version=version)
        if rebinding is not None:
            await _respond(send, status or 403, b"text/plain; charset=utf-8", bytes(rebinding.body))
            return
        if status == 413:
            # The body was read to its end (its edges kept, ``_post``), so the client reads
            # this answer instead of a reset.
            body = json.dumps(answers[0] if answers else {}).encode()
            await _respond(send, 413, b"application/json", body)
            return
        if not answers:  # only notifications (or an empty body): nothing is owed
            await _respond(send, 202, b"application/json", b"")
            return
        has_result = any("result" in a for a in answers)
        payload: object = answers if frame.batch else answers[0]
        await _respond(
            send,
            200 if has_result else 400,
            b"application/json",
            json.dumps(payload, separators=(",", ":")).encode(),
        )


class _Edges:
    """The first and last ``EDGE_BYTES`` of a body too large to hold, and its size."""

    __slots__ = ("head", "size", "tail")

    def __init__(self) -> None:
        self.head = b""
        self.tail = b""
        self.size = 0

    def add(self, chunk: bytes) -> None:
        if len(self.head) < EDGE_BYTES:
            self.head += chunk[: EDGE_BYTES - len(self.head)]
        self.tail = (self.tail + chunk[-EDGE_BYTES:])[-EDGE_BYTES:]
        self.size += len(chunk)


class _Entry:
    """A POST past the closing check, until the SDK's transport has read it (``quiesce``)."""

    __slots__ = ("_app", "_open")

    def __init__(self, app: TurnHttpApp) -> None:
        app._entering += 1
        self._app = app
        self._open = True

    def leave(self) -> None:
        if self._open:
            self._open = False
            self._app._entering -= 1


def _compact(message: object) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def _without_resumption(scope: Scope) -> Scope:
    """``scope`` without a ``Last-Event-ID`` header: the turn keeps no event store to replay from.

    The SDK's transport, given the header and no event store, returns without
    a response (uvicorn: a 500 and an ERROR line). The specification lets a
    server ignore the header; the GET then opens the session's stream as usual.
    """
    headers = scope["headers"]
    if not any(name == b"last-event-id" for name, _ in headers):
        return scope
    return {**scope, "headers": [(n, v) for n, v in headers if n != b"last-event-id"]}


def _accept_joined(scope: Scope) -> Scope:
    """``scope`` with its ``Accept`` field lines joined into one, as HTTP defines them.

    ``Accept`` is a list: several field lines of it are one comma-separated value, in
    their order (RFC 9110 section 5.3), and Go's ``Header.Add`` sends one line per media
    type. The SDK's transports read only the first line (Starlette's ``headers.get``): a
    client accepting ``application/json`` and ``text/event-stream`` on two lines was
    answered 406, so it could not initialize, and each 2026-07-28 call it sent was
    refused (and recorded as turned away by the transport).
    """
    values = [bytes(value) for name, value in scope["headers"] if name == b"accept"]
    if len(values) < 2:
        return scope
    headers = [(n, v) for n, v in scope["headers"] if n != b"accept"]
    headers.append((b"accept", b", ".join(values)))
    return {**scope, "headers": headers}


def _media_type_checked(scope: Scope) -> Scope:
    """``scope`` with its ``Content-Type`` as the SDK's transport checks it, the same in every era.

    A media type is case-insensitive and may have whitespace before its
    parameters (RFC 9110 section 8.3.1); only ``application/json`` is one an MCP
    POST may carry. The SDK checks this twice, differently: its Host/Origin
    check takes any value that starts with ``application/json`` (so
    ``application/json-seq`` or ``application/jsonl`` passed, and a 2026-07-28
    call ran), and its 2025-11-25 transport compares case-sensitively (so
    ``Application/JSON`` was answered 415). Here exactly one ``application/json``
    header, in any spelling, is passed on as ``application/json`` (its
    parameters kept); any other, none, or two are dropped, and the SDK's check
    refuses the POST as it refuses a missing one (400, a call recorded).
    """
    values = [value for name, value in scope["headers"] if name == b"content-type"]
    canonical: bytes | None = None
    if len(values) == 1:
        media, separator, parameters = bytes(values[0]).partition(b";")
        if media.strip().lower() == b"application/json":
            canonical = b"application/json" + separator + parameters
    if canonical is not None and canonical == values[0]:
        return scope
    headers = [(n, v) for n, v in scope["headers"] if n != b"content-type"]
    if canonical is not None:
        headers.append((b"content-type", canonical))
    return {**scope, "headers": headers}


def _content_length(scope: Scope) -> int | None:
    raw = _header(scope, b"content-length")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def _modern(scope: Scope) -> bool:
    """A request the SDK routes to its stateless 2026-07-28 entry (it keeps no session for it).

    The SDK's own routing: any ``MCP-Protocol-Version`` header that is not a
    handshake-era version (an unknown one included) goes there.
    """
    version = _header(scope, b"mcp-protocol-version")
    return version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS


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


def bind_loopback() -> socket.socket:
    """A listening TCP socket on 127.0.0.1 with an ephemeral port (``IPPROTO_TCP``: see module doc)."""
    sock = PacedListener(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.bind((LOOPBACK, 0))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def connection_guard(
    limits: TransportLimits, stats: TransportStats, app: TurnHttpApp | None = None
) -> ConnectionGuard:
    """The turn's connection guard (deadlines and cap from ``limits``; counts into ``stats``;
    at the cap, connections that never carried a request with ``app``'s token go first)."""
    return ConnectionGuard(
        ConnectionLimits(
            header_timeout_s=limits.header_timeout_s,
            body_timeout_s=limits.body_timeout_s,
            max_connections=limits.max_connections,
        ),
        stats,
        None if app is None else app.authorized,
    )


async def close_sessions(manager: StreamableHTTPSessionManager) -> None:
    """Terminate the SDK's session transports (a legacy GET stream would hold its connection)."""
    with contextlib.suppress(RuntimeError):
        await mcp_sdk.terminate_sessions(manager)
