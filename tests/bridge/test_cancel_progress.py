"""Cancellation, progress and logs through the bridge (HTTP, both eras)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from sharedos.bridge import open_turn
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, Runtime, http_client

pytestmark = pytest.mark.anyio


async def _wait_for_record(runtime: Runtime, turn_id: str, outcome: str) -> list[str]:
    with anyio.move_on_after(5):
        while True:
            outcomes = [str(r.outcome) for r in runtime.evidence.query(turn_id=turn_id)]
            if outcome in outcomes:
                return outcomes
            await anyio.sleep(0.02)
    return [str(r.outcome) for r in runtime.evidence.query(turn_id=turn_id)]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_caller_cancellation_cancels_the_handler_and_is_recorded(
    runtime: Runtime, alice: AccessContext, mode: str
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with http_client(turn.url, turn.token, mode=mode) as client:
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "slow.wait", {"seconds": 20})
                with anyio.fail_after(10):
                    await runtime.probe.started.wait()  # the handler is running
                tg.cancel_scope.cancel()
            outcomes = await _wait_for_record(runtime, alice.turn_id, "cancelled")
            # the connection stays usable after a cancelled call
            after = await client.call_tool("files.read", {"path": "/public/a.txt"})
    assert runtime.probe.cancelled and not runtime.probe.finished
    assert outcomes == ["cancelled"]
    assert not after.is_error
    (record, _) = runtime.evidence.query(turn_id=alice.turn_id)
    assert record.tool == "slow.wait" and str(record.reason) == "cancelled"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_read_timeout_cancels_the_handler(
    runtime: Runtime, alice: AccessContext, mode: str
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with http_client(turn.url, turn.token, mode=mode) as client:
            with pytest.raises(Exception):  # noqa: B017 - MCPError(-32001) from the SDK client
                await client.call_tool("slow.wait", {"seconds": 20}, read_timeout_seconds=1.0)
            outcomes = await _wait_for_record(runtime, alice.turn_id, "cancelled")
    assert outcomes == ["cancelled"]
    assert runtime.probe.cancelled


async def test_closing_the_turn_cancels_calls_in_flight(
    runtime: Runtime, alice: AccessContext
) -> None:
    async def call(url: str, token: str | None) -> None:
        try:
            async with http_client(url, token) as client:
                await client.call_tool("slow.wait", {"seconds": 20})
        except Exception:
            pass

    async with anyio.create_task_group() as tg:
        async with open_turn(runtime.host, alice, OPEN_POLICY, grace_s=0.2) as turn:
            assert turn.url is not None
            tg.start_soon(call, turn.url, turn.token)
            await runtime.probe.started.wait()
        outcomes = await _wait_for_record(runtime, alice.turn_id, "cancelled")
        tg.cancel_scope.cancel()
    assert outcomes == ["cancelled"]
    assert runtime.probe.cancelled


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_call_in_flight_as_the_turn_closes_is_answered_within_the_grace(
    runtime: Runtime, alice: AccessContext, mode: str
) -> None:
    """docs/bridge.md: in-flight responses get ``grace_s``. A 2025-11-25 call used to be
    cancelled at once (its session ended before the grace), a 2026-07-28 one answered."""
    results: list[Any] = []

    async def call(url: str, token: str | None) -> None:
        async with http_client(url, token, mode=mode) as client:
            await client.list_tools()  # the SDK lists after a result it has no schema for
            results.append(await client.call_tool("slow.wait", {"seconds": 0.3}))

    async with (
        anyio.create_task_group() as tg,
        open_turn(runtime.host, alice, OPEN_POLICY, grace_s=5.0) as turn,
    ):
        assert turn.url is not None
        tg.start_soon(call, turn.url, turn.token)
        with anyio.fail_after(10):
            await runtime.probe.started.wait()
    # the turn closed while the call ran; it finished within the grace
    (result,) = results
    assert not result.is_error, result
    assert runtime.probe.finished and not runtime.probe.cancelled
    (record,) = runtime.evidence.query(turn_id=alice.turn_id)
    assert str(record.outcome) == "succeeded"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_progress_reaches_the_caller(
    runtime: Runtime, alice: AccessContext, mode: str
) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with http_client(turn.url, turn.token, mode=mode) as client:
            result = await client.call_tool(
                "slow.wait", {"seconds": 0.05}, progress_callback=on_progress
            )
    assert not result.is_error
    assert seen and seen[0] == (0.0, 1.0, "started")
