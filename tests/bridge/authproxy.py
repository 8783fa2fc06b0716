"""A loopback-only test proxy that adds the turn's bearer token to every request.

The MCP conformance suite cannot send headers, and the bridge can never run
without its token. Rather than an auth-off switch (which would have to be
reachable from somewhere), tests put this proxy in front: it listens on
127.0.0.1, injects ``Authorization: Bearer <token>`` into each HTTP/1.1
request head (replacing any the client sent), and pipes bytes both ways, so
SSE streams and keep-alive work unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class AuthInjectingProxy:
    """``async with AuthInjectingProxy(upstream_port, token) as url: ...`` (url ends in /mcp)."""

    def __init__(self, upstream_port: int, token: str, path: str = "/mcp") -> None:
        self._upstream = upstream_port
        self._auth = f"Authorization: Bearer {token}\r\n".encode()
        self._path = path
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}{self._path}"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Cancelled only by __aexit__; ending quietly keeps asyncio from logging it.
        with contextlib.suppress(asyncio.CancelledError):
            await self._proxy(reader, writer)

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        back = asyncio.create_task(self._pipe(up_reader, writer))
        self._tasks.add(back)
        try:
            async for chunk in self._requests(reader):
                up_writer.write(chunk)
                await up_writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(Exception):
                up_writer.write_eof()
            await asyncio.gather(back, return_exceptions=True)
            for w in (up_writer, writer):
                w.close()
            self._tasks.discard(task)
            self._tasks.discard(back)

    async def _requests(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            lines = head.split(b"\r\n")
            kept = [ln for ln in lines[1:] if not ln.lower().startswith(b"authorization:")]
            length = 0
            for ln in kept:
                name, _, value = ln.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
                if name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
                    raise ConnectionError(
                        "chunked request bodies are not supported by this test proxy"
                    )
            yield lines[0] + b"\r\n" + self._auth + b"\r\n".join(kept)
            if length:
                yield await reader.readexactly(length)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
