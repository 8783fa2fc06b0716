"""Brokered tools over a stdio bridge: the bridge process relays every call to this host.

Before: a turn opened over stdio through the public API with brokered
upstreams served nothing — the bridge process computed its own catalogue
without the host's upstreams and exited 2 ("catalogue drift ... (policy or
tools changed)"). Now the stdio bridge relays to the host that holds the
pooled upstream sessions, so the same calls get the same answers, the same
re-authorization and the same write-ahead evidence as over HTTP, and a denied
call still never reaches the upstream (the fixture's own log says so).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from sharedos.bridge import open_turn
from sharedos.bridge.turnfile import StdioLaunch
from tests.upstream.conftest import (
    FIXTURE_RULES,
    RUN_POLICY,
    brokered,
    fixture_upstream,
    read_log,
    structured,
    text_of,
)

pytestmark = pytest.mark.anyio

RULES = FIXTURE_RULES + RUN_POLICY


def calls_received(log: Path) -> list[dict[str, object]]:
    return [e["params"] for e in read_log(log) if e["method"] == "tools/call"]  # type: ignore[misc]


async def test_a_stdio_turn_through_the_public_api_serves_brokered_tools(tmp_path: Path) -> None:
    """What failed before: ``open_turn(transport="stdio", stdio=StdioLaunch(...))`` with brokered
    upstreams; the bridge process now serves the host's catalogue, upstream tools included."""
    log = tmp_path / "fx.log"
    rules = tmp_path / "rules.sos"
    rules.write_text(RULES, encoding="utf-8")
    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env:
        ctx = env.context("alice")
        launch = StdioLaunch(rules=(rules,), evidence_db=tmp_path / "evidence.sqlite", tool_sets=())
        tool_policy = env.policy.tool_policies["run"]
        async with (
            env.broker.turn(ctx),
            open_turn(env.host, ctx, tool_policy, transport="stdio", stdio=launch) as turn,
        ):
            assert turn.command is not None
            params = StdioServerParameters(command=turn.command[0], args=turn.command[1:])
            async with Client(params) as client:
                names = sorted(t.name for t in (await client.list_tools()).tools)
                allowed = await client.call_tool("fx.echo", {"message": "hi", "path": "/public/a"})
                denied = await client.call_tool(
                    "fx.echo", {"message": "x", "path": "/private/secret"}
                )
    assert names == sorted(turn.catalog.names) and "fx.echo" in names
    assert allowed.is_error is False and text_of(allowed) == "hi"
    assert denied.is_error is True and structured(denied)["reason"] == "forbidden"
    assert calls_received(log) == [
        {"name": "echo", "arguments": {"message": "hi", "path": "/public/a"}}
    ]
    records = env.records(ctx.turn_id)
    assert [(r.tool, str(r.outcome)) for r in records] == [
        ("fx.echo", "succeeded"),
        ("fx.echo", "denied"),
    ]
    # recorded by this host with its trusted context (the bridge process never held it)
    assert {r.principal for r in records} == {"alice"}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_allowed_denied_and_canonical_paths_over_stdio(tmp_path: Path, mode: str) -> None:
    log = tmp_path / "fx.log"
    async with (
        brokered(tmp_path, fixture_upstream("fx", log), RULES) as env,
        env.turn(mode=mode, transport="stdio") as t,
    ):
        assert "fx.echo" in await t.names()
        allowed = await t.call("fx.echo", {"message": "m", "path": "/public/x/../y//z"})
        denied = [
            await t.call("fx.echo", {"message": "x", "path": "/private/secret"}),
            await t.call("fx.echo", {"message": "x", "path": "/public/../private/secret"}),
            await t.call("fx.nope", {"path": "/public/x"}),
        ]
        failed = await t.call("fx.fail", {"path": "/public/x"})
    assert allowed.is_error is False and structured(allowed)["echo"] == "m"
    assert [structured(r)["outcome"] for r in denied] == ["denied"] * 3
    assert failed.is_error is True and "failed on purpose" in text_of(failed)
    # authorized as /public/y/z, forwarded as exactly that; nothing denied reached the upstream
    assert calls_received(log) == [
        {"name": "echo", "arguments": {"message": "m", "path": "/public/y/z"}},
        {"name": "fail", "arguments": {"path": "/public/x"}},
    ]
    assert [str(r.outcome) for r in env.records()] == [
        "succeeded",
        "denied",
        "denied",
        "denied",
        "failed",
    ]


async def test_progress_and_cancellation_cross_the_relay(tmp_path: Path) -> None:
    log = tmp_path / "fx.log"
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        seen.append((p, total, message))

    async with (
        brokered(tmp_path, fixture_upstream("fx", log), RULES) as env,
        env.turn(transport="stdio") as t,
    ):
        result = await t.call(
            "fx.progress", {"steps": 3, "path": "/public/x"}, progress_callback=on_progress
        )
        with anyio.move_on_after(1.0):
            await t.call("fx.slow", {"seconds": 30, "path": "/public/x"})
        with anyio.fail_after(10):
            while not any(e["method"] == "cancelled-in-handler" for e in read_log(log)):
                await anyio.sleep(0.05)
        after = await t.call("fx.echo", {"message": "next", "path": "/public/x"})
    assert result.is_error is False and text_of(result) == "3 steps done"
    assert seen == [(1.0, 3.0, "step 1/3"), (2.0, 3.0, "step 2/3"), (3.0, 3.0, "step 3/3")]
    assert after.is_error is False
    # the harness's cancellation reached the upstream's handler and was recorded by the host
    assert [str(r.outcome) for r in env.records()] == ["succeeded", "cancelled", "succeeded"]


async def test_one_pooled_upstream_session_serves_http_and_stdio_turns(tmp_path: Path) -> None:
    """The relay never opens a second copy of an upstream: one process served both turns."""
    log = tmp_path / "fx.log"
    async with brokered(tmp_path, fixture_upstream("fx", log), RULES) as env:
        async with env.turn(transport="stdio") as t:
            over_stdio = await t.call("fx.echo", {"message": "a", "path": "/public/a"})
        async with env.turn() as t:
            over_http = await t.call("fx.echo", {"message": "b", "path": "/public/b"})
    assert structured(over_stdio)["pid"] == structured(over_http)["pid"]
    assert sum(1 for e in read_log(log) if e["method"] == "initialize") <= 1
