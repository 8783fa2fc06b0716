"""100 turns open at once, different contexts, each calling: nothing crosses turns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from sharedos.bridge import open_turn
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, build_runtime, http_client

pytestmark = pytest.mark.anyio

TURNS = 100


async def test_hundred_concurrent_turns_stay_separate(tmp_path: Path) -> None:
    principals = tuple(f"user{i:03d}" for i in range(TURNS))
    rt = build_runtime(tmp_path, principals=principals, with_slow=False)
    results: dict[str, dict[str, Any]] = {}
    ports: set[int] = set()
    tokens: set[str] = set()
    limiter = anyio.CapacityLimiter(25)  # client side only: all 100 bridges are open at once

    async def one(i: int, all_open: anyio.Event, opened: list[int]) -> None:
        me, neighbour = principals[i], principals[(i + 1) % TURNS]
        ctx = AccessContext(principal=me, turn_id=f"turn-{me}")
        async with open_turn(rt.host, ctx, OPEN_POLICY) as turn:
            assert turn.url is not None and turn.token is not None and turn.port is not None
            ports.add(turn.port)
            tokens.add(turn.token)
            opened.append(i)
            if len(opened) == TURNS:
                all_open.set()
            await all_open.wait()
            async with (
                limiter,
                http_client(turn.url, turn.token, mode="auto" if i % 2 else "legacy") as client,
            ):
                own = await client.call_tool("files.read", {"path": f"/home/{me}/notes.txt"})
                other = await client.call_tool(
                    "files.read", {"path": f"/home/{neighbour}/notes.txt"}
                )
                listed = sorted(t.name for t in (await client.list_tools()).tools)
            results[me] = {"own": own, "other": other, "listed": listed, "hash": turn.catalog_hash}

    all_open = anyio.Event()
    opened: list[int] = []
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for i in range(TURNS):
                tg.start_soon(one, i, all_open, opened)

    assert len(ports) == TURNS and len(tokens) == TURNS
    for me in principals:
        r = results[me]
        assert not r["own"].is_error, me
        assert f"notes of {me}" in str(r["own"].content)  # its own data, nobody else's
        assert r["other"].is_error and (r["other"].structured_content or {})["outcome"] == "denied"
        records = rt.evidence.query(turn_id=f"turn-{me}")
        assert [str(x.outcome) for x in records] == ["succeeded", "denied"]
        assert {x.principal for x in records} == {me}
        assert records[0].resource == f"/home/{me}/notes.txt"
    assert rt.evidence.counts().total == 2 * TURNS
