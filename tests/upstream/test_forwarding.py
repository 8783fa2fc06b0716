"""Forwarding through the turn bridge to a real upstream: allowed, denied, failures, progress, cancel.

The fixture upstream logs every request it receives, so "a denied call never
reaches the upstream" is checked from the upstream's own side.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.timing import bound
from tests.upstream.conftest import (
    FIXTURE_RULES,
    RUN_POLICY,
    brokered,
    fixture_upstream,
    needs_kernel_reason,
    read_log,
    stdio_upstream,
    structured,
    text_of,
)

pytestmark = pytest.mark.anyio

RULES = FIXTURE_RULES + RUN_POLICY


def calls_received(log: Path) -> list[dict[str, object]]:
    return [e["params"] for e in read_log(log) if e["method"] == "tools/call"]  # type: ignore[misc]


async def test_allowed_call_is_forwarded_and_its_result_passed_back_unchanged(
    tmp_path: Path,
) -> None:
    log = tmp_path / "fx.log"
    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env, env.turn() as t:
        assert "fx.echo" in await t.names()
        result = await t.call("fx.echo", {"message": "hello upstream", "path": "/public/a"})
    assert result.is_error is False
    assert text_of(result) == "hello upstream"
    # structuredContent as the upstream sent it (its pid proves which process answered)
    assert structured(result)["echo"] == "hello upstream"
    assert isinstance(structured(result)["pid"], int)
    assert calls_received(log) == [
        {"name": "echo", "arguments": {"message": "hello upstream", "path": "/public/a"}}
    ]
    [record] = env.records()
    assert (record.tool, str(record.outcome), record.resource) == (
        "fx.echo",
        "succeeded",
        "/public/a",
    )


async def test_denied_calls_never_reach_the_upstream(tmp_path: Path) -> None:
    log = tmp_path / "fx.log"
    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env, env.turn() as t:
        denied = [
            await t.call("fx.echo", {"message": "x", "path": "/private/secret"}),
            await t.call("fx.echo", {"message": "x", "path": "/public/../private/secret"}),
            await t.call("fx.echo", {"message": "x", "path": "/home/bob/notes"}),
            await t.call("fx.echo", {"message": "x", "path": "relative"}),
            await t.call("fx.echo", {"message": "x"}),  # no resource at all
            await t.call("fx.crash", {"path": "/private/x"}),
            await t.call("fx.nope", {"path": "/public/x"}),
        ]
        allowed = await t.call("fx.echo", {"message": "ok", "path": "/home/alice/n"})
    assert all(r.is_error for r in denied)
    assert [structured(r)["outcome"] for r in denied] == ["denied"] * 7
    assert allowed.is_error is False
    # the upstream's own record: exactly the one allowed call, nothing else
    assert calls_received(log) == [
        {"name": "echo", "arguments": {"message": "ok", "path": "/home/alice/n"}}
    ]
    assert len(env.records()) == 8


async def test_the_canonical_resource_is_what_is_forwarded(tmp_path: Path) -> None:
    log = tmp_path / "fx.log"
    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env, env.turn() as t:
        result = await t.call("fx.echo", {"message": "m", "path": "/public/x/../y//z"})
    assert result.is_error is False
    # authorized as /public/y/z, and the upstream receives exactly that path
    assert calls_received(log)[0]["arguments"] == {"message": "m", "path": "/public/y/z"}


@needs_kernel_reason
async def test_an_upstream_is_error_result_reaches_the_caller_unchanged(tmp_path: Path) -> None:
    log = tmp_path / "fx.log"
    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env, env.turn() as t:
        result = await t.call("fx.fail", {"path": "/public/x"})
    assert result.is_error is True
    assert text_of(result) == "the fixture tool failed on purpose"
    assert structured(result) == {"why": "on purpose"}
    [record] = env.records()
    assert (str(record.outcome), str(record.reason)) == ("failed", "handler_error")


async def test_an_upstream_is_error_result_is_a_failed_outcome(tmp_path: Path) -> None:
    log = tmp_path / "fx.log"
    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env, env.turn() as t:
        result = await t.call("fx.fail", {"path": "/public/x"})
    assert result.is_error is True
    assert "the fixture tool failed on purpose" in text_of(result)
    [record] = env.records()
    assert str(record.outcome) == "failed"


@needs_kernel_reason
async def test_a_protocol_error_is_failed_upstream_error_never_a_json_rpc_error(
    tmp_path: Path,
) -> None:
    log = tmp_path / "fx.log"
    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env, env.turn() as t:
        result = await t.call("fx.protocol_error", {"path": "/public/x"})
        after = await t.call("fx.echo", {"message": "still here", "path": "/public/x"})
    assert result.is_error is True  # a result, not an exception in the client
    assert structured(result)["outcome"] == "failed"
    assert structured(result)["reason"] == "upstream_error"
    assert "fixture protocol error" in text_of(result)
    assert after.is_error is False
    assert next(str(r.reason) for r in env.records()) == "upstream_error"


async def test_a_protocol_error_is_a_failed_result(tmp_path: Path) -> None:
    log = tmp_path / "fx.log"
    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env, env.turn() as t:
        result = await t.call("fx.protocol_error", {"path": "/public/x"})
    assert result.is_error is True and structured(result)["outcome"] == "failed"
    assert "fixture protocol error" in text_of(result)


@needs_kernel_reason
async def test_an_upstream_that_crashes_mid_call_fails_and_the_next_call_reconnects(
    tmp_path: Path,
) -> None:
    log = tmp_path / "fx.log"
    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env, env.turn() as t:
        before = await t.call("fx.echo", {"message": "a", "path": "/public/x"})
        crashed = await t.call("fx.crash", {"path": "/public/x"})
        after = await t.call("fx.echo", {"message": "b", "path": "/public/x"})
    assert before.is_error is False and after.is_error is False
    assert structured(crashed)["reason"] == "upstream_error"
    assert "disconnected" in text_of(crashed)
    # a new upstream process answered the next call: the session was re-opened
    assert structured(before)["pid"] != structured(after)["pid"]
    outcomes = [(r.tool, str(r.outcome), str(r.reason)) for r in env.records()]
    assert outcomes == [
        ("fx.echo", "succeeded", "None"),
        ("fx.crash", "failed", "upstream_error"),
        ("fx.echo", "succeeded", "None"),
    ]


async def test_a_crash_mid_call_is_recorded_as_failed_and_the_turn_continues(
    tmp_path: Path,
) -> None:
    log = tmp_path / "fx.log"
    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env, env.turn() as t:
        before = await t.call("fx.echo", {"message": "a", "path": "/public/x"})
        crashed = await t.call("fx.crash", {"path": "/public/x"})
        after = await t.call("fx.echo", {"message": "b", "path": "/public/x"})
    assert crashed.is_error is True and structured(crashed)["outcome"] == "failed"
    assert after.is_error is False
    assert structured(before)["pid"] != structured(after)["pid"]
    assert [str(r.outcome) for r in env.records()] == ["succeeded", "failed", "succeeded"]


@needs_kernel_reason
async def test_a_slow_upstream_times_out_and_the_upstream_request_is_cancelled(
    tmp_path: Path,
) -> None:
    log = tmp_path / "fx.log"
    toml = fixture_upstream("fx", log, extra="timeouts = { call_s = 0.5 }")
    async with brokered(tmp_path, toml, RULES) as env, env.turn() as t:
        started = anyio.current_time()
        result = await t.call("fx.slow", {"seconds": 30, "path": "/public/x"})
        elapsed = anyio.current_time() - started
        await anyio.sleep(0.3)
    assert elapsed < bound(5)
    assert structured(result)["reason"] == "upstream_timeout"
    # the upstream's own log: its handler was cancelled
    assert any(e["method"] == "cancelled-in-handler" for e in read_log(log))


async def test_a_slow_upstream_fails_in_time_and_is_cancelled_upstream(tmp_path: Path) -> None:
    log = tmp_path / "fx.log"
    toml = fixture_upstream("fx", log, extra="timeouts = { call_s = 0.5 }")
    async with brokered(tmp_path, toml, RULES) as env, env.turn() as t:
        started = anyio.current_time()
        result = await t.call("fx.slow", {"seconds": 30, "path": "/public/x"})
        elapsed = anyio.current_time() - started
        await anyio.sleep(0.3)
    assert elapsed < bound(5) and result.is_error is True
    assert structured(result)["outcome"] == "failed"
    assert any(e["method"] == "cancelled-in-handler" for e in read_log(log))


async def test_cancellation_from_the_harness_is_forwarded_upstream(tmp_path: Path) -> None:
    log = tmp_path / "fx.log"
    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env, env.turn() as t:
        with anyio.move_on_after(0.7):
            await t.call("fx.slow", {"seconds": 30, "path": "/public/x"})
        with anyio.fail_after(5):
            while not any(e["method"] == "cancelled-in-handler" for e in read_log(log)):
                await anyio.sleep(0.05)
        after = await t.call("fx.echo", {"message": "next", "path": "/public/x"})
    assert after.is_error is False
    outcomes = [str(r.outcome) for r in env.records()]
    assert outcomes == ["cancelled", "succeeded"]


async def test_progress_notifications_are_relayed(tmp_path: Path) -> None:
    log = tmp_path / "fx.log"
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        seen.append((p, total, message))

    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env, env.turn() as t:
        result = await t.call(
            "fx.progress", {"steps": 3, "path": "/public/x"}, progress_callback=on_progress
        )
    assert result.is_error is False and text_of(result) == "3 steps done"
    assert seen == [(1.0, 3.0, "step 1/3"), (2.0, 3.0, "step 2/3"), (3.0, 3.0, "step 3/3")]


async def test_a_result_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "fx.log"
    toml = fixture_upstream("fx", log, extra="limits = { max_result_bytes = 1000 }")
    async with brokered(tmp_path, toml, RULES) as env, env.turn() as t:
        small = await t.call("fx.big", {"size": 10, "path": "/public/x"})
        big = await t.call("fx.big", {"size": 5000, "path": "/public/x"})
    assert small.is_error is False
    assert big.is_error is True and "x" * 1000 not in text_of(big)
    assert "over its limit of 1000 bytes" in text_of(big)


async def test_an_upstream_down_at_turn_open_is_reported_and_blocks_nothing(
    tmp_path: Path,
) -> None:
    log = tmp_path / "fx.log"
    toml = fixture_upstream("fx", log) + stdio_upstream(
        "down", str(tmp_path / "no-such-server"), [], namespace="fy"
    )
    rules = (
        RULES
        + '\nnamespace fy\nrequirement fy.echo { action read; resource path(args.path) }\npermit read on "/**"\n'
    )
    async with brokered(tmp_path, toml, rules, builtins=True) as env, env.turn() as t:
        names = await t.names()
        ok = await t.call("fx.echo", {"message": "up", "path": "/public/x"})
        builtin = (
            await t.call("files.read", {"path": "/public/a.txt"}) if "files.read" in names else None
        )
        missing = await t.call("fy.echo", {"path": "/public/x"})
        status = {s.upstream: s for s in t.upstreams.statuses}
    assert status["down"].state == "unavailable"
    assert "could not be reached" in status["down"].message
    assert status["fx"].state == "ok"
    assert "fx.echo" in names and not any(n.startswith("fy.") for n in names)
    assert ok.is_error is False
    assert missing.is_error is True and structured(missing)["reason"] == "tool_unavailable"
    assert any("upstream down (fy.*): unavailable" in line for line in t.upstreams.report())
    del builtin


async def test_calls_outside_a_prepared_turn_get_no_brokered_tools(tmp_path: Path) -> None:
    """A turn opened without the broker (or after it ended) has no brokered tools at all."""
    from sharedos.bridge import open_turn

    log = tmp_path / "fx.log"
    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env:
        ctx = env.context()
        catalog = env.host.kernel.list_tools(ctx, env.policy.tool_policies["run"])
        assert not any(n.startswith("fx.") for n in catalog.names)
        async with env.broker.turn(ctx):
            assert (
                "fx.echo" in env.host.kernel.list_tools(ctx, env.policy.tool_policies["run"]).names
            )
        assert env.broker.turn_state(ctx.turn_id) is None
        async with open_turn(env.host, ctx, env.policy.tool_policies["run"]) as turn:
            assert not any(n.startswith("fx.") for n in turn.catalog.names)
    assert calls_received(log) == []
