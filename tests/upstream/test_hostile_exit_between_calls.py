"""An upstream that exits between calls is started again for the next call.

A stdio upstream that answered and then exited (it crashed while idle, or
serves one call a process) left its pooled session looking usable: the next
call -- another turn's, another person's -- was sent to a session whose
transport had ended, and failed "disconnected during ..." though nothing of
it reached any upstream. The session is now known gone when its transport
ends, and the next call opens a new one.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.timing import bound
from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio


async def test_each_call_after_the_upstream_exited_is_served_by_a_new_process(
    tmp_path: Path,
) -> None:
    toml = hostile_upstream("--mode", "exit-after", call_s=10)
    results = []
    async with brokered(tmp_path, toml, hostile_rules("bad")) as env, env.turn() as t:
        for _ in range(3):
            results.append(await t.call("fx.bad", {"path": "/public/x"}))
            # the process has exited: wait until the host has read its end (EOF)
            with anyio.move_on_after(bound(5)):
                while any(s.connection and s.connection.usable for s in env.broker.pool):
                    await anyio.sleep(0.02)
        records = env.records(t.context.turn_id)
    texts = [text_of(r) for r in results]
    assert [r.is_error for r in results] == [False] * 3, texts
    assert len({text for text in texts}) == 3  # three processes, one call each
    assert [r.outcome for r in records] == ["succeeded"] * 3
