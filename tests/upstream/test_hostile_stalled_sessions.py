"""Turns opening together share an upstream's failure as they share its listing.

An upstream that never finishes its handshake (or never answers ``tools/list``)
was tried once per waiting turn, one after another, under the pooled session's
lock: each waiter took the lock only once the attempt before it had run out its
timeout, then made its own. Four turns opening at once against an upstream
that hung on ``initialize`` with ``connect_s = 1`` finished after 1, 2, 3 and
4 s (with the default ``connect_s = 15``, the tenth turn of a busy host waited
150 s before the harness even started), and a broken session's reconnect held
every concurrent call of every turn the same way. A turn that waited for an
attempt now takes that attempt's outcome, success or failure: the upstream is
tried once, the upstream's own log shows it.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from sharedos.upstream.broker import TurnUpstreams
from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream

pytestmark = pytest.mark.anyio

RULES = hostile_rules("echo", "bad")
TURNS = 4


@pytest.mark.parametrize(
    ("mode", "method", "said"),
    [
        ("hang-init", "initialize", "did not complete the MCP handshake within 2 s"),
        ("hang-list", "tools/list", "did not list its tools within 2 s"),
    ],
)
async def test_turns_waiting_for_a_stalled_upstream_share_its_one_failure(
    tmp_path: Path, mode: str, method: str, said: str
) -> None:
    log = tmp_path / "log"
    toml = hostile_upstream("--mode", mode, "--log", str(log))
    toml += "timeouts = { connect_s = 2, list_s = 2 }\n"
    async with brokered(tmp_path, toml, RULES) as env:
        states: list[TurnUpstreams] = []

        async def one(i: int) -> None:
            states.append(await env.broker.prepare(env.context(f"user{i}")))

        async with anyio.create_task_group() as tg:
            for i in range(TURNS):
                tg.start_soon(one, i)
    asked = [json.loads(x)["method"] for x in log.read_text().splitlines()]
    # the upstream was tried once, not once per waiting turn
    assert asked.count(method) == 1, asked
    assert len(states) == TURNS
    for state in states:
        assert not state.tools
        assert said in "\n".join(state.report())
