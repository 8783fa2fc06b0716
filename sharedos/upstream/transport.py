"""Reading an upstream's answers with a bound, so an oversized one is refused while it is read.

The SDK's transports read a server's whole message before anything looks at
its size (and the stdio one re-joins the line at every chunk: a 100 MiB answer
took longer than the call timeout to read, and the session it blocked failed
the next call too; issue 22). Here each message is bounded while it is read:

- **the bound** of an answer is known from the request it answers:
  ``limits.max_result_bytes`` (plus ``ENVELOPE_BYTES`` for the JSON-RPC
  envelope and escaping) for ``tools/call``, ``limits.max_listing_bytes`` for
  everything else (``tools/list``, the handshake). On stdio, where a line's
  request is known only once it is parsed, a line is held to the largest bound
  of the requests still outstanding;
- **past the bound** nothing more is buffered: the rest of the message is read
  and dropped (the session stays in step), and the request it answered gets a
  JSON-RPC error (``RESPONSE_TOO_LARGE``) at once, which the connection turns
  into a failed call (``upstream_error``). The next call on the same session
  works. On stdio the request is found from the message's own ``id`` (at its
  head or tail, where every JSON-RPC encoder puts it, checked to be a member of
  the top-level object), or is the only one outstanding; if neither, the
  session is ended (every call in flight fails, the next one reconnects).
  A line whose head names its request is answered as soon as it passes the
  bound, not at its end, which may never come; and a line still going past
  ``ENDLESS_BYTES``, or for longer than the call timeout after it passed its
  bound, ends the session, so an upstream writing one endless line is
  restarted instead of holding every later call until its timeout;
- **large lines are parsed in a worker thread**, never on the event loop;
- **a tools/list answer is screened there too** (``ListingScreen``): tools past
  ``limits.max_tools`` or over the description / schema limits are taken out
  (and remembered by name and reason for the connection to report) before the
  SDK's session, which validates every listed tool on the event loop, sees the
  answer. What reaches the loop is bounded by the limits, whatever the
  upstream lists.

``bounded_stdio_client`` replaces ``mcp.client.stdio.stdio_client`` (the
process is spawned and stopped by the SDK's own code, through
``sharedos.compat.mcp_sdk``); ``BoundedHTTPTransport`` wraps httpx2's
transport under ``streamable_http_client``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import anyio.lowlevel
import httpx2
import mcp_types as types
from mcp.client.stdio import StdioServerParameters
from mcp.shared.message import SessionMessage
from mcp_types import methods as mcp_methods
from pydantic import ValidationError

from sharedos.compat import mcp_sdk
from sharedos.jsonrpc_id import EDGE_BYTES, message_id
from sharedos.upstream.config import UpstreamLimits
from sharedos.upstream.definitions import header_problem, over_limits

logger = logging.getLogger("sharedos.upstream")

#: the streamable-HTTP header naming the session a request belongs to
MCP_SESSION_ID = "mcp-session-id"
#: JSON-RPC error code of a synthesized "your answer was too large" (implementation range)
RESPONSE_TOO_LARGE = -32090
#: room for the JSON-RPC envelope and JSON escaping around a result of max_result_bytes
ENVELOPE_BYTES = 64 * 1024
#: lines at least this long are parsed in a worker thread
THREAD_PARSE_BYTES = 256 * 1024
#: JSON-RPC error code of a synthesized "your answer is not a valid JSON-RPC message"
MALFORMED_ANSWER = -32092
#: JSON-RPC error code of a synthesized "your answer has too many content blocks"
TOO_MANY_BLOCKS = -32091
#: JSON-RPC error code of a synthesized "the body of your POST answered another request"
NOT_ITS_ANSWER = -32093
#: content blocks a tools/call answer may have: the SDK's client validates each on the event
#: loop (and the bridge serializes each again), ~15 us apiece, so a 4 MiB answer of 130,000
#: one-character blocks stalled every turn of the host for seconds. Counted off the loop.
MAX_CONTENT_BLOCKS = 10_000
#: a stdio line still going past this many bytes is taken as endless: the session is
#: ended (and reopened by the next call)
ENDLESS_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True)
class ReadBounds:
    """The per-request bounds of one upstream (from its ``limits``)."""

    result: int
    listing: int

    @classmethod
    def of(cls, limits: UpstreamLimits) -> ReadBounds:
        """The bounds ``limits`` implies (see the module docstring)."""
        return cls(
            result=limits.max_result_bytes + ENVELOPE_BYTES, listing=limits.max_listing_bytes
        )

    def for_method(self, method: str | None) -> int:
        """The most bytes an answer to ``method`` may have."""
        return self.result if method == "tools/call" else self.listing

    def describe(self, method: str | None) -> str:
        """Which limit bounds an answer to ``method`` (for messages)."""
        return "limits.max_result_bytes" if method == "tools/call" else "limits.max_listing_bytes"


def _error_answer(request_id: Any, code: int, message: str) -> types.JSONRPCError:
    """The JSON-RPC error SharedOS answers ``request_id`` with in place of an upstream's answer."""
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )


def too_large(request_id: Any, method: str | None, bounds: ReadBounds) -> SessionMessage:
    """The JSON-RPC error answering ``request_id`` in place of an oversized answer."""
    limit = bounds.for_method(method)
    return SessionMessage(
        _error_answer(
            request_id,
            RESPONSE_TOO_LARGE,
            f"the answer to {method or 'the request'} was over {limit} bytes "
            f"({bounds.describe(method)}); SharedOS stopped reading it and relays nothing of it",
        )
    )


def _too_many_blocks(request_id: Any, result: Any) -> types.JSONRPCError | None:
    """The error answering ``request_id`` in place of a tools/call ``result`` with more than
    ``MAX_CONTENT_BLOCKS`` content blocks, or None."""
    blocks = result.get("content") if isinstance(result, dict) else None
    if not isinstance(blocks, list) or len(blocks) <= MAX_CONTENT_BLOCKS:
        return None
    return _error_answer(
        request_id,
        TOO_MANY_BLOCKS,
        f"the answer to tools/call has {len(blocks)} content blocks, over the "
        f"{MAX_CONTENT_BLOCKS} SharedOS relays; SharedOS relays nothing of it",
    )


def _response_with_result(body: bytes) -> dict[str, Any] | None:
    """A JSON-RPC response's bytes read as an object with a ``result``, or None (also for
    JSON nested deeper than Python's parser recurses: the SDK's own parser refuses it)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and "result" in data else None


def screen_call_body(body: bytes) -> bytes:
    """A tools/call answer's bytes, or an error in their place (``_too_many_blocks``)."""
    data = _response_with_result(body)
    if data is None:
        return body
    error = _too_many_blocks(data.get("id"), data["result"])
    if error is None:
        return body
    return error.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")


#: tools past ``limits.max_tools`` named one by one in a listing's refusals; the rest are
#: counted: a 16 MiB listing holds a million tiny tools, and naming each cost the host
#: about 20 µs of CPU and a kilobyte of memory a tool (26 s and 1.3 GB a listing)
NAMED_PAST_MAX_TOOLS = 10_000


class ListingScreen:
    """Takes the tools over an upstream's limits out of its tools/list answers, off the loop.

    One per connection. ``start`` is called when a listing's first page is
    requested (no cursor); ``screen`` runs on each answer (in a worker thread for
    a large one) and keeps count across the listing's pages; ``take`` hands the
    connection what was dropped, as (name, why), and how many tools past
    ``limits.max_tools`` it dropped without naming them (past ``NAMED_PAST_MAX_TOOLS``).
    """

    def __init__(self, limits: UpstreamLimits, *, named: int | None = None) -> None:
        self.limits = limits
        #: how many tools past ``limits.max_tools`` are named (``NAMED_PAST_MAX_TOOLS``)
        self.named = NAMED_PAST_MAX_TOOLS if named is None else named
        #: the session's protocol version, once negotiated: the listed tools are checked
        #: against its schema one by one (``_accepted``)
        self.version: str | None = None
        self._lock = threading.Lock()
        self._seen = 0
        self._dropped: list[tuple[str, str]] = []
        self._unnamed = 0

    def start(self) -> None:
        """A new listing begins: count from its first tool again."""
        with self._lock:
            self._seen = 0

    def take(self) -> tuple[list[tuple[str, str]], int]:
        """What was dropped since the last ``take``: (name, why) for each tool named, and
        how many more tools past ``limits.max_tools`` were dropped unnamed."""
        with self._lock:
            out, self._dropped = self._dropped, []
            unnamed, self._unnamed = self._unnamed, 0
        return out, unnamed

    def screen(self, result: Any) -> Any:
        """A tools/list result (a JSON object) with the tools over the limits taken out."""
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
            return result
        kept: list[Any] = []
        unnamed_from = self.limits.max_tools + self.named
        with self._lock:
            for tool in result["tools"]:
                self._seen += 1
                if self._seen > unnamed_from:
                    self._unnamed += 1
                    continue
                wire = tool if isinstance(tool, dict) else {}
                problem = over_limits(wire, self._seen, self.limits) or header_problem(wire)
                if problem:
                    # only a name's head is kept: reports shorten it anyway
                    self._dropped.append((str(wire.get("name", ""))[:256], problem))
                else:
                    kept.append(tool)
            kept = self._accepted(kept)
        if len(kept) == len(result["tools"]):
            return result
        return {**result, "tools": kept}

    def _accepted(self, tools: list[Any]) -> list[Any]:
        """``tools`` without those the SDK's session would refuse (called under the lock).

        The session validates a tools/list answer as a whole, against the negotiated
        version's schema: one tool it refuses (an ``inputSchema`` that is not an
        object schema, none at all) made the whole upstream unavailable. Here that
        tool alone is refused, by name; the reason names fields, never values.
        """
        if self.version is None:
            return tools
        for _ in range(len(tools) + 1):
            try:
                mcp_methods.validate_server_result("tools/list", self.version, {"tools": tools})
                return tools
            except (KeyError, ValueError) as exc:
                if not isinstance(exc, ValidationError):
                    return tools  # a version the SDK does not know: its session will say
                problems: dict[int, list[str]] = {}
                for e in exc.errors(include_url=False, include_input=False, include_context=False):
                    loc = e["loc"]
                    if len(loc) >= 2 and loc[0] == "tools" and isinstance(loc[1], int):
                        where = ".".join(str(p) for p in loc[2:]) or "tool"
                        problems.setdefault(loc[1], []).append(f"{where}: {e['msg']}")
                if not problems:
                    return tools  # not one tool's problem: the session reports it
                for index in sorted(problems):
                    wire = tools[index] if isinstance(tools[index], dict) else {}
                    shown = "; ".join(problems[index][:3])
                    self._dropped.append(
                        (
                            str(wire.get("name", ""))[:256],
                            f"it is not a tool definition MCP {self.version} accepts ({shown})",
                        )
                    )
                tools = [t for i, t in enumerate(tools) if i not in problems]
        return tools

    def screen_message(self, message: SessionMessage | Exception) -> SessionMessage | Exception:
        """``screen`` applied to a parsed JSON-RPC response."""
        if isinstance(message, SessionMessage) and isinstance(
            message.message, types.JSONRPCResponse
        ):
            screened = self.screen(message.message.result)
            if screened is not message.message.result:
                message.message.result = screened
        return message

    def screen_body(self, body: bytes) -> bytes:
        """``screen`` applied to a JSON-RPC response's bytes (re-encoded only if changed)."""
        data = _response_with_result(body)
        if data is None:
            return body
        screened = self.screen(data["result"])
        if screened is data["result"]:
            return body
        return json.dumps({**data, "result": screened}, separators=(",", ":")).encode("utf-8")


def _is_first_page(message: Any) -> bool:
    params = getattr(message, "params", None)
    cursor = params.get("cursor") if isinstance(params, dict) else None
    return cursor is None


# -- requests from the upstream --------------------------------------------------------

#: requests an upstream may have sent SharedOS (``ping``, ``roots/list``, sampling, ...) that
#: are not answered yet; more are dropped unanswered until one is
MAX_SERVER_REQUESTS = 32


class ServerRequests:
    """The upstream's requests to SharedOS delivered to the session and not yet answered.

    The SDK's session runs each request an upstream sends in a task of its own, and
    answers it through the transport: an upstream sending 100,000 ``ping``s (5 MB of
    stdout) without reading the answers had 100,000 tasks waiting to write in the host
    (700 MiB, and the event loop so busy that a call answered at once timed out). Here
    at most ``limit`` are in the session at once; one more, or one whose id is already
    in the session, is dropped unanswered (SharedOS offers an upstream nothing but
    ``ping``: its sampling, elicitation and roots are refused anyway).
    """

    def __init__(self, limit: int = MAX_SERVER_REQUESTS) -> None:
        self.limit = limit
        self.pending: set[Any] = set()
        self.dropped = 0
        #: the transport's read stream has ended: the session is gone (over streamable HTTP
        #: the SDK also fails a single request with "connection closed" when only that
        #: request's stream ended, and the session goes on)
        self.ended = False

    def admit(self, message: SessionMessage | Exception) -> bool:
        """True when ``message`` goes on to the session (anything but a request over the limit)."""
        if not isinstance(message, SessionMessage):
            return True
        inner = message.message
        if not isinstance(inner, types.JSONRPCRequest):
            return True
        key = json.dumps(inner.id)
        if len(self.pending) >= self.limit or key in self.pending:
            if self.dropped == 0:
                logger.warning(
                    "an upstream sent more than %d requests without reading their answers; "
                    "the rest are dropped unanswered",
                    self.limit,
                )
            self.dropped += 1
            return False
        self.pending.add(key)
        return True

    def answered(self, message: SessionMessage) -> None:
        """``message`` was written: a request of the upstream's it answers is no longer pending."""
        inner = message.message
        if isinstance(inner, types.JSONRPCResponse | types.JSONRPCError):
            self.pending.discard(json.dumps(inner.id))


class _GatedRead:
    """The transport's read stream, requests over ``ServerRequests``'s limit taken out."""

    def __init__(self, inner: Any, gate: ServerRequests) -> None:
        self.inner, self.gate = inner, gate

    @property
    def last_context(self) -> Any:
        """The sender's context of the last message (the SDK's ``ContextReceiveStream``)."""
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            try:
                message: SessionMessage | Exception = await self.inner.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self.gate.ended = True
                raise
            if self.gate.admit(message):
                return message

    def __aiter__(self) -> _GatedRead:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self.gate.ended = True  # the session's reader is done with it
        await self.inner.aclose()

    async def __aenter__(self) -> _GatedRead:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _GatedWrite:
    """The transport's write stream, telling ``ServerRequests`` of each answer once written."""

    def __init__(self, inner: Any, gate: ServerRequests) -> None:
        self.inner, self.gate = inner, gate

    async def send(self, item: SessionMessage, /) -> None:
        try:
            await self.inner.send(item)
        finally:
            self.gate.answered(item)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _GatedWrite:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@asynccontextmanager
async def bounded_server_requests(
    transport: Any, gate: ServerRequests | None = None
) -> AsyncGenerator[Any, None]:
    """``transport`` (an MCP client transport) with the upstream's requests to SharedOS
    bounded in flight, and the end of its read stream noted (``gate``)."""
    gate = gate if gate is not None else ServerRequests()
    async with transport as (read, write):
        yield _GatedRead(read, gate), _GatedWrite(write, gate)


# -- stdio ------------------------------------------------------------------------------


def _parse(line: bytes) -> SessionMessage | Exception:
    """One line as a session message, or the parse error as a value (as the SDK does)."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        logger.warning("an upstream sent a line that is not a JSON-RPC message")
        return exc


def _malformed(data: bytes, methods: dict[Any, str]) -> SessionMessage | None:
    """An error answering the outstanding request a line that is JSON but no valid JSON-RPC
    answer names by its ``id`` (a scalar result, an error of the wrong shape, a lone
    surrogate, JSON nested deeper than a parser goes), or None. Without it the request
    waited out its whole timeout and was recorded as unanswered. A line that is not JSON
    at all names no request."""
    try:
        data_obj = json.loads(data)
    except ValueError:
        return None
    except RecursionError:
        # valid JSON nested deeper than Python's parser recurses (the SDK's refuses it too):
        # its id is read from its edges, as an oversized line's is. Before, the error
        # escaped the reader and ended the session, every call in flight on it with it
        request_id = message_id(data[:EDGE_BYTES], data[-EDGE_BYTES:])
    else:
        if not isinstance(data_obj, dict) or "method" in data_obj:
            return None
        request_id = data_obj.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    method = methods.get(request_id)
    if method is None:
        return None
    return SessionMessage(
        _error_answer(
            request_id,
            MALFORMED_ANSWER,
            f"the answer to {method} is not a valid JSON-RPC answer; SharedOS relays nothing of it",
        )
    )


def _same_id(request_id: Any) -> Any:
    """``request_id`` as the SDK's session correlates it: a string holding an integer is that
    integer (``mcp.shared.dispatcher.coerce_request_id``), so ``"7"`` answers request 7."""
    if isinstance(request_id, str):
        with contextlib.suppress(ValueError):
            return int(request_id)
    return request_id


class _ByRequest(dict[Any, str]):
    """id -> method, each id taken as the SDK's session takes it (``_same_id``).

    The reader must find the request an answer names where the session will: an
    upstream answering request 7 as ``"id": "7"`` had its answer delivered to that
    call by the session but found no request here, so it passed unscreened (130,000
    content blocks validated on the event loop, a listing's limits unchecked, a
    malformed answer left to time out) and request 7 stayed outstanding for good.
    """

    def __setitem__(self, key: Any, value: str) -> None:
        super().__setitem__(_same_id(key), value)

    def __contains__(self, key: object) -> bool:
        return super().__contains__(_same_id(key))

    def get(self, key: Any, default: Any = None) -> Any:
        return super().get(_same_id(key), default)

    def pop(self, key: Any, default: Any = None) -> Any:
        return super().pop(_same_id(key), default)


#: requests SharedOS cancelled that are remembered, so a late answer to one is known for
#: what it is (the oldest is forgotten past this many)
CANCELLED_KEPT = 256


class _Outstanding:
    """Requests sent and not yet answered: id -> method; and the last ones cancelled.

    A request SharedOS cancelled (its call timed out, the harness cancelled it) is no
    longer outstanding: MCP has the upstream not answer it. It used to stay here for
    the session's life, one entry per cancelled call, so the reader's "the only request
    outstanding" never held again after the first, and an oversized answer whose id is
    not at its edges ended the session, every call in flight on it with it.
    """

    def __init__(self) -> None:
        self.methods: dict[Any, str] = _ByRequest()
        self.cancelled: dict[Any, str] = _ByRequest()

    def cancel(self, request_id: Any) -> None:
        """SharedOS cancelled ``request_id``: remembered as cancelled, no longer outstanding."""
        method = self.methods.pop(request_id)
        if method is None:
            return
        self.cancelled[request_id] = method
        while len(self.cancelled) > CANCELLED_KEPT:
            del self.cancelled[next(iter(self.cancelled))]

    def answered(self, request_id: Any) -> None:
        """``request_id`` got its answer (or an error in its place)."""
        self.methods.pop(request_id)
        self.cancelled.pop(request_id)

    def bound(self, bounds: ReadBounds) -> int:
        """The largest bound of what may arrive now."""
        if not self.methods:
            return bounds.result
        return max(bounds.for_method(m) for m in self.methods.values())


def _cancelled_id(message: SessionMessage) -> tuple[bool, Any]:
    """(True, the request id) for a ``notifications/cancelled``; (False, None) otherwise."""
    inner = message.message
    if (
        isinstance(inner, types.JSONRPCNotification)
        and inner.method == "notifications/cancelled"
        and isinstance(inner.params, dict)
    ):
        return True, inner.params.get("requestId")
    return False, None


class _CancelsAside:
    """The session's write stream to a stdio upstream, where a ``notifications/cancelled``
    never waits for the upstream to read its stdin.

    The SDK sends its courtesy cancel of a call given up on (its timeout, the harness
    cancelled) shielded, for up to 5 s, and the writer takes one message at a time: with
    the upstream no longer reading (stuck, or a pipe full of earlier calls) the cancel
    waited those 5 s, then the ping that was to find the session hung waited them again
    after its own window, past the handler's deadline the forward's waits were fitted in
    (a 1 s call was answered after 12 s, and a kernel timeout cancelled the forward first,
    keeping the hung session). A cancel the writer cannot take at once is put aside (at
    most ``CANCELLED_KEPT``; the request counts as cancelled already) and written after the
    message being written now."""

    def __init__(self, inner: Any, outstanding: _Outstanding) -> None:
        self.inner = inner
        self._outstanding = outstanding
        #: cancels waiting for the writer (written after its current message)
        self.aside: deque[SessionMessage] = deque()

    async def send(self, item: SessionMessage, /) -> None:
        cancel, request_id = _cancelled_id(item)
        if not cancel:
            await self.inner.send(item)
            return
        try:
            self.inner.send_nowait(item)
        except anyio.WouldBlock:
            self._outstanding.cancel(request_id)  # a late answer to it is dropped
            if len(self.aside) < CANCELLED_KEPT:
                self.aside.append(item)
        await anyio.lowlevel.checkpoint()

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _CancelsAside:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Line:
    """The line being read: its chunks while under the bound, its edges once over it."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self.over = False
        self.head = b""
        self.tail = b""
        #: when it went over its bound (monotonic seconds; 0 while under)
        self.over_at = 0.0
        #: the request it answers, once answered early (by the id at its head)
        self.answered: Any = None

    def add(self, piece: bytes, bound: int) -> None:
        if not piece:
            return
        if not self.over and self.size + len(piece) > bound:
            self.over = True
            self.over_at = time.monotonic()
            joined = b"".join(self.chunks)
            self.head = (joined + piece[:EDGE_BYTES])[:EDGE_BYTES]
            self.chunks = []
            self.tail = (joined + piece)[-EDGE_BYTES:]
        elif self.over:
            self.tail = (self.tail + piece)[-EDGE_BYTES:]
        else:
            self.chunks.append(piece)
        self.size += len(piece)


@asynccontextmanager
async def bounded_stdio_client(
    server: StdioServerParameters,
    errlog: TextIO,
    bounds: ReadBounds,
    *,
    screen: ListingScreen | None = None,
    on_unattributed: Callable[[], None] | None = None,
    on_endless: Callable[[], None] | None = None,
    endless_after_s: float = 60.0,
) -> AsyncGenerator[Any, None]:
    """``mcp.client.stdio.stdio_client`` with every line bounded while it is read.

    See the module docstring. ``on_unattributed`` is told when an oversized line
    could be matched to no request, ``on_endless`` when a line went on past
    ``ENDLESS_BYTES``, or for ``endless_after_s`` after passing its bound (the session
    is then ended).
    """
    process = await mcp_sdk.spawn_stdio_server(server, errlog)
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_inner, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    outstanding = _Outstanding()
    write_stream = _CancelsAside(write_inner, outstanding)
    shutting_down = False
    writer_done = anyio.Event()

    async def deliver(message: SessionMessage | Exception) -> None:
        if isinstance(message, SessionMessage):
            inner = message.message
            if isinstance(inner, types.JSONRPCResponse | types.JSONRPCError):
                outstanding.answered(inner.id)
        await read_writer.send(message)

    def parse(data: bytes) -> SessionMessage | Exception:
        message = _parse(data)
        if isinstance(message, Exception):
            return _malformed(data, outstanding.methods) or message
        if isinstance(message, SessionMessage):
            inner = message.message
            if isinstance(inner, types.JSONRPCResponse):
                method = outstanding.methods.get(inner.id)
                if method == "tools/list" and screen is not None:
                    message = screen.screen_message(message)
                elif method == "tools/call":
                    error = _too_many_blocks(inner.id, inner.result)
                    if error is not None:
                        message = SessionMessage(error)
        return message

    async def finish(line: _Line) -> bool:
        """Deliver one complete line; False when the session must end."""
        if not line.over:
            data = b"".join(line.chunks)
            if not data.strip():
                return True
            if len(data) >= THREAD_PARSE_BYTES:
                message = await anyio.to_thread.run_sync(parse, data)
            else:
                message = parse(data)
            await deliver(message)
            return True
        if line.answered is not None:
            return True  # its request was answered when the line passed its bound
        request_id = message_id(line.head, line.tail)
        if request_id is not None and request_id in outstanding.cancelled:
            outstanding.answered(request_id)
            return True  # a late answer to a cancelled request: nobody waits for it
        if request_id not in outstanding.methods:
            request_id = next(iter(outstanding.methods)) if len(outstanding.methods) == 1 else None
        if request_id is None:
            logger.warning("an upstream sent an oversized line answering no known request")
            if on_unattributed is not None:
                on_unattributed()
            return False
        method = outstanding.methods.get(request_id)
        await deliver(too_large(request_id, method, bounds))
        return True

    async def passed_bound(line: _Line) -> None:
        """A line just went over its bound: when its head names a request still waiting,
        answer that request now (the line's end may never come)."""
        request_id = message_id(line.head, b"")
        if request_id is not None and request_id in outstanding.cancelled:
            line.answered = request_id  # a late answer to a cancelled request: dropped
            outstanding.answered(request_id)
            return
        if request_id is None or request_id not in outstanding.methods:
            return  # the tail may name it: wait for the end (or the session's)
        line.answered = request_id
        await deliver(too_large(request_id, outstanding.methods.get(request_id), bounds))

    async def read_lines() -> None:
        """Deliver every line until EOF, the session's end, or a line no request owns."""
        assert process.stdout is not None
        line = _Line()
        while True:
            try:
                chunk = await process.stdout.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            start = 0
            while True:
                newline = chunk.find(b"\n", start)
                end = len(chunk) if newline == -1 else newline
                was_over = line.over
                line.add(chunk[start:end], outstanding.bound(bounds))
                if line.over:
                    try:
                        if not was_over:
                            await passed_bound(line)
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return  # the session is gone
                    if (
                        line.size > ENDLESS_BYTES
                        or time.monotonic() - line.over_at > endless_after_s
                    ):
                        logger.warning(
                            "an upstream sent a line (%d bytes so far) that did not end; "
                            "the session was ended",
                            line.size,
                        )
                        if on_endless is not None:
                            on_endless()
                        return
                if newline == -1:
                    break
                complete, line = line, _Line()
                try:
                    if not await finish(complete):
                        return
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return  # the session is gone
                start = newline + 1

    async def stdout_reader() -> None:
        try:
            try:
                async with read_writer:
                    await read_lines()
                # the session has seen the end (EOF, or ended here); what the server still
                # writes is drained so it can exit, as the SDK's reader does
            finally:
                await mcp_sdk.drain_stdio(process)
        except anyio.ClosedResourceError:
            pass
        except (anyio.BrokenResourceError, ConnectionError, OSError):
            if not shutting_down:
                logger.warning("reading an upstream's stdout failed mid-session")

    async def write(session_message: SessionMessage) -> None:
        assert process.stdin is not None
        message = session_message.message
        cancel, request_id = _cancelled_id(session_message)
        if cancel:
            outstanding.cancel(request_id)
        if isinstance(message, types.JSONRPCRequest):
            outstanding.methods[message.id] = message.method
            if screen is not None and message.method == "tools/list" and _is_first_page(message):
                screen.start()
        text = message.model_dump_json(by_alias=True, exclude_unset=True)
        await process.stdin.send((text + "\n").encode("utf-8"))

    async def stdin_writer() -> None:
        try:
            async with write_reader:
                async for session_message in write_reader:
                    await write(session_message)
                    while write_stream.aside:  # cancels sent while that was written
                        await write(write_stream.aside.popleft())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(mcp_sdk.STDIO_WRITER_FLUSH_TIMEOUT):
            await writer_done.wait()
        await mcp_sdk.stop_stdio_server(process)
        for stream in (read_stream, write_stream, read_writer, write_reader):
            await stream.aclose()
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            with anyio.CancelScope(shield=True):
                await shutdown()
            tg.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()


# -- streamable HTTP --------------------------------------------------------------------


def _request_of(request: httpx2.Request) -> tuple[Any, str | None, bool]:
    """(id, method, first page) of the JSON-RPC request an HTTP request carries."""
    if request.method != "POST":
        return None, None, False
    try:
        body = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return None, None, False
    if isinstance(body, dict) and "id" in body and isinstance(body.get("method"), str):
        params = body.get("params")
        first = not (isinstance(params, dict) and params.get("cursor") is not None)
        return body["id"], body["method"], first
    return None, None, False


def _error_body(request_id: Any, method: str | None, bounds: ReadBounds) -> bytes:
    message = too_large(request_id, method, bounds).message
    return message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")


Rewrite = Callable[[bytes], bytes]


def _not_its_answer(request_id: Any, method: str | None, body: bytes) -> bytes | None:
    """An error answering ``request_id`` in place of a JSON body that is no answer to it, or
    None (the body answers it, or is for the SDK to refuse: empty, not JSON, too large to
    tell by its edges).

    A request POSTed over streamable HTTP is answered by that POST's body and nowhere else,
    and the SDK routes a JSON body by the id it holds: a body answering another id (or a
    notification, or a response with ``"id": null``) was dropped, and the request waited
    out its whole ``call_s`` for an answer that could no longer come, then was recorded
    ``upstream_timeout`` though the upstream had answered at once.
    """
    found = message_id(body[:EDGE_BYTES], body[-EDGE_BYTES:])
    if found is not None:
        if found == request_id or str(found) == str(request_id):
            return None
    else:
        if len(body) > 2 * EDGE_BYTES:
            return None
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(data, dict) or data.get("id") is not None:
            return None
    answer = _error_answer(
        request_id,
        NOT_ITS_ANSWER,
        f"the upstream answered {method or 'the request'} with a message that is not its "
        "answer (another id, or none); SharedOS relays nothing of it",
    )
    return answer.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")


class _BoundedJSON(httpx2.AsyncByteStream):
    """A JSON body read whole up to ``limit`` bytes; past it, a JSON-RPC error instead.
    ``rewrite`` (a listing's screen) runs on the whole body in a worker thread."""

    def __init__(
        self,
        inner: Any,
        limit: int,
        replacement: Callable[[], bytes] | None,
        rewrite: Rewrite | None = None,
        answers: Callable[[bytes], bytes | None] | None = None,
    ) -> None:
        self.inner, self.limit, self.replacement, self.rewrite = inner, limit, replacement, rewrite
        #: the error to relay instead of a body that does not answer the request, or None
        self.answers = answers

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks: list[bytes] = []
        size = 0
        async for chunk in self.inner:
            size += len(chunk)
            if size > self.limit:
                await self.aclose()
                if self.replacement is None:
                    raise httpx2.ReadError("the upstream's answer is over its limit")
                yield self.replacement()
                return
            chunks.append(chunk)
        body = b"".join(chunks)
        if self.answers is not None and (instead := self.answers(body)) is not None:
            yield instead  # read from its edges only: cheap enough for the event loop
            return
        if self.rewrite is not None:
            body = await anyio.to_thread.run_sync(self.rewrite, body)
        yield body

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.inner.aclose()


_EVENT_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")


def _event_end(buffer: bytes | bytearray, start: int = 0) -> int:
    """The index just past the first complete SSE event in ``buffer`` (none ends before
    ``start``), or -1."""
    ends = [(at, len(sep)) for sep in _EVENT_ENDS if (at := buffer.find(sep, start)) != -1]
    if not ends:
        return -1
    at, width = min(ends)
    return at + width


def _rewrite_event(event: bytes, rewrite: Rewrite) -> bytes:
    """An SSE event whose data (a JSON-RPC message) went through ``rewrite``."""
    lines = event.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    data = [ln[5:].removeprefix(b" ") for ln in lines if ln.startswith(b"data:")]
    if not data:
        return event
    new = rewrite(b"\n".join(data))
    others = [ln for ln in lines if ln and not ln.startswith(b"data:")]
    return b"\n".join([*others, b"data: " + new]) + b"\n\n"


class _BoundedSSE(httpx2.AsyncByteStream):
    """An SSE body relayed event by event, each up to ``limit`` bytes; past it, a
    JSON-RPC error event answering the request instead, and the end of the stream.
    ``rewrite`` (a listing's screen) runs on each event's data in a worker thread."""

    def __init__(
        self,
        inner: Any,
        limit: int,
        replacement: Callable[[], bytes] | None,
        rewrite: Rewrite | None = None,
    ) -> None:
        self.inner, self.limit, self.replacement, self.rewrite = inner, limit, replacement, rewrite

    async def __aiter__(self) -> AsyncIterator[bytes]:
        buffer = bytearray()
        async for chunk in self.inner:
            # an event ends in the new bytes (or straddles into them): look only there
            fresh = len(buffer) - 3
            buffer += chunk
            while (end := _event_end(buffer, max(fresh, 0))) != -1:
                fresh = 0
                if end > self.limit:
                    break
                event = bytes(buffer[:end])
                del buffer[:end]
                if self.rewrite is not None:
                    event = await anyio.to_thread.run_sync(_rewrite_event, event, self.rewrite)
                yield event
            if len(buffer) > self.limit:
                await self.aclose()
                if self.replacement is not None:
                    yield b"event: message\ndata: " + self.replacement() + b"\n\n"
                return
        if buffer:
            yield bytes(buffer)

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.inner.aclose()


class _Decoded(httpx2.AsyncByteStream):
    """A response's body decoded from its ``Content-Encoding`` (gzip, deflate: httpx2's own
    decoders), a bounded piece at a time, so the bounds around it count decoded bytes."""

    def __init__(self, response: httpx2.Response) -> None:
        self.response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self.response.aiter_bytes():
            yield piece

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.response.aclose()


def _encoded(response: httpx2.Response) -> bool:
    """True when ``response``'s body is sent with a content coding (not ``identity``)."""
    codings = response.headers.get_list("content-encoding", split_commas=True)
    return any(c.strip().lower() not in ("", "identity") for c in codings)


#: GET requests (the upstream's own stream, a request's resumptions) a session sends at once...
GET_BURST = 40
#: ...then at most this many a second. The SDK's client reopens the upstream's own stream
#: each time it ends, after the ``retry:`` the upstream names: an upstream ending it at once
#: with ``retry: 0`` had the host send ~150 GETs a second for the session's whole life
GET_RATE = 2.0


class _Pace:
    """A token bucket: ``take`` waits until one of ``burst`` tokens, refilled at ``rate`` a
    second, is there."""

    def __init__(self, burst: int, rate: float) -> None:
        self.burst, self.rate = burst, rate
        self.tokens = float(burst)
        self.at = time.monotonic()

    async def take(self) -> None:
        now = time.monotonic()
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate) - 1
        self.at = now
        if self.tokens < 0:
            await anyio.sleep(-self.tokens / self.rate)


class BoundedHTTPTransport(httpx2.AsyncBaseTransport):
    """httpx2's transport with each MCP answer bounded while it is read (module docstring),
    and its GET requests paced (``GET_BURST``, ``GET_RATE``)."""

    def __init__(
        self,
        bounds: ReadBounds,
        screen: ListingScreen | None = None,
        inner: httpx2.AsyncBaseTransport | None = None,
        *,
        on_session_lost: Callable[[], None] | None = None,
    ) -> None:
        self.bounds = bounds
        self.screen = screen
        self.inner = inner if inner is not None else httpx2.AsyncHTTPTransport()
        #: told when the upstream answers a request of the session with 404: it no longer
        #: knows the session (restarted, or expired it), and MCP has the client open a new one
        self.on_session_lost = on_session_lost
        self._gets = _Pace(GET_BURST, GET_RATE)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Forward ``request``; wrap the answer's body in its bound (and screen a listing)."""
        request_id, method, first = _request_of(request)
        rewrite: Rewrite | None = None
        if self.screen is not None and method == "tools/list":
            if first:
                self.screen.start()
            rewrite = self.screen.screen_body
        elif method == "tools/call":
            rewrite = screen_call_body
        if request.method == "GET":
            await self._gets.take()
        response = await self.inner.handle_async_request(request)
        if (
            response.status_code == 404
            and request.headers.get(MCP_SESSION_ID)
            and request.method != "DELETE"
            and self.on_session_lost is not None
        ):
            self.on_session_lost()
        limit = self.bounds.for_method(method) if method else self.bounds.result
        bounds = self.bounds
        replacement = (
            (lambda: _error_body(request_id, method, bounds)) if request_id is not None else None
        )
        kind = response.headers.get("content-type", "").lower()
        # the bounds and screens below read the body as the SDK will: decoded. Counted on the
        # wire, a few KiB of gzip passed every bound and decoded to gigabytes in the host, and
        # the screens saw compressed bytes they could not parse, and let the answer through
        source: Any = response.stream
        dropped = {"content-length"}
        if _encoded(response):
            raw = httpx2.Response(
                response.status_code, headers=response.headers, stream=response.stream
            )
            source, dropped = _Decoded(raw), {"content-length", "content-encoding"}
        stream: httpx2.AsyncByteStream
        if kind.startswith("text/event-stream"):
            stream = _BoundedSSE(source, limit, replacement, rewrite)
        else:
            answers = None
            if request_id is not None and 200 <= response.status_code < 300:

                def answers(body: bytes) -> bytes | None:
                    return _not_its_answer(request_id, method, body)

            stream = _BoundedJSON(source, limit, replacement, rewrite, answers)
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in dropped]
        return httpx2.Response(
            status_code=response.status_code,
            headers=headers,
            stream=stream,
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.inner.aclose()
