"""A turn's HTTP listener bounds what a peer can hold: connections, read time, sessions.

Finding (fixed): stalled connections were never timed out — mid-headers,
mid-body, or silent (the last two need no token): 1,000 of them stayed open
for minutes. Now header and body read deadlines close them, a per-turn cap
bounds how many are open (the oldest idle or stalled one makes room for a
new one), and each refusal is counted on ``Turn.transport_stats``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.limits import TransportLimits
from sharedos.catalog.definition import ToolDefinition, ToolMetadata
from sharedos.kernel.context import AccessContext
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.kernel.kernel import Kernel
from sharedos.kernel.runtime import RuntimeHost
from sharedos.policy import compile_paths
from sharedos.toolpolicy import ToolPolicy
from tests.bridge.conftest import DATA, OPEN_POLICY, Runtime, http_client
from tests.bridge.rawwire import (
    ACCEPT,
    call,
    frame,
    http_post_head,
    initialize,
    modern_headers,
)
from tests.timing import bound

pytestmark = pytest.mark.anyio

FAST = TransportLimits(header_timeout_s=0.5, body_timeout_s=0.5)


async def _closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    """True when the server closes the connection (EOF or reset) within ``within`` seconds."""
    with anyio.move_on_after(within):
        try:
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass
        return True
    return False


async def test_stalled_connections_are_timed_out_and_counted(
    runtime: Runtime, alice: AccessContext
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY, limits=FAST) as turn:
        assert turn.port is not None and turn.token is not None
        port, token = turn.port, turn.token
        body = frame(call(1, "files.read", {"path": "/public/a.txt"}))
        opened: list[tuple[str, asyncio.StreamReader, asyncio.StreamWriter]] = []
        for kind in ("silent", "mid-headers", "mid-body", "mid-body-no-token") * 10:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if kind == "mid-headers":
                writer.write(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
            elif kind == "mid-body":
                writer.write(http_post_head(port, token, len(body) + 100) + body)
            elif kind == "mid-body-no-token":
                writer.write(http_post_head(port, "x" * 43, len(body) + 100) + body)
            await writer.drain()
            opened.append((kind, reader, writer))
        started = time.monotonic()
        results = [
            (kind, await _closed_by_server(reader, FAST.body_timeout_s + 3))
            for kind, reader, _ in opened
        ]
        took = time.monotonic() - started
        for _, _, writer in opened:
            writer.close()
        # trickling bytes does not push a deadline back
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        trickled_at = time.monotonic()
        with anyio.move_on_after(5), contextlib.suppress(ConnectionError):
            for byte in b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 500:
                writer.write(bytes([byte]))
                await writer.drain()
                await anyio.sleep(0.01)
        trickle_closed = await _closed_by_server(reader, 2)
        trickle_took = time.monotonic() - trickled_at
        writer.close()
        # the turn still serves
        async with http_client(turn.url or "", turn.token) as client:
            assert not (await client.call_tool("files.read", {"path": "/public/a.txt"})).is_error
        stats = turn.transport_stats
    assert all(closed for _, closed in results), [k for k, c in results if not c]
    assert took < bound(FAST.body_timeout_s + 3)
    assert trickle_closed and trickle_took < bound(FAST.header_timeout_s + 2)
    assert stats.header_timeouts >= 21  # 10 silent, 10 mid-headers, the trickler
    assert stats.body_timeouts >= 20
    # the token holder's cut-off tools/call bodies are attempts: recorded, never run
    records = runtime.evidence.query(turn_id=alice.turn_id)
    cut = [r for r in records if str(r.reason) == "malformed_request"]
    assert len(cut) == 10 and all(str(r.outcome) == "failed" for r in cut)
    assert all(r.tool == "files.read" for r in cut)
    assert all((r.diagnostics or {})["rejectedByTransport"]["problem"] == "truncated" for r in cut)


async def test_the_connection_cap_keeps_a_flood_of_idle_connections_out(
    runtime: Runtime, alice: AccessContext
) -> None:
    limits = TransportLimits(max_connections=8, header_timeout_s=30)
    async with open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn:
        assert turn.port is not None
        flood = [await asyncio.open_connection("127.0.0.1", turn.port) for _ in range(40)]
        await anyio.sleep(0.2)
        # the harness still gets through: idle connections make room, oldest first
        async with http_client(turn.url or "", turn.token) as client:
            ok = await client.call_tool("files.read", {"path": "/public/a.txt"})
        closed = [await _closed_by_server(reader, 0.2) for reader, _ in flood]
        for _, writer in flood:
            writer.close()
        stats = turn.transport_stats
    assert not ok.is_error
    assert sum(closed) >= 32  # at most 8 were ever open at once
    assert stats.connections_evicted >= 32


async def test_busy_connections_are_not_evicted_and_new_ones_are_refused(
    runtime: Runtime, alice: AccessContext
) -> None:
    limits = TransportLimits(max_connections=3)
    async with open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn:
        assert turn.url is not None

        async def slow(n: int) -> bool:
            async with http_client(turn.url or "", turn.token) as client:
                r = await client.call_tool("slow.wait", {"seconds": 3.0})
                return not r.is_error

        outcomes: list[bool] = []

        async def run(n: int) -> None:
            outcomes.append(await slow(n))

        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(run, n)
            # three calls in flight: the cap is reached by busy connections (a fixed sleep was
            # not enough on a loaded machine: a client still between its initialize and its
            # call held an idle connection, which the new one evicted)
            with anyio.fail_after(60):
                while runtime.probe.running < 3:
                    await anyio.sleep(0.01)
            async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=5) as hc:
                with pytest.raises(httpx2.TransportError):
                    await hc.post(turn.url, json=initialize())
        stats = turn.transport_stats
    assert outcomes == [True, True, True]  # the busy ones were never touched
    assert stats.connections_refused >= 1


def _pipelining_stranger(port: int) -> socket.socket:
    """A connection without the turn's token that pipelines requests and reads no answer."""
    peer = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    peer.connect(("127.0.0.1", port))
    peer.settimeout(10)
    # ~84 KB of requests, answered 401 each: their answers fill the listener's write buffer
    peer.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 2500)
    return peer


async def test_strangers_that_read_no_answer_do_not_hold_the_cap(
    runtime: Runtime, alice: AccessContext
) -> None:
    """At the cap only a waiting connection could be closed for a new one. A connection
    without the turn's token that pipelines requests and reads none of the 401s is busy for
    good (its next answer waits for the peer to read; no deadline runs while a response is
    written): four of them (128 by default, a few hundred kilobytes each) held the cap, and
    the harness could not connect for the rest of the turn. Such a connection is closed to
    make room now: it never carried the turn's client's request."""
    limits = TransportLimits(max_connections=4)
    async with open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn:
        assert turn.port is not None and turn.url is not None
        port = turn.port
        strangers = [await anyio.to_thread.run_sync(_pipelining_stranger, port) for _ in range(4)]
        try:
            await anyio.sleep(0.5)  # let the listener answer until its write buffers are full
            async with http_client(turn.url, turn.token) as client:
                answer = await client.call_tool("files.read", {"path": "/public/a.txt"})
        finally:
            for peer in strangers:
                peer.close()
        stats = turn.transport_stats
    assert not answer.is_error
    assert stats.connections_refused == 0
    assert stats.connections_evicted >= 1


async def test_idle_legacy_sessions_expire_per_turn(runtime: Runtime, alice: AccessContext) -> None:
    limits = TransportLimits(session_idle_s=0.3)
    async with open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=5) as hc:
            init = await hc.post(turn.url, json=initialize())
            session = {
                "mcp-session-id": init.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-11-25",
            }
            await anyio.sleep(1.0)
            later = await hc.post(
                turn.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session
            )
    assert later.status_code == 404


# -- a client that stops reading a large answer --------------------------------------------
#
# Finding (fixed): every connection the bridge meant to be rid of (at the turn's close
# after its grace, at the connection cap, at a read deadline) was closed with asyncio's
# ``transport.close()``, which first waits for the write buffer to drain. A client that
# stops reading a large answer never drains it: its connection, its descriptor and the
# buffered answer (megabytes) stayed in the host process, ESTABLISHED, after the turn had
# closed — as long as the client cared to wait. Now those connections are aborted.

_BIG_RULES = """namespace big
requirement big.text { action call; resource "/big/text" }
permit call on "/big/**"
"""
_BIG_POLICY = ToolPolicy(name="big-answers", mode="open", managed=("files.*", "big.*"))


def _answer_bytes() -> int:
    """An answer larger than what the kernel buffers of a loopback connection can hold."""
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        most = int(f.read().split()[2])
    return most + 4 * 1024 * 1024


def _big_host(runtime: Runtime, tmp: Path) -> RuntimeHost:
    size = _answer_bytes()

    async def big_text(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        return HandlerResult.text("y" * size)

    registry = runtime.host.kernel.registry
    registry.register(
        ToolDefinition(
            name="big.text",
            description="Answer a text larger than the socket buffers.",
            input_schema={"type": "object"},
            metadata=ToolMetadata(namespace="big", source="tests"),
            handler=big_text,
        )
    )
    rules = tmp / "big.sos"
    rules.write_text(_BIG_RULES)
    return RuntimeHost(
        Kernel(compile_paths([DATA / "files.sos", rules]), registry), runtime.evidence
    )


def _server_sockets(port: int, peer: int | None = None) -> list[tuple[int, int]]:
    """(send queue, inode) of each loopback TCP socket on ``port`` (to ``peer``) a process holds."""
    rows = []
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, remote, queues, inode = fields[1], fields[2], fields[4], int(fields[9])
            if int(local.split(":")[1], 16) != port or inode == 0:  # inode 0: no process holds it
                continue
            if peer is not None and int(remote.split(":")[1], 16) != peer:
                continue
            rows.append((int(queues.split(":")[0], 16), inode))
    return rows


def _stalled_reader(port: int, token: str) -> socket.socket:
    """A connection that asks for a large answer and never reads it (a tiny receive window)."""
    body = frame(call(1, "big.text", {}, modern=True))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(http_post_head(port, token, len(body), modern_headers("big.text")) + body)
    return sock


async def _answer_written(port: int, peer: int) -> None:
    """Wait until the bridge has written the answer (the kernel's send queue is full)."""
    with anyio.fail_after(bound(10)):
        while not any(queued for queued, _ in _server_sockets(port, peer)):
            await anyio.sleep(0.02)


async def _let_go(port: int, peer: int | None = None, within: float = 2.0) -> bool:
    """True once no socket of the bridge's on ``port`` (to ``peer``) is held any more."""
    with anyio.move_on_after(bound(within)):
        while _server_sockets(port, peer):
            await anyio.sleep(0.02)
        return True
    return False


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the socket table of Linux")
async def test_a_client_that_stops_reading_is_let_go_when_the_turn_closes(
    runtime: Runtime, alice: AccessContext, tmp_path: Path
) -> None:
    host = _big_host(runtime, tmp_path)
    async with open_turn(host, alice, _BIG_POLICY, grace_s=0.2) as turn:
        assert turn.port is not None and turn.token is not None
        port = turn.port
        client = _stalled_reader(port, turn.token)
        peer = client.getsockname()[1]  # held open below: no other socket can have this pair
        await _answer_written(port, peer)
    try:
        # the turn is over: nothing of it may stay open in the host for this client
        assert await _let_go(port, peer), _server_sockets(port, peer)
    finally:
        client.close()
    records = runtime.evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.outcome)) for r in records] == [("big.text", "succeeded")]


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the socket table of Linux")
async def test_a_client_that_stops_reading_is_let_go_when_evicted(
    runtime: Runtime, alice: AccessContext, tmp_path: Path
) -> None:
    host = _big_host(runtime, tmp_path)
    limits = TransportLimits(max_connections=2, header_timeout_s=30)
    async with open_turn(host, alice, _BIG_POLICY, limits=limits) as turn:
        assert turn.port is not None and turn.token is not None
        port = turn.port
        stalled = _stalled_reader(port, turn.token)
        peer = stalled.getsockname()[1]
        await _answer_written(port, peer)
        # its answer is complete as far as the app goes: the connection is the oldest idle
        # one, and the client's own new connections make room by closing it (a connection
        # without the token would go first: ``test_a_slow_reader_outlasts_strangers_at_the_cap``)
        others = [await _own_connection(port, turn.token) for _ in range(2)]
        try:
            let_go = await _let_go(port, peer)
            async with http_client(turn.url or "", turn.token) as client:
                ok = await client.call_tool("files.read", {"path": "/public/a.txt"})
        finally:
            stalled.close()
            for _, writer in others:
                writer.close()
        stats = turn.transport_stats
    assert stats.connections_evicted >= 1
    assert let_go, "the evicted connection still holds its descriptor and its unsent answer"
    assert not ok.is_error


async def _own_connection(port: int, token: str) -> tuple[Any, asyncio.StreamWriter]:
    """A connection that carried a request with the turn's token (answered, read, kept open)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /elsewhere HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
    writer.write(f"Authorization: Bearer {token}\r\n\r\n".encode())
    await writer.drain()
    assert (await reader.readline()).startswith(b"HTTP/1.1 404")
    await reader.readuntil(b"Not Found")
    return reader, writer


def _read_answer(sock: socket.socket) -> dict[str, Any]:
    """The JSON answer of one HTTP response read whole from ``sock`` (ConnectionError if cut)."""
    sock.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("closed before the answer's headers")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(
        int(v) for k, _, v in (x.partition(":") for x in lines) if k.lower() == "content-length"
    )
    while len(body) < length:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionResetError(f"closed after {len(body)} of {length} answer bytes")
        body += chunk
    answer: dict[str, Any] = json.loads(body)
    return answer


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the socket table of Linux")
async def test_a_slow_reader_outlasts_strangers_at_the_cap(
    runtime: Runtime, alice: AccessContext, tmp_path: Path
) -> None:
    """At the cap, a connection without the turn's token is closed before the turn's own
    client's. Before, the oldest waiting connection not ``kept`` went first, and one whose
    client had not yet read a large answer (its write buffer over the high-water mark: any
    answer larger than the socket buffers, for as long as the client takes to read it) was
    not kept: any local process that opened connections up to the cap and one more closed
    the harness's connection under the answer it was reading (the call ran and was
    recorded; its answer was lost), although its own connections were there to close."""
    host = _big_host(runtime, tmp_path)
    limits = TransportLimits(max_connections=3, header_timeout_s=30)
    async with open_turn(host, alice, _BIG_POLICY, limits=limits) as turn:
        assert turn.port is not None and turn.token is not None
        port = turn.port
        harness = _stalled_reader(port, turn.token)  # a client slow to read its answer
        strangers = []
        try:
            await _answer_written(port, harness.getsockname()[1])
            for _ in range(3):  # silent connections without the token: the third is one too many
                strangers.append(await asyncio.open_connection("127.0.0.1", port))
            with anyio.fail_after(bound(10)):
                while turn.transport_stats.connections_evicted < 1:
                    await anyio.sleep(0.02)
            try:
                answer = await anyio.to_thread.run_sync(_read_answer, harness)
            except ConnectionError as exc:
                answer = {"lost": str(exc)}
        finally:
            harness.close()
            for _, writer in strangers:
                writer.close()
    assert len(answer.get("result", {}).get("content", [{}])[0].get("text", "")) == (
        _answer_bytes()
    ), str(answer)[:200]


async def test_a_body_over_the_limit_is_refused_from_its_edges(
    runtime: Runtime, alice: AccessContext
) -> None:
    """A POST over ``max_frame_bytes`` is refused 413 and recorded as the stdio line over
    the limit is: from its first and last bytes, which show a tools/call and the id to
    answer. Before, a body announced over the limit (a Content-Length: every SDK client
    sends one) was refused unread, and one found over it mid-read kept only 64 bytes of its
    head: its record said it was no call (``looksLikeCall`` false, the fingerprint of no
    bytes at all), and an id at the body's end (where the TypeScript SDK writes it) was
    answered null."""
    limits = TransportLimits(max_frame_bytes=100_000)
    pad = "x" * 200_000
    # the TypeScript SDK's order: method and params first, the id last
    body = json.dumps(
        {
            "method": "tools/call",
            "params": {"name": "files.read", "arguments": {"path": "/public/a.txt", "pad": pad}},
            "jsonrpc": "2.0",
            "id": 77,
        }
    ).encode()

    async def chunked() -> Any:
        for at in range(0, len(body), 16_384):
            yield body[at : at + 16_384]

    async with open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=30) as hc:
            announced = await hc.post(turn.url, content=body)
            streamed = await hc.post(turn.url, content=chunked())
    assert [announced.status_code, streamed.status_code] == [413, 413]
    assert [announced.json()["id"], streamed.json()["id"]] == [77, 77]
    records = runtime.evidence.query(turn_id=alice.turn_id)
    malformed = [(r.diagnostics or {}).get("malformed", {}) for r in records]
    assert [m.get("problem") for m in malformed] == ["oversized", "oversized"]
    assert [m.get("looksLikeCall") for m in malformed] == [True, True]
    assert [m.get("bytes") for m in malformed] == [len(body), len(body)]
    nothing = hashlib.sha256(b"").hexdigest()[:32]
    assert all(m.get("head") != nothing for m in malformed)
