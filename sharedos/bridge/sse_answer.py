"""Answer a POST with a JSON body when its SSE stream would carry nothing but the answer.

The SDK's 2025-11-25-era transport answers every request POST with an SSE
stream (``text/event-stream``): the headers go out at once, then the
request-scoped messages (progress, logs, server->client requests such as an
approval's elicitation), then the JSON-RPC answer, then the stream ends. Most
calls put nothing on that stream but the answer, and for those the stream
costs on both ends: the SDK client cannot reuse the connection of an SSE
answer (it stops reading once it has the response), so every call opens a new
TCP connection, and the SSE framing adds work per message.

The MCP specification lets a server answer a POST with either
``Content-Type: application/json`` (one JSON-RPC response) or an SSE stream,
and every conforming client accepts both. This wrapper decides per request,
after the fact rather than by prediction: it holds the SSE response's start
until the stream's first event, then

- if that event is the answer to this very request (a JSON-RPC response or
  error whose ``id`` is the request's), the answer goes out as one
  ``application/json`` body, and the rest of the stream (its end) is dropped;
- otherwise (a progress or log notification, a server->client request, the
  SDK's keepalive ping after 15 s of silence, a stream that ends empty, an
  event with an ``id`` for resumption ...) the held start and everything
  after it go out unchanged: the client gets the stream exactly as before.

So nothing that would have been on the stream is ever lost or delayed: the
stream is only replaced when it would have carried the answer alone. The
2026-07-28 transport already works this way inside the SDK (JSON unless the
handler emits before answering); there, the first event of a committed
stream is never the answer, so this wrapper passes it through untouched.

It reads only the ASGI messages of the SSE wire format (``event: message``
then one ``data:`` line per event, one event per body message, as the SDK's
``sse_starlette`` writes them); any other shape fails safe, to SSE.
"""

from __future__ import annotations

import json

from starlette.types import Message, Send

#: headers of the SSE response that do not belong on a JSON body
_SSE_ONLY_HEADERS = frozenset(
    (b"content-type", b"content-length", b"connection", b"x-accel-buffering", b"transfer-encoding")
)


class SoleAnswerAsJson:
    """An ASGI ``send`` for one request POST: its SSE answer becomes JSON when the answer is all it carries.

    ``request_id`` is the JSON-RPC id of the request the POST carries; only a
    response to that id can replace the stream.
    """

    __slots__ = ("_expected", "_held", "_mode", "_send")

    def __init__(self, send: Send, request_id: int | str) -> None:
        self._send = send
        # How the SDK serializes the start of an answer to this id (pydantic's
        # model_dump_json: jsonrpc, then id, then result or error, compact).
        ident = json.dumps(request_id, ensure_ascii=False, separators=(",", ":"))
        self._expected = (
            f'{{"jsonrpc":"2.0","id":{ident},"result":'.encode(),
            f'{{"jsonrpc":"2.0","id":{ident},"error":'.encode(),
        )
        self._held: Message | None = None
        #: "" undecided, "sse" passing through, "json" answered (the rest is dropped)
        self._mode = ""

    async def __call__(self, message: Message) -> None:
        mode = self._mode
        if mode == "sse":
            await self._send(message)
            return
        if mode == "json":
            return  # the SSE stream's end: the client already has its whole answer
        if message["type"] == "http.response.start":
            if message["status"] == 200 and _is_event_stream(message):
                self._held = message  # decided by the first event
                return
            self._mode = "sse"  # a JSON answer, a 202, a rejection: not ours to change
            await self._send(message)
            return
        held = self._held
        if held is None or message["type"] != "http.response.body":
            self._mode = "sse"
            await self._send(message)
            return
        answer = self._sole_answer(bytes(message.get("body", b"")))
        if answer is None:
            self._mode = "sse"
            await self._send(held)
            await self._send(message)
            return
        self._mode = "json"
        headers = [(k, v) for k, v in held["headers"] if bytes(k).lower() not in _SSE_ONLY_HEADERS]
        headers.append((b"content-type", b"application/json"))
        headers.append((b"content-length", str(len(answer)).encode()))
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        await self._send({"type": "http.response.body", "body": answer})

    def _sole_answer(self, chunk: bytes) -> bytes | None:
        """The JSON text of ``chunk`` when it is exactly one SSE event carrying this request's answer."""
        lines = chunk.replace(b"\r\n", b"\n").split(b"\n")
        # event: message / data: {...} / blank line: nothing else (no id:, no retry:, one data line)
        if len(lines) != 4 or lines[0] != b"event: message" or lines[2] or lines[3]:
            return None
        data = lines[1]
        if not data.startswith(b"data: "):
            return None
        data = data[6:]
        return data if data.startswith(self._expected) and data.endswith(b"}") else None


def _is_event_stream(start: Message) -> bool:
    for name, value in start.get("headers", ()):
        if bytes(name).lower() == b"content-type":
            return bytes(value).lower().startswith(b"text/event-stream")
    return False
