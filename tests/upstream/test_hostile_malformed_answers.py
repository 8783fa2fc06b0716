"""An answer that names its request but is no valid JSON-RPC answer fails that call at once.

An upstream answered tools/call with ``"result": 42``, with ``"error": "a
string"``, or with text holding a lone surrogate (``"\\ud800"``, valid JSON the
SDK's parser refuses). The line was dropped as unparseable, so the call waited
out its whole ``call_s`` (60 s by default) and was recorded ``upstream_timeout``
with "did not answer within N s" — though the upstream had answered, wrongly,
at once. The answer's ``id`` is readable: the call fails ``upstream_error`` now.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio

RULES = hostile_rules("echo", "bad")


@pytest.mark.parametrize("mode", ["result-scalar", "error-wrong-shape", "surrogate"])
async def test_a_malformed_answer_fails_the_call_at_once(tmp_path: Path, mode: str) -> None:
    toml = hostile_upstream("--mode", mode, call_s=10)
    async with brokered(tmp_path, toml, RULES) as env, env.turn(http_timeout=30) as t:
        bad = await t.call("fx.bad", {"path": "/public/x"})
        after = await t.call("fx.echo", {"path": "/public/x"})
        turn_id = t.context.turn_id
    assert bad.is_error is True
    assert "not a valid JSON-RPC answer" in text_of(bad)
    assert [str(r.reason) for r in env.records(turn_id)] == ["upstream_error", "None"]
    assert after.is_error is False


async def test_an_upstream_that_closes_its_stdout_is_seen_as_gone(tmp_path: Path) -> None:
    """It closes its stdout and stays alive: the supervisor it runs under no longer holds
    that pipe, so the host reads an end of file, fails the call at once (not after
    ``call_s``) and opens a new session for the next call."""
    toml = hostile_upstream("--mode", "close-stdout", call_s=60)
    async with brokered(tmp_path, toml, RULES) as env, env.turn(http_timeout=90) as t:
        first = await t.call("fx.bad", {"path": "/public/x"})
        second = await t.call("fx.bad", {"path": "/public/x"})
        turn_id = t.context.turn_id
    assert first.is_error is True and second.is_error is True
    # each was the end of a session, not a wait for an answer that cannot come
    assert [str(r.reason) for r in env.records(turn_id)] == ["upstream_error", "upstream_error"]
