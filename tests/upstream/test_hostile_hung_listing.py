"""An upstream that hangs as a whole while it is listed again after ``tools/list_changed``.

A call that times out is followed by a ping, and a session that answers neither is ended
and opened again. A listing that timed out was not: the re-listing a call makes after a
change was announced timed out, the session was kept (the change still unseen), and every
later call of every turn listed it again and waited out ``list_s`` once more, for the
pooled session's life.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.upstream.conftest import HOSTILE, PY, brokered, hostile_rules, read_log, text_of

pytestmark = pytest.mark.anyio


async def test_a_session_hung_in_a_relisting_is_opened_again_for_the_next_call(
    tmp_path: Path,
) -> None:
    log = tmp_path / "upstream.log"
    toml = (
        f"[upstream.fx]\ncommand = {json.dumps(PY)}\n"
        f"args = {json.dumps([str(HOSTILE), '--mode', 'hang-relist', '--log', str(log)])}\n"
        'pinning = "off"\ntimeouts = { list_s = 0.5 }\n'
    )
    async with brokered(tmp_path, toml, hostile_rules("echo", "bad")) as env, env.turn() as t:
        assert text_of(await t.call("fx.bad", {"path": "/public/x"})) == "announced"
        hung = await t.call("fx.echo", {"path": "/public/x"})  # its re-listing hangs
        echo = await t.call("fx.echo", {"path": "/public/x"})
        rows = [r.reason for r in env.store.query() if r.tool == "fx.echo"]
    assert hung.is_error is True and "did not list its tools" in text_of(hung), text_of(hung)
    assert "did not answer a ping" in text_of(hung), text_of(hung)
    assert echo.is_error is False and text_of(echo) == "echo ok", text_of(echo)
    assert rows == ["upstream_timeout", None], rows
    starts = [e for e in read_log(log) if e.get("method") == "initialize"]
    assert len(starts) == 2, "the hung session was kept"
