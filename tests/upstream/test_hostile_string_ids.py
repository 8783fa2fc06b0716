"""An answer naming its request's id as a string is screened like any other.

JSON-RPC peers built on the SDKs take ``"id": "7"`` for request 7 (the
session coerces it). SharedOS's stdio reader looked the id up as it was
written, found no request, and let the answer through unscreened: the
session delivered it to the call all the same, so a result of 20,000 content
blocks (over ``MAX_CONTENT_BLOCKS``) was validated on the event loop and
relayed whole, and a malformed answer was left to wait out ``call_s``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio


async def test_an_answer_with_a_string_id_still_has_its_blocks_counted(tmp_path: Path) -> None:
    toml = hostile_upstream("--mode", "many-blocks", "--string-ids", call_s=20)
    async with brokered(tmp_path, toml, hostile_rules("bad", "echo")) as env, env.turn() as t:
        many = await t.call("fx.bad", {"path": "/public/x", "n": 20_000})
        echo = await t.call("fx.echo", {"path": "/public/x"})
    assert many.is_error is True
    assert "content blocks" in text_of(many), text_of(many)
    assert echo.is_error is False and text_of(echo) == "echo ok"


async def test_a_malformed_answer_with_a_string_id_fails_at_once(tmp_path: Path) -> None:
    toml = hostile_upstream("--mode", "result-scalar", "--string-ids", call_s=20)
    async with (
        brokered(tmp_path, toml, hostile_rules("bad")) as env,
        env.turn(http_timeout=30) as t,
    ):
        result = await t.call("fx.bad", {"path": "/public/x"})
        records = env.records(t.context.turn_id)
    assert result.is_error is True
    assert "not a valid JSON-RPC answer" in text_of(result), text_of(result)
    assert [str(r.reason) for r in records] == ["upstream_error"]  # not upstream_timeout
