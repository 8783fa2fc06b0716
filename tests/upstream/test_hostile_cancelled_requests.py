"""A request SharedOS cancelled is no longer outstanding on its stdio session.

The stdio reader keeps the requests waiting for an answer, to find the one an
oversized answer belongs to: by the ``id`` at its edges, or as the only one
waiting. A request whose call timed out (or the harness cancelled) stayed
there for the session's life, though MCP has the upstream not answer it: one
entry per cancelled call, and after the first, "the only one waiting" never
held again -- an oversized answer whose id is at neither edge ended the pooled
session, every call in flight on it with it, instead of failing its own call.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, read_log, text_of

pytestmark = pytest.mark.anyio


async def test_a_cancelled_request_does_not_stay_outstanding(tmp_path: Path) -> None:
    log = tmp_path / "upstream.log"
    toml = hostile_upstream("--mode", "hidden-id", "--log", str(log), call_s=1)
    toml += "limits = { max_result_bytes = 65536 }\n"
    rules = hostile_rules("bad", "echo")
    async with brokered(tmp_path, toml, rules) as env, env.turn() as t:
        never = await t.call("fx.bad", {"path": "/public/x", "never": True})
        big = await t.call("fx.bad", {"path": "/public/x"})
        echo = await t.call("fx.echo", {"path": "/public/x"})
    assert never.is_error is True and "did not answer bad" in text_of(never)
    cancelled = [e for e in read_log(log) if e.get("method") == "notifications/cancelled"]
    assert len(cancelled) == 1
    # the oversized answer is its own call's failure; the session goes on
    assert big.is_error is True
    assert "SharedOS stopped reading it" in text_of(big), text_of(big)
    assert echo.is_error is False and text_of(echo) == "echo ok"
    starts = [e for e in read_log(log) if e.get("method") == "initialize"]
    assert len(starts) == 1, "the session was not ended and opened again"
