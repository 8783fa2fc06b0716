"""One call's stream ending without its answer fails that call, not the pooled session.

Over streamable HTTP each request is answered on its own POST's stream. When
one such stream ends without the answer (empty, or a JSON answer labelled
``text/event-stream``, which reads as a stream of no event), the SDK fails
that request with JSON-RPC -32000, "SSE stream ended without a response" --
the code it also uses for a closed connection. SharedOS took it for the
session's end and closed the pooled session: every call in flight on it
failed "disconnected", another person's too, though the upstream had answered
it. Only that call fails now; a session whose transport really ended (the
upstream went away) is still ended and reopened.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.upstream.conftest import (
    DATA,
    PY,
    brokered,
    free_port,
    http_process,
    text_of,
    wait_port,
)

pytestmark = pytest.mark.anyio

SERVER = DATA / "hostile_http_server.py"
TOOLS = ("json-as-sse", "empty-sse", "slow")
RULES = (
    "\nnamespace fx\n"
    + "".join(
        f'requirement fx.{t} {{ action read; resource "x" }}  # sos:ignore SOS208: one resource\n'
        for t in TOOLS
    )
    + 'permit read on "x"\ntoolpolicy run { mode open\n managed fx.* }\n'
)


def _toml(port: int) -> str:
    return (
        f'[upstream.fx]\nurl = "http://127.0.0.1:{port}/mcp"\npinning = "off"\n'
        'protocol = "legacy"\ntimeouts = { connect_s = 10, list_s = 10, call_s = 20 }\n'
    )


@pytest.mark.parametrize("bad", ["json-as-sse", "empty-sse"])
async def test_a_stream_ending_without_its_answer_fails_that_call_alone(
    tmp_path: Path, bad: str
) -> None:
    port = free_port()
    got: dict[str, Any] = {}
    with http_process([PY, str(SERVER), str(port), "--mode", "stream-ends"], port):
        async with brokered(tmp_path, _toml(port), RULES) as env:
            bob_calling = anyio.Event()

            async def bob() -> None:
                async with env.turn(env.context("bob"), http_timeout=60) as t:
                    bob_calling.set()
                    got["bob"] = await t.call("fx.slow", {"s": 1})

            async def alice() -> None:
                async with env.turn(env.context("alice"), http_timeout=60) as t:
                    await bob_calling.wait()
                    await anyio.sleep(0.3)  # bob's call is on its way to the upstream
                    got["alice"] = await t.call(f"fx.{bad}", {})
                    got["again"] = await t.call("fx.slow", {})

            async with anyio.create_task_group() as tg:
                tg.start_soon(bob)
                tg.start_soon(alice)
            records = {r.principal: r for r in env.records() if r.tool == f"fx.{bad}"}
    assert got["alice"].is_error is True
    assert "ended without a response" in text_of(got["alice"]), text_of(got["alice"])
    assert str(records["alice"].reason) == "upstream_error"
    # bob's call, answered by the upstream, is relayed: alice's bad stream did not end it
    assert got["bob"].is_error is False and text_of(got["bob"]) == "ok", text_of(got["bob"])
    assert got["again"].is_error is False


async def test_a_session_whose_upstream_went_away_is_still_reopened(tmp_path: Path) -> None:
    port = free_port()
    argv = [PY, str(SERVER), str(port), "--mode", "stream-ends"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        async with brokered(tmp_path, _toml(port), RULES) as env, env.turn() as t:
            first = await t.call("fx.slow", {})
            proc.kill()
            proc.wait()
            gone = await t.call("fx.slow", {})
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_port(port)
            back = await t.call("fx.slow", {})
    finally:
        proc.kill()
        proc.wait()
    assert first.is_error is False
    assert gone.is_error is True and "disconnected during slow" in text_of(gone), text_of(gone)
    assert back.is_error is False, text_of(back)
