"""An upstream announcing ``tools/list_changed`` every few milliseconds while calls run.

A call on a session that announced a change lists it again first (the call is checked
against what the upstream lists now). Calls waiting together for that listing share one
that began after they asked, as turns opening together do: before, each took the list
lock in turn, found a newer announcement and listed again, so the storm made the tenth
concurrent call wait out ten listings one after another (and the upstream answer ten).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, read_log, text_of

pytestmark = pytest.mark.anyio

CALLS = 8


async def test_concurrent_calls_during_a_list_changed_storm_share_one_listing(
    tmp_path: Path,
) -> None:
    log = tmp_path / "upstream.log"
    toml = hostile_upstream("--mode", "list-storm", "--log", str(log))
    async with brokered(tmp_path, toml, hostile_rules("echo", "bad")) as env, env.turn() as t:
        before = sum(1 for e in read_log(log) if e.get("method") == "tools/list")
        texts: list[str] = []

        async def one() -> None:
            result = await t.call("fx.echo", {"path": "/public/x"})
            texts.append(text_of(result))

        async with anyio.create_task_group() as tg:
            for _ in range(CALLS):
                tg.start_soon(one)
        listed = sum(1 for e in read_log(log) if e.get("method") == "tools/list") - before
        rows = [r for r in env.store.query() if r.tool == "fx.echo"]
    assert texts == ["echo ok"] * CALLS, texts
    assert len(rows) == CALLS and {r.reason for r in rows} == {None}, rows
    # each call still sees a listing begun after it asked, shared by the calls waiting
    # for it (two, or three on a busy machine; one each before)
    assert 1 <= listed <= CALLS // 2 - 1, f"{listed} listings for {CALLS} concurrent calls"
