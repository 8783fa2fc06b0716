"""A call SharedOS gave up on leaves nothing running against a streamable-HTTP upstream.

On a handshake-era (2025-11-25) session the SDK client cancels a request by
POSTing ``notifications/cancelled`` and nothing else: the request's own POST
stream stayed open, read by a task of the session, for as long as the upstream
kept it open. So an upstream that answers ``tools/call`` with an SSE stream of
keep-alives and never the answer kept one HTTP connection per timed-out call
forever (the pool holds 100: after that every call of every turn on the session
waited for one), though the call was recorded ``upstream_timeout`` with "the
upstream request was cancelled". The request's POST now ends with it.

The same SDK client resumed a request's stream without limit (last test).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from sharedos.compat import mcp_sdk
from tests.timing import bound
from tests.upstream.conftest import DATA, PY, brokered, free_port, http_process, text_of

pytestmark = pytest.mark.anyio

SERVER = DATA / "hostile_http_server.py"
RULES = (
    '\nnamespace fx\nrequirement fx.bad { action read; resource "x" }\n'
    'permit read on "x"\ntoolpolicy run { mode open\n managed fx.* }\n'
)


def _toml(port: int, call_s: float = 1) -> str:
    return (
        f'[upstream.fx]\nurl = "http://127.0.0.1:{port}/mcp"\npinning = "off"\n'
        f'protocol = "legacy"\ntimeouts = {{ connect_s = 10, list_s = 10, call_s = {call_s:g} }}\n'
    )


def _lines(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


async def test_a_timed_out_call_does_not_keep_its_stream_open(tmp_path: Path) -> None:
    log = tmp_path / "streams.log"
    port = free_port()
    argv = [PY, str(SERVER), str(port), "--mode", "hold-stream", "--log", str(log)]
    with http_process(argv, port):
        async with brokered(tmp_path, _toml(port), RULES) as env, env.turn(http_timeout=30) as t:
            results = [await t.call("fx.bad", {}) for _ in range(3)]
            with anyio.move_on_after(bound(5)):
                while _lines(log).count("closed") < 3:
                    await anyio.sleep(0.05)
            lines = _lines(log)
    for result in results:
        assert result.is_error is True and "did not answer bad" in text_of(result)
    assert lines.count("open") == 3
    assert lines.count("closed") == 3, "each timed-out call's stream is closed with it"


async def test_a_stream_resumed_without_end_fails_the_call(tmp_path: Path) -> None:
    """The SDK resumed a request's stream (``Last-Event-ID``) each time the upstream ended
    it after an event with an id, with ``retry: 0``: a hundred GETs a second, by recursion,
    until the call's timeout -- or, past the recursion limit (~7 s of it), forever, the
    loop swallowing its own cancellation and outliving the session. Past ``MAX_RESUMES``
    resumptions the call now fails, ``upstream_error``, and nothing resumes it again."""
    log = tmp_path / "resumes.log"
    port = free_port()
    argv = [PY, str(SERVER), str(port), "--mode", "resume-loop", "--log", str(log)]
    with http_process(argv, port):
        async with brokered(tmp_path, _toml(port, call_s=3), RULES) as env:
            async with env.turn(http_timeout=30) as t:
                result = await t.call("fx.bad", {})
                settled = False
                with anyio.move_on_after(bound(10)):
                    while not settled:
                        before = len(_lines(log))
                        await anyio.sleep(0.5)
                        settled = len(_lines(log)) == before
            records = env.records(t.context.turn_id)
    assert result.is_error is True
    assert f"ended the answer's stream {mcp_sdk.MAX_RESUMES} times" in text_of(result)
    assert [str(r.reason) for r in records] == ["upstream_error"]
    assert settled, "the SDK still resumes the stream of a call that failed"
    # the POST, then one GET per resumption
    assert len(_lines(log)) == 1 + mcp_sdk.MAX_RESUMES
