"""A streamable-HTTP upstream that lost its session (it restarted) gets a new one.

A handshake-era HTTP upstream keeps its sessions in memory. Restarted (an upgrade,
a crash, a redeploy), it answers every request of the old session with 404
"Session not found" -- MCP's signal that the client must start a new session. The
pooled session still counted as usable: every later turn reported the upstream
unavailable ("failed to list its tools: Session not found") and left its tools
out, and every call of a turn already open failed, until SharedOS itself was
restarted (or, with no turn at all for ``sessions.idle_s``, the sweeper closed it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.upstream.conftest import (
    FIXTURE,
    FIXTURE_RULES,
    PY,
    RUN_POLICY,
    brokered,
    free_port,
    http_process,
    structured,
    text_of,
)

pytestmark = pytest.mark.anyio

ECHO = {"message": "m", "path": "/public/x"}


async def test_an_http_upstream_that_restarted_gets_a_new_session(tmp_path: Path) -> None:
    port = free_port()
    toml = (
        f'[upstream.fx]\nurl = "http://127.0.0.1:{port}/mcp"\npinning = "off"\n'
        'protocol = "legacy"\n'
    )
    argv = [PY, str(FIXTURE), "--http", str(port)]
    async with brokered(tmp_path, toml, FIXTURE_RULES + RUN_POLICY) as env:
        first = http_process(argv, port)
        first.__enter__()
        try:
            async with env.turn() as t:
                before = await t.call("fx.echo", ECHO)
            async with env.turn() as open_turn:
                first.__exit__(None, None, None)
                first = None
                # the upstream restarts while this turn is open
                with http_process(argv, port):
                    async with env.turn() as t:
                        names = await t.names()
                        fresh = await t.call("fx.echo", ECHO)
                    again = await open_turn.call("fx.echo", ECHO)
        finally:
            if first is not None:
                first.__exit__(None, None, None)
    assert before.is_error is False
    assert "fx.echo" in names, "the restarted upstream's tools were left out"
    assert fresh.is_error is False and text_of(fresh) == "m"
    # the turn that was open goes on through the new session
    assert again.is_error is False
    assert structured(before)["pid"] != structured(fresh)["pid"]


async def test_a_turn_whose_upstream_restarted_mid_turn_goes_on_after_one_failed_call(
    tmp_path: Path,
) -> None:
    """The call that meets the lost session fails (the upstream never ran it); the
    turn's next call goes through a new session, as after a stdio upstream's crash."""
    port = free_port()
    toml = (
        f'[upstream.fx]\nurl = "http://127.0.0.1:{port}/mcp"\npinning = "off"\n'
        'protocol = "legacy"\n'
    )
    argv = [PY, str(FIXTURE), "--http", str(port)]
    async with brokered(tmp_path, toml, FIXTURE_RULES + RUN_POLICY) as env:
        first = http_process(argv, port)
        first.__enter__()
        try:
            async with env.turn() as t:
                before = await t.call("fx.echo", ECHO)
                first.__exit__(None, None, None)
                first = None
                with http_process(argv, port):  # restarted: it knows no session
                    lost = await t.call("fx.echo", ECHO)
                    after = await t.call("fx.echo", ECHO)
                    later = await t.call("fx.echo", ECHO)
                turn_id = t.context.turn_id
        finally:
            if first is not None:
                first.__exit__(None, None, None)
    assert before.is_error is False
    assert lost.is_error is True and structured(lost)["reason"] == "upstream_error"
    assert after.is_error is False and later.is_error is False
    reasons = [str(r.reason) for r in env.records(turn_id)]
    assert reasons == ["None", "upstream_error", "None", "None"]
