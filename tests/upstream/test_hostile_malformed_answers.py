"""An answer that names its request but is no valid JSON-RPC answer fails that call at once.

An upstream answered tools/call with ``"result": 42``, with ``"error": "a
string"``, or with text holding a lone surrogate (``"\\ud800"``, valid JSON the
SDK's parser refuses). The line was dropped as unparseable, so the call waited
out its whole ``call_s`` (60 s by default) and was recorded ``upstream_timeout``
with "did not answer within N s" — though the upstream had answered, wrongly,
at once. The answer's ``id`` is readable: the call fails ``upstream_error`` now.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sharedos.jsonrpc_id import message_id
from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio

RULES = hostile_rules("echo", "bad")


@pytest.mark.parametrize("mode", ["result-scalar", "error-wrong-shape", "surrogate", "deep"])
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


async def test_an_answer_nested_too_deep_to_parse_does_not_end_the_session(
    tmp_path: Path,
) -> None:
    """A result nested 100,000 arrays deep is valid JSON that every parser here refuses:
    the SDK's (a ValueError, handled) and Python's ``json``, which raised RecursionError
    out of the stdio reader. The session ended -- every call in flight on the pooled
    session with it ("disconnected"), and the upstream was started again -- for one
    answer. The answer's id is read from its edges: that call alone fails, at once."""
    log = tmp_path / "log"
    toml = hostile_upstream("--mode", "deep", "--log", str(log), call_s=10)
    async with brokered(tmp_path, toml, RULES) as env, env.turn(http_timeout=30) as t:
        bad = await t.call("fx.bad", {"path": "/public/x", "n": 100_000})
        after = await t.call("fx.echo", {"path": "/public/x"})
    assert bad.is_error is True and "not a valid JSON-RPC answer" in text_of(bad)
    assert "disconnected" not in text_of(bad)
    assert after.is_error is False
    methods = [json.loads(line).get("method") for line in log.read_text().splitlines()]
    assert methods.count("initialize") == 1  # the same session served the next call


def test_an_id_is_read_from_edges_nested_too_deep_to_parse() -> None:
    """The edges of an oversized message (an upstream's answer, a harness's request at the
    bridge) may nest deeper than Python's parser recurses; reading the id from them raised
    RecursionError out of the reader instead of answering None."""
    deep = b"[" * 3000
    assert message_id(b'{"a":' + deep + b'1,"id":5', b"") is None
    assert message_id(b"", deep + b'1,"id":' + deep + b"7" + b"]" * 3000 + b"}") is None
    assert message_id(b'{"jsonrpc":"2.0","id":9,"result":' + deep, b"") == 9
