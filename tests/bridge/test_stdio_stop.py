"""The stdio bridge's serving loop stopped while it classifies a large line, in process.

A line over 64 KiB is classified in a worker thread. The stop (the turn closed, the
linger over) was taken as that thread returned, and the line read off the pipe was
thrown away: a ``tools/call`` the client had written was neither answered nor recorded.
The loop (``sharedos.bridge.stdio._serve``) runs here over two pipes with the test's
own runtime; the classification returns only once the stop has ended the server, so
the stop always lands while the line is classified (by order, not by clock).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from sharedos.bridge import frames, stdio
from sharedos.bridge.server import TurnEndpoint
from sharedos.bridge.stdio_wire import StdioWire
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, Runtime
from tests.bridge.rawwire import INITIALIZED, call, frame, initialize

pytestmark = pytest.mark.anyio


@dataclass
class _Turn:
    """What ``_serve`` reads of its turn file."""

    close_linger_s: float = 0.05
    handler_timeout_s: float = 5.0


def _slow_call_line(request_id: int, *, valid: bool) -> bytes:
    """A ``tools/call`` line over 64 KiB (classified in a worker thread): valid, or
    refused (a lone surrogate)."""
    head = (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":'
        '{"name":"files.read","arguments":{"path":"/public/a.txt","n":['
    ).encode()
    bad = b"" if valid else b'"\\ud800",'
    return head + bad + b"1," * 40_000 + b"1]}}}"


class _Pipes:
    """The client's side of two pipes: it writes what the bridge reads, reads what it writes."""

    def __init__(self) -> None:
        self.bridge_reads, self.client_writes = os.pipe()
        self.client_reads, self.bridge_writes = os.pipe()
        for fd in (self.bridge_reads, self.bridge_writes, self.client_reads):
            os.set_blocking(fd, False)
        self.read = bytearray()

    def fds(self) -> Iterator[int]:
        yield from (self.bridge_reads, self.client_writes, self.client_reads, self.bridge_writes)

    async def send(self, data: bytes) -> None:
        await anyio.to_thread.run_sync(os.write, self.client_writes, data + b"\n")

    def replies(self) -> list[dict[str, Any]]:
        while True:
            try:
                chunk = os.read(self.client_reads, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            self.read += chunk
        return [json.loads(line) for line in bytes(self.read).splitlines() if line.strip()]

    async def reply(self, request_id: int) -> dict[str, Any]:
        with anyio.fail_after(10):
            while True:
                for reply in self.replies():
                    if reply.get("id") == request_id:
                        return reply
                await anyio.sleep(0.005)


class _StoppedServer:
    """The turn's server, telling (``stopped``) when the bridge's stop has ended it."""

    def __init__(self, server: Any) -> None:
        self._server = server
        self.stopped = threading.Event()

    def create_initialization_options(self) -> Any:
        return self._server.create_initialization_options()

    async def run(self, *args: Any) -> None:
        try:
            await self._server.run(*args)
        finally:
            self.stopped.set()


def _stdio_endpoint(
    runtime: Runtime, alice: AccessContext, is_open: threading.Event
) -> TurnEndpoint:
    """Alice's stdio turn endpoint under the open run policy, open while ``is_open`` is set."""
    return TurnEndpoint(
        runtime_host=runtime.host,
        context=alice,
        tool_policy=OPEN_POLICY,
        catalog=runtime.host.kernel.list_tools(alice, OPEN_POLICY),
        transport="stdio",
        is_open=is_open.is_set,
    )


@pytest.mark.parametrize("valid", [True, False], ids=["valid", "refused"])
async def test_a_large_line_being_classified_as_the_bridge_stops_is_answered_and_recorded(
    runtime: Runtime, alice: AccessContext, valid: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipes = _Pipes()
    wire = StdioWire(pipes.bridge_reads, pipes.bridge_writes, max_frame=8 << 20)
    is_open = threading.Event()
    is_open.set()
    endpoint = _stdio_endpoint(runtime, alice, is_open)
    server = _StoppedServer(endpoint.build_server())
    real = frames.classify

    def classify_as_the_turn_closes(data: bytes) -> frames.Frame:
        if len(data) > 64 * 1024:  # in its worker thread: the turn closes meanwhile, and
            is_open.clear()  # the bridge's stop has ended its server before this returns
            assert server.stopped.wait(10)
        return real(data)

    monkeypatch.setattr(frames, "classify", classify_as_the_turn_closes)
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(stdio._serve, wire, endpoint, server, _Turn(), 0.01, is_open.is_set)
                await pipes.send(frame(initialize(0)))
                await pipes.reply(0)
                await pipes.send(frame(INITIALIZED))
                await pipes.send(_slow_call_line(7, valid=valid))
    finally:
        answers = [r for r in pipes.replies() if r.get("id") == 7]
        for fd in pipes.fds():
            os.close(fd)
    assert len(answers) == 1, "the call read off the pipe was not answered exactly once"
    assert "result" in answers[0], f"answered as never read: {answers[0]}"
    reason = "turn_closed" if valid else "malformed_request"
    assert answers[0]["result"]["structuredContent"]["reason"] == reason
    records = [r for r in runtime.evidence.query(turn_id=alice.turn_id) if r.tool == "files.read"]
    assert [str(r.reason) for r in records] == [reason]


class _TakingServer:
    """The turn's server, stopped between taking a ``tools/call`` off its input and
    dispatching it: the turn closes as it takes the call, and no middleware sees it."""

    def __init__(self, server: Any, is_open: threading.Event) -> None:
        self._server = server
        self._is_open = is_open

    def create_initialization_options(self) -> Any:
        return self._server.create_initialization_options()

    async def run(self, read_stream: Any, write_stream: Any, options: Any) -> None:
        send, receive = anyio.create_memory_object_stream[Any](0)

        async def pump() -> None:
            async with send:
                async for item in read_stream:
                    if getattr(item.message, "method", None) == "tools/call":
                        self._is_open.clear()  # taken; the bridge's stop ends the server
                        await anyio.sleep_forever()
                    await send.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            await self._server.run(receive, write_stream, options)


async def test_a_call_the_server_took_and_never_dispatched_is_answered_and_recorded(
    runtime: Runtime, alice: AccessContext
) -> None:
    """The stop landing between the server taking a call and its middleware seeing it: the
    call was answered "cancelled, and recorded as cancelled", and nothing recorded it."""
    pipes = _Pipes()
    wire = StdioWire(pipes.bridge_reads, pipes.bridge_writes, max_frame=1 << 20)
    is_open = threading.Event()
    is_open.set()
    endpoint = _stdio_endpoint(runtime, alice, is_open)
    server = _TakingServer(endpoint.build_server(), is_open)
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(stdio._serve, wire, endpoint, server, _Turn(), 0.01, is_open.is_set)
                await pipes.send(frame(initialize(0)))
                await pipes.reply(0)
                await pipes.send(frame(INITIALIZED))
                await pipes.send(frame(call(7, "files.read", {"path": "/public/a.txt"})))
    finally:
        answers = [r for r in pipes.replies() if r.get("id") == 7]
        for fd in pipes.fds():
            os.close(fd)
    assert len(answers) == 1, answers
    assert answers[0]["result"]["structuredContent"]["reason"] == "turn_closed", answers[0]
    records = [r for r in runtime.evidence.query(turn_id=alice.turn_id) if r.tool == "files.read"]
    assert [str(r.reason) for r in records] == ["turn_closed"]
