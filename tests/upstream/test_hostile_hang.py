"""An upstream stuck as a whole is ended and opened again, not kept for every call to wait on.

A call that times out is cancelled; the session then has to answer a ping. A
server whose loop is blocked (a deadlock, a busy loop) answers neither: before,
its pooled session was kept for its whole life and every later call of every
turn waited out its own timeout. A server that merely never answers one call
still answers the ping and keeps its session (test_hostile_cancelled_requests).
"""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import pytest

from sharedos.upstream.connection import PING_S, fitted_waits
from tests.timing import bound
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


async def test_a_handler_timeout_shorter_than_call_and_ping_still_ends_the_hung_session(
    tmp_path: Path,
) -> None:
    """The host's handler timeout comes before call_s plus the ping (``sharedos run`` gives
    call_s + 5 s; a host's default of 30 s is shorter than the default call_s of 60 s): the
    kernel cancelled the forward first, the ping never concluded, and the hung session was
    kept for every later call of every turn. The forward fits its wait and its ping within
    the handler's deadline."""
    log = tmp_path / "upstream.log"
    toml = hostile_upstream("--mode", "hang", "--log", str(log), call_s=0.6)
    async with (
        brokered(tmp_path, toml, hostile_rules("bad", "echo"), handler_timeout_s=1.1) as env,
        env.turn() as t,
    ):
        hung = await t.call("fx.bad", {"path": "/public/x"})
        # the next call starts a new process: not what this test times
        env.host.handler_timeout_s = 30.0
        echo = await t.call("fx.echo", {"path": "/public/x"})
        rows = [r for r in env.store.query() if r.tool == "fx.bad"]
    assert hung.is_error is True
    assert "did not answer a ping" in text_of(hung), text_of(hung)
    assert [r.reason for r in rows] == ["upstream_timeout"], rows
    assert echo.is_error is False and text_of(echo) == "echo ok", text_of(echo)
    starts = [e for e in read_log(log) if e.get("method") == "initialize"]
    assert len(starts) == 2, "the hung session was kept"


def test_the_waits_fit_within_the_handler_deadline() -> None:
    assert fitted_waits(60.0, math.inf) == (60.0, PING_S)
    assert fitted_waits(1.0, 130.0, now=100.0) == (1.0, 1.0)  # room enough: unchanged
    # sharedos run before: call_s + 5 s; the default host: 30 s against call_s 60 s
    for call_s, budget in ((60.0, 65.0), (60.0, 30.0), (0.6, 1.1), (5.0, 0.2), (5.0, -1.0)):
        call, ping = fitted_waits(call_s, 100.0 + budget, now=100.0)
        assert 0 <= call <= call_s and 0 <= ping <= PING_S
        # a window too short to prove a session hung asks no ping at all
        assert ping == 0.0 or ping >= 0.2, (call_s, budget, ping)
        assert call + ping <= max(budget - min(0.5, budget * 0.1), 0.0) + 1e-9, (call_s, budget)


async def test_the_call_after_a_hung_session_is_served_within_the_handler_deadline(
    tmp_path: Path,
) -> None:
    """Ending a hung stdio upstream takes the SDK seconds (its stdin closed, 2 s to exit,
    then the process tree terminated): the next call re-opening the session waited for all
    of it, past a handler deadline that fitted the hung call and its ping, and the kernel
    recorded it ``timeout``. The hung session is now ended beside the calls, and its process
    is still killed."""
    log = tmp_path / "upstream.log"
    toml = hostile_upstream("--mode", "hang", "--log", str(log), call_s=0.5)
    async with (
        brokered(tmp_path, toml, hostile_rules("bad", "echo"), handler_timeout_s=2.0) as env,
        env.turn() as t,
    ):
        hung = await t.call("fx.bad", {"path": "/public/x"})
        echo = await t.call("fx.echo", {"path": "/public/x"})
        rows = [r.reason for r in env.store.query() if r.tool.startswith("fx.")]
        [pid] = [e["hung"] for e in read_log(log) if "hung" in e]
        with anyio.fail_after(bound(10)):
            while _alive(pid):
                await anyio.sleep(0.05)
    assert "did not answer a ping" in text_of(hung), text_of(hung)
    assert rows == ["upstream_timeout", None], rows
    assert echo.is_error is False and text_of(echo) == "echo ok", text_of(echo)


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
