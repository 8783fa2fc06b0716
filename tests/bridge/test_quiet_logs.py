"""Expected events at the transport are one log line each, never a traceback.

Finding (fixed): a client that disconnected mid-body (``ClientDisconnect``)
and a request still in flight when the turn closed each put a full traceback
on stderr ("Error handling POST request", "Exception in ASGI application").
"""

from __future__ import annotations

import asyncio
import logging

import anyio
import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.limits import TransportLimits
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, Runtime, http_client
from tests.bridge.rawwire import call, frame, http_post_head
from tests.descriptors import assert_paced, exhaust_descriptors, needs_proc_fd
from tests.timing import bound

pytestmark = pytest.mark.anyio


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info or r.exc_text]


async def test_client_disconnect_mid_body_is_one_line_and_recorded(
    runtime: Runtime, alice: AccessContext, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.port is not None and turn.token is not None
        body = frame(call(5, "files.read", {"path": "/public/a.txt"}))
        _, writer = await asyncio.open_connection("127.0.0.1", turn.port)
        writer.write(http_post_head(turn.port, turn.token, len(body) + 50) + body[:60])
        await writer.drain()
        await anyio.sleep(0.2)
        writer.close()
        await anyio.sleep(0.5)
    assert _tracebacks(caplog) == []
    lines = [r.getMessage() for r in caplog.records if "cut off" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    records = runtime.evidence.query(turn_id=alice.turn_id)
    assert [(str(r.outcome), str(r.reason)) for r in records] == [("failed", "malformed_request")]
    malformed = (records[0].diagnostics or {})["malformed"]
    assert malformed["problem"] == "truncated" and malformed["bytes"] == 60
    assert malformed["looksLikeCall"] is True
    assert "files.read" not in str(records[0].diagnostics)  # what can be said, never the bytes


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_call_in_flight_at_close_is_one_line_and_recorded(
    runtime: Runtime, alice: AccessContext, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    caplog.set_level(logging.INFO)

    async def slow(url: str, token: str | None) -> None:
        try:
            async with http_client(url, token, mode=mode) as client:
                await client.call_tool("slow.wait", {"seconds": 10})
        except Exception:  # the client sees its connection end when the turn closes
            pass

    with anyio.fail_after(20):
        async with (
            anyio.create_task_group() as tg,
            open_turn(runtime.host, alice, OPEN_POLICY) as turn,
        ):
            assert turn.url is not None
            tg.start_soon(slow, turn.url, turn.token)
            await runtime.probe.started.wait()
            # leaving the block closes the turn with the call still running
    assert _tracebacks(caplog) == []
    lines = [r.getMessage() for r in caplog.records if "as the turn closed" in r.getMessage()]
    assert len(lines) == 1
    records = runtime.evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.outcome)) for r in records] == [("slow.wait", "cancelled")]


@needs_proc_fd
async def test_a_host_out_of_descriptors_says_so_in_one_line_and_serves_after(
    runtime: Runtime, alice: AccessContext, caplog: pytest.LogCaptureFixture
) -> None:
    """asyncio's accept loop does not stop at EMFILE: it retried ``accept()`` up to the
    listener's backlog (2,048) times per tick, logging a traceback and scheduling one
    more retry each time, so a host out of descriptors wrote about 8,000 tracebacks a
    second to stderr (40 MB in 12 s) and spent its CPU on them. Now the listener pauses
    once per second, says so in one line, and serves again once descriptors are free."""
    caplog.set_level(logging.INFO)
    limits = TransportLimits(max_connections=1000)  # the descriptors run out first
    loop = asyncio.get_running_loop()
    runner_handler = loop.get_exception_handler()
    # asyncio's own handler (a host's loop has it), not the test runner's collector
    loop.set_exception_handler(None)
    try:
        async with open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn:
            assert turn.port is not None
            await exhaust_descriptors(turn.port, 200, caplog)
            with anyio.fail_after(bound(30)):
                async with http_client(str(turn.url), turn.token) as client:
                    ok = await client.call_tool("files.read", {"path": "/public/a.txt"})
            assert not ok.is_error
        await anyio.sleep(1.5)  # no retry of a closed listener is left behind either
    finally:
        loop.set_exception_handler(runner_handler)
    assert_paced(caplog)
