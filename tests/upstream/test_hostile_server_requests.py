"""Requests an upstream sends SharedOS are refused or answered, and bounded in flight.

SharedOS offers an upstream nothing but ``ping``: sampling, elicitation and
roots are refused (nothing reaches the harness, and no path of the host is
told). The SDK's session runs each request an upstream sends in a task of its
own until its answer is written: an upstream that sent 100,000 ``ping``s (5 MB
of stdout) without reading the answers had 100,000 tasks waiting in the host
(RSS 105 -> 736 MiB), and the event loop so busy that the call, answered right
after the pings, timed out. Requests past ``MAX_SERVER_REQUESTS`` unanswered
are now dropped unanswered.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio


async def test_sampling_elicitation_and_roots_are_refused_and_ping_answered(
    tmp_path: Path,
) -> None:
    toml = hostile_upstream("--mode", "server-requests", call_s=10)
    async with brokered(tmp_path, toml, hostile_rules("bad")) as env, env.turn() as t:
        result = await t.call("fx.bad", {"path": "/public/x"})
    got = json.loads(text_of(result))
    assert got["s1"]["message"] == "Sampling not supported"
    assert got["s2"]["message"] == "Elicitation not supported"
    assert got["s3"]["message"] == "List roots not supported"  # no path of the host
    assert got["s4"] == {}


async def test_a_flood_of_requests_never_read_back_is_bounded_in_the_host(tmp_path: Path) -> None:
    toml = hostile_upstream("--mode", "ask-flood", call_s=20)
    rules = hostile_rules("bad", "echo")
    async with brokered(tmp_path, toml, rules) as env, env.turn(http_timeout=30) as t:
        flood = await t.call("fx.bad", {"path": "/public/x", "n": 8_000, "hold": 1})
        # the SDK's tasks for the upstream's requests still waiting to write their answer
        waiting = len(asyncio.all_tasks())
        echo = await t.call("fx.echo", {"path": "/public/x"})
    assert flood.is_error is False and text_of(flood) == "asked 8000"
    assert waiting < 200, waiting  # MAX_SERVER_REQUESTS (32) and the host's own
    assert echo.is_error is False and text_of(echo) == "echo ok"
