"""A call on a session whose re-listing (after ``tools/list_changed``) is in flight.

The first call after an announced change lists the session again, and the announcement
was marked seen as that listing began. A second call arriving while it was in flight found
no change announced, did not wait, and was checked against the listing from before the
change: it went to the upstream with a tool definition the turn never published (while
the first call, checked against the new listing, was refused).
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.timing import bound
from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, read_log, text_of

pytestmark = pytest.mark.anyio

OBJ = {"type": "object", "properties": {"path": {"type": "string"}}}


def tools(echo_description: str) -> str:
    return json.dumps(
        [
            {"name": "echo", "description": echo_description, "inputSchema": OBJ},
            {"name": "bad", "description": "announces a change", "inputSchema": OBJ},
        ]
    )


async def test_a_call_arriving_while_the_relisting_runs_waits_for_it(tmp_path: Path) -> None:
    log, tools_file = tmp_path / "upstream.log", tmp_path / "tools.json"
    tools_file.write_text(tools("echo tool"), encoding="utf-8")
    toml = hostile_upstream("--mode", "announce", "--tools", str(tools_file), "--log", str(log))
    async with brokered(tmp_path, toml, hostile_rules("echo", "bad")) as env, env.turn() as t:
        [slot] = env.broker.pool
        tools_file.write_text(tools("echo, changed in place"), encoding="utf-8")
        assert text_of(await t.call("fx.bad", {"path": "/public/x"})) == "announced"
        with anyio.fail_after(bound(5)):
            while not slot.list_changed:
                await anyio.sleep(0.01)
        listed = sum(1 for e in read_log(log) if e.get("method") == "tools/list")
        texts: list[str] = []

        async def echo() -> None:
            texts.append(text_of(await t.call("fx.echo", {"path": "/public/x"})))

        async with anyio.create_task_group() as tg:
            tg.start_soon(echo)  # lists the session again (0.3 s)
            with anyio.fail_after(bound(5)):
                while sum(1 for e in read_log(log) if e.get("method") == "tools/list") == listed:
                    await anyio.sleep(0.01)
            tg.start_soon(echo)  # while that listing runs
        rows = [r.reason for r in env.store.query() if r.tool == "fx.echo"]
        forwarded = [
            e
            for e in read_log(log)
            if e.get("method") == "tools/call" and e["params"]["name"] == "echo"
        ]
    assert forwarded == [], "a call went to the upstream with a definition the turn never saw"
    assert rows == ["upstream_unavailable"] * 2, (rows, texts)
