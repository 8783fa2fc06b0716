"""An idle keep-alive connection outlives the clients' own idle timeouts.

Finding (fixed): uvicorn closes an idle keep-alive connection after 5 s, Node's
``fetch`` (undici) after 4 s of its own. A client whose event loop was busy past
its 4 s (Pi + pi-mcp-adapter on a loaded machine, between listing the tools and
the model's first call) reused the socket the bridge had just closed: the call
failed in the client with "fetch failed" and never reached the kernel. The
bridge now keeps an idle connection ``TransportLimits.keep_alive_s`` (120 s),
so the client is the one that closes it.
"""

from __future__ import annotations

import asyncio
import json

import anyio
import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.limits import TransportLimits
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, Runtime
from tests.bridge.rawwire import frame, http_post_head, initialize

pytestmark = pytest.mark.anyio


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    with anyio.move_on_after(seconds):
        try:
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass
        return True
    return False


async def test_an_idle_connection_is_closed_after_keep_alive_s(
    runtime: Runtime, alice: AccessContext
) -> None:
    limits = TransportLimits(keep_alive_s=0.5)
    async with open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn:
        assert turn.port is not None and turn.token is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", turn.port)
        body = frame(initialize())
        writer.write(http_post_head(turn.port, turn.token, len(body)) + body)
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        # the answer read, the connection is idle: closed by the bridge at its keep-alive
        # bound (uvicorn's own 5 s would outlast this wait)
        assert await _closed_within(reader, 3.0)
        writer.close()


def test_the_default_outlasts_the_clients_idle_timeouts() -> None:
    # Node's fetch 4 s, httpx 5 s, Go's net/http 90 s: the client closes an idle
    # connection first, so it never sends a request on one the bridge has closed
    assert TransportLimits().keep_alive_s > 90
    with pytest.raises(ValueError, match="keep_alive_s"):
        TransportLimits(keep_alive_s=0)


async def test_a_connection_idle_past_the_clients_own_timeouts_is_still_served(
    runtime: Runtime, alice: AccessContext
) -> None:
    # what a client whose loop was busy past its own idle timer does: send the next request
    # on the connection it pooled, 5.5 s later (uvicorn's 5 s had closed it: the request got
    # an EOF, Node's fetch said "fetch failed" and the call never reached the kernel)
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.port is not None and turn.token is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", turn.port)
        answers = []
        for wait in (0.0, 5.5):
            await anyio.sleep(wait)
            body = frame(initialize(len(answers) + 1))
            writer.write(http_post_head(turn.port, turn.token, len(body)) + body)
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                pytest.fail(f"the bridge had closed the idle connection: {exc!r}")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            answers.append((head.split(b" ")[1], json.loads(await reader.readexactly(length))))
        writer.close()
    assert [(status, reply["id"]) for status, reply in answers] == [(b"200", 1), (b"200", 2)]


async def test_connections_of_no_token_do_not_evict_the_harness_s_idle_connection(
    runtime: Runtime, alice: AccessContext
) -> None:
    """At the connection cap the oldest waiting connection was closed for a new one: the
    harness's idle keep-alive connection, the oldest of all. A few connections without the
    turn's token (silent ones, reopened as their header deadline closes them) evicted it,
    and the harness's next call went out on a closed socket, never made (what a 120 s
    keep-alive was to spare it). Connections that never carried a request with the token
    are evicted first now."""
    limits = TransportLimits(max_connections=4)
    async with open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn:
        assert turn.port is not None and turn.token is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", turn.port)

        async def ask(request_id: int) -> bytes:
            body = frame(initialize(request_id))
            writer.write(http_post_head(turn.port, turn.token, len(body)) + body)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            return head.split(b" ")[1]

        assert await ask(1) == b"200"
        others = [await asyncio.open_connection("127.0.0.1", turn.port) for _ in range(6)]
        await anyio.sleep(0.2)
        try:
            status = await ask(2)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            pytest.fail(f"the harness's idle connection was evicted: {exc!r}")
        assert status == b"200"
        assert turn.transport_stats is not None
        assert turn.transport_stats.connections_evicted >= 3
        for _, w in others:
            w.close()
        writer.close()
