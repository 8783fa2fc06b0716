"""Raw wire clients for the bridge tests: HTTP bytes as sent, and a stdio bridge driven line by line.

The SDK client cannot send garbage (it serializes valid messages), so the
wire tests speak to the bridge below it: raw POST bodies through a plain
socket or ``httpx2``, and raw lines into a real ``sharedos bridge --stdio``
subprocess.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import anyio.abc
import httpx2

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def initialize(request_id: int = 1) -> dict[str, Any]:
    """A 2025-11-25 ``initialize`` request."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "rawwire", "version": "1"},
        },
    }


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def call(request_id: Any, name: Any, arguments: Any, *, modern: bool = False) -> dict[str, Any]:
    """A ``tools/call`` request (with the 2026-07-28 ``_meta`` envelope when ``modern``)."""
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if modern:
        params["_meta"] = MODERN_META
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def frame(message: Any) -> bytes:
    """One message as compact JSON bytes."""
    return json.dumps(message, separators=(",", ":")).encode()


async def legacy_session(hc: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """Open a 2025-11-25 session with a raw client; the headers later requests need."""
    init = await hc.post(url, json=initialize())
    assert init.status_code == 200, init.text
    session = {"mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": LEGACY}
    await hc.post(url, json=INITIALIZED, headers=session)
    return session


def modern_headers(name: str = "files.read") -> dict[str, str]:
    """The 2026-07-28 headers of a ``tools/call``."""
    return {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": name}


def json_rpc_messages(response: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages in a response body (plain JSON, a JSON array, or SSE ``data:`` lines)."""
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        out = []
        for line in text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                out.append(json.loads(line[5:]))
        return out
    if not text.strip():
        return []
    parsed = json.loads(text)
    return parsed if isinstance(parsed, list) else [parsed]


async def raw_request(port: int, data: bytes, *, read: bool = True, timeout: float = 10.0) -> bytes:
    """Send raw bytes on a fresh connection; return what the server sent until it closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        if not read:
            return b""
        chunks: list[bytes] = []
        with anyio.move_on_after(timeout):
            while chunk := await reader.read(65536):
                chunks.append(chunk)
        return b"".join(chunks)
    finally:
        writer.close()
        with anyio.move_on_after(1):
            await writer.wait_closed()


def http_post_head(port: int, token: str, length: int, extra: Mapping[str, str] = {}) -> bytes:
    """The request line and headers of a POST to ``/mcp`` announcing ``length`` body bytes."""
    headers = {
        "Host": f"127.0.0.1:{port}",
        "Authorization": f"Bearer {token}",
        "Content-Length": str(length),
        **ACCEPT,
        **extra,
    }
    head = "POST /mcp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (head + "\r\n").encode()


class StdioBridge:
    """A real ``sharedos bridge --stdio`` subprocess, fed raw lines, its replies collected by id."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.replies: list[dict[str, Any]] = []
        self.unparsed: list[bytes] = []
        self.stderr = b""
        self._buffer = bytearray()

    @classmethod
    async def start(cls, command: Sequence[str]) -> StdioBridge:
        """Launch the bridge command line a turn handed out."""
        process = await anyio.open_process(list(command))
        return cls(process)

    async def send(self, data: bytes) -> None:
        """Write raw bytes to the bridge's stdin (no newline added)."""
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def send_line(self, data: bytes) -> None:
        """Write one frame and its newline."""
        await self.send(data + b"\n")

    async def _read_some(self) -> bool:
        assert self.process.stdout is not None
        try:
            chunk = await self.process.stdout.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        # only the new chunk is searched for a newline: a long answer (tens of MB) read in
        # 64 KiB chunks would otherwise be searched over and over
        seen = len(self._buffer)
        self._buffer += chunk
        while (end := self._buffer.find(b"\n", seen)) >= 0:
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            seen = 0
            if not line.strip():
                continue
            try:
                self.replies.append(json.loads(line))
            except ValueError:
                self.unparsed.append(line)
        return True

    def reply(self, request_id: Any, since: int = 0) -> dict[str, Any] | None:
        """The reply for ``request_id`` received so far (from reply number ``since`` on), if any."""
        for message in self.replies[since:]:
            if message.get("id") == request_id and ("result" in message or "error" in message):
                return message
        return None

    async def wait_reply(
        self, request_id: Any, timeout: float = 20.0, since: int = 0
    ) -> dict[str, Any]:
        """Read until the reply for ``request_id`` arrives (ids may repeat: count from ``since``)."""
        with anyio.fail_after(timeout):
            while (found := self.reply(request_id, since)) is None:
                if not await self._read_some():
                    raise AssertionError(
                        f"the bridge closed stdout before replying to {request_id!r}"
                    )
        return found

    async def read_until_exit(self, timeout: float = 20.0) -> int:
        """Read every reply until the process exits; its return code."""
        with anyio.fail_after(timeout):
            while await self._read_some():
                pass
            code = await self.process.wait()
        await self._collect_stderr()
        return code

    async def wait_exit(self, timeout: float) -> tuple[int | None, float]:
        """Wait up to ``timeout`` seconds for the process to exit: (return code or None, seconds)."""
        started = time.monotonic()
        code: int | None = None
        with anyio.move_on_after(timeout):
            while await self._read_some():
                pass
            code = await self.process.wait()
        return code, time.monotonic() - started

    async def _collect_stderr(self) -> None:
        if self.process.stderr is None:
            return
        chunks = []
        with anyio.move_on_after(2):
            while True:
                try:
                    chunks.append(await self.process.stderr.receive())
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    break
        self.stderr += b"".join(chunks)

    async def handshake(self) -> None:
        """``initialize`` (2025-11-25) and ``notifications/initialized``."""
        await self.send_line(frame(initialize(0)))
        await self.wait_reply(0)
        await self.send_line(frame(INITIALIZED))

    async def kill(self) -> None:
        """Stop the process if it is still running."""
        if self.process.returncode is None:
            self.process.kill()
            with anyio.move_on_after(5):
                await self.process.wait()
        await self.process.aclose()
