"""An upstream stuck as a whole is ended and opened again, not kept for every call to wait on.

A call that times out is cancelled; the session then has to answer a ping. A
server whose loop is blocked (a deadlock, a busy loop) answers neither: before,
its pooled session was kept for its whole life and every later call of every
turn waited out its own timeout. A server that merely never answers one call
still answers the ping and keeps its session (test_hostile_cancelled_requests).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, read_log, text_of

pytestmark = pytest.mark.anyio


async def test_an_upstream_hung_as_a_whole_is_opened_again_before_the_next_call(
    tmp_path: Path,
) -> None:
    log = tmp_path / "upstream.log"
    toml = hostile_upstream("--mode", "hang", "--log", str(log), call_s=1)
    async with brokered(tmp_path, toml, hostile_rules("bad", "echo")) as env, env.turn() as t:
        hung = await t.call("fx.bad", {"path": "/public/x"})
        echo = await t.call("fx.echo", {"path": "/public/x"})
    assert hung.is_error is True
    assert "did not answer a ping within 1 s either" in text_of(hung), text_of(hung)
    assert echo.is_error is False and text_of(echo) == "echo ok", text_of(echo)
    starts = [e for e in read_log(log) if e.get("method") == "initialize"]
    assert len(starts) == 2, "the hung session was kept"
