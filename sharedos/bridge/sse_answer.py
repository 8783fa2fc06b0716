"""Answer a request POST with a JSON body unless its stream would carry more than the answer.

The SDK's 2025-11-25-era transport answers every request POST with an SSE
stream (``text/event-stream``): the headers go out at once, then the
request-scoped messages (progress, logs, server->client requests such as an
approval's elicitation), then the JSON-RPC answer, then the stream ends. Most
calls put nothing on that stream but the answer, and for those the stream
costs on both ends: the SDK client cannot reuse the connection of an SSE
answer (it stops reading once it has the response), so every call would open
a new TCP connection; and ``sse_starlette``'s response runs four tasks per
request (writer, keepalive ping, disconnect and shutdown listeners).

The MCP specification lets a server answer a POST with either
``Content-Type: application/json`` (one JSON-RPC response) or an SSE stream,
and every conforming client accepts both. ``AnswerOrStream`` is the response
of one request POST, decided by the request's first event rather than
predicted:

- if that event is the answer to this very request (a JSON-RPC response or
  error whose ``id`` is the request's, in the SDK's framing), the answer goes
  out as one ``application/json`` body;
- otherwise (a progress or log notification, a server->client request, a
  stream that ends empty, an event with an ``id`` for resumption ...) the SDK's
  own SSE response goes out with that event first and the rest of the stream
  after it, exactly as the SDK would have sent them;
- a request still silent after ``SILENCE_S`` (15 s, ``sse_starlette``'s
  keepalive interval) gets the SSE stream at once, a keepalive comment as its
  first event, so a long call keeps its connection alive as before;
- a request whose stream ends without its answer (its session was terminated:
  the turn closed, or the client ended the session, under a call still
  running) is answered all the same, with a JSON-RPC error (``CONNECTION_CLOSED``)
  for its id: as one JSON body when nothing went out yet, else as the stream's
  last event. The SDK's transport just ended the stream, and a client that
  reads that as a graceful end (the TypeScript SDK, so the Inspector too)
  kept waiting for the answer until its own request timeout (60 s by default;
  an SDK client without one, forever), where a stdio client, or a 2026-07-28
  one, saw the connection close at once.

So nothing that would have been on the stream is ever lost or delayed, and the
headers of a stream go out with its first event (as a client saw them when this
was decided on the wire). The 2026-07-28 transport already works this way
inside the SDK; ``sharedos.compat.mcp_sdk.route_request_streams`` lets the
bridge build the handshake era's request responses (``REQUEST_STREAM``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from starlette.types import Receive, Scope, Send

from sharedos.bridge.answers import CONNECTION_CLOSED, UNANSWERED
from sharedos.compat.mcp_sdk import SdkEventSourceResponse

logger = logging.getLogger(__name__)

#: seconds a request may stay silent before its stream starts (sse_starlette's keepalive)
SILENCE_S = 15.0


#: headers of the SDK's SSE response that do not belong on a JSON body
_SSE_ONLY_HEADERS = frozenset(("content-type", "content-length", "connection", "x-accel-buffering"))

SseEvent = dict[str, Any]


class AnswerOrStream:
    """The ASGI response of one request POST: JSON when its first event is its answer.

    ``content`` is the request's event stream and ``sender`` the transport's
    task that fills it; ``headers`` are the SDK's SSE headers (the session id
    among them); ``request_id`` is the JSON-RPC id of the request the POST
    carries: only a response to that id can be sent as JSON.
    """

    __slots__ = ("_content", "_expected", "_headers", "_id", "_sender")

    def __init__(
        self,
        content: MemoryObjectReceiveStream[SseEvent],
        sender: Callable[[], Coroutine[Any, Any, None]],
        headers: Mapping[str, str],
        request_id: int | str,
    ) -> None:
        self._content = content
        self._sender = sender
        self._headers = headers
        self._id = request_id
        # How the SDK serializes the start of an answer to this id (pydantic's
        # model_dump_json: jsonrpc, then id, then result or error, compact).
        ident = json.dumps(request_id, ensure_ascii=False, separators=(",", ":"))
        self._expected = (
            f'{{"jsonrpc":"2.0","id":{ident},"result":',
            f'{{"jsonrpc":"2.0","id":{ident},"error":',
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._sender)
            first: list[SseEvent | dict[str, str]] = []
            ended = False
            with anyio.move_on_after(SILENCE_S):
                try:
                    first.append(await self._content.receive())
                except anyio.EndOfStream:
                    ended = True  # the session was terminated: an empty stream, as the SDK's
            if first:
                answer = self._sole_answer(first[0])
                if answer is not None:
                    await self._answer(answer, send)
                    return  # the sender ends by itself once the answer is out
            elif ended:  # the session ended under the request: no answer will come
                await self._answer(self._unanswered().encode(), send)
                return
            else:  # silent so far: the stream starts, kept alive from now on
                first.append({"comment": f"ping - {datetime.now(UTC)}"})
            stream = SdkEventSourceResponse(
                content=self._resumed(first), headers=dict(self._headers)
            )
            await stream(scope, receive, send)
            tg.cancel_scope.cancel()  # the stream ended (or its client left): so does the sender

    async def _resumed(
        self, first: list[SseEvent | dict[str, str]]
    ) -> AsyncIterator[SseEvent | dict[str, str]]:
        """The request's events: those already read, then the rest as they come; if the
        stream ends without this request's answer, the error that says so."""
        answered = False
        for event in first:
            answered = answered or self._answers(event)
            yield event
        async for event in self._content:
            answered = answered or self._answers(event)
            yield event
        if not answered:
            yield {"event": "message", "data": self._unanswered()}

    def _answers(self, event: Mapping[str, Any]) -> bool:
        """Whether ``event`` carries this request's answer (the SDK's framing)."""
        data = event.get("data")
        return type(data) is str and data.startswith(self._expected)

    def _unanswered(self) -> str:
        """The JSON-RPC error for this request, in the SDK's framing (one host log line)."""
        logger.info(
            "bridge: a request was cancelled as the turn closed or its session ended; "
            "answered with an error"
        )
        return json.dumps(
            {
                "jsonrpc": "2.0",
                "id": self._id,
                "error": {"code": CONNECTION_CLOSED, "message": UNANSWERED},
            },
            separators=(",", ":"),
        )

    def _sole_answer(self, event: Mapping[str, Any]) -> bytes | None:
        """The JSON text of ``event`` when it is exactly this request's answer, in the SDK's framing."""
        if len(event) != 2 or event.get("event") != "message":
            return None  # an id for resumption, a comment, anything else: the stream
        data = event.get("data")
        if type(data) is not str or not data.startswith(self._expected) or data[-1:] != "}":
            return None
        try:
            return data.encode()
        except UnicodeEncodeError:  # a lone surrogate: whatever the SDK's stream does with it
            return None

    async def _answer(self, body: bytes, send: Send) -> None:
        headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in self._headers.items()
            if name.lower() not in _SSE_ONLY_HEADERS
        ]
        headers.append((b"content-type", b"application/json"))
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
