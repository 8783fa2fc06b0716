"""An upstream that stops reading its stdin: giving up on its calls never waits on the pipe.

A stdio upstream stuck in one call reads nothing more; the next call's arguments fill
the pipe, and the writer to its stdin waits. The SDK sends the courtesy cancel of each
call given up on shielded, for up to 5 s, behind that write; so did the cancel of the
ping meant to find the session hung. A call with ``call_s = 0.5`` was answered after
more than 5 s, past the host's handler timeout the forward's waits are fitted in: the
kernel cancelled the forward first (recorded ``timeout``), and the hung session was kept
for every later call. A cancel the writer cannot take at once is now put aside and
written after the message being written.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.timing import bound
from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, read_log, text_of

pytestmark = pytest.mark.anyio


async def test_calls_to_an_upstream_whose_stdin_is_full_end_within_the_handler_deadline(
    tmp_path: Path,
) -> None:
    log = tmp_path / "upstream.log"
    toml = hostile_upstream("--mode", "hang", "--log", str(log), call_s=0.5)
    texts: dict[str, str] = {}
    async with (
        brokered(tmp_path, toml, hostile_rules("bad", "echo"), handler_timeout_s=3.0) as env,
        env.turn(http_timeout=30) as t,
    ):

        async def call(tool: str, args: dict[str, str]) -> None:
            texts[tool] = text_of(await t.call(tool, {"path": "/public/x", **args}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "fx.bad", {})
            # the upstream is stuck in bad (it reads nothing more): echo's arguments fill
            # the pipe to its stdin
            with anyio.fail_after(bound(10)):
                while not any("hung" in e for e in read_log(log)):
                    await anyio.sleep(0.02)
            tg.start_soon(call, "fx.echo", {"pad": "x" * (256 << 10)})
        rows = {r.tool: r.reason for r in env.store.query() if r.tool.startswith("fx.")}
        usable = [s.connection.usable for s in env.broker.pool if s.connection is not None]
    # the forward's own timeouts answered, not the kernel's cancelling it
    assert rows == {"fx.bad": "upstream_timeout", "fx.echo": "upstream_timeout"}, (rows, texts)
    assert "did not answer a ping" in texts["fx.bad"], texts
    assert usable == [False], "the hung session was kept"
