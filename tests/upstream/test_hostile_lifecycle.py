"""An unconfined upstream's descendants end with its session, however they try to stay.

The upstream (not confined: no roots) forks a child into a session of its own
that ignores SIGTERM and SIGHUP, and itself ignores SIGTERM and outlives its
stdin. SharedOS's supervisor (a child subreaper) is meant to end every
descendant; but the SDK's shutdown SIGKILLs the supervisor's process group
2 s after its SIGTERM, while the supervisor was still in its own 2 s grace
before its SIGKILL step: the supervisor died first, and the child outlived the
session and the host process ("no process of the run outlives it").
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio
import pytest

from tests.timing import bound
from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio

RULES = hostile_rules("echo")


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


async def test_a_daemonized_child_that_ignores_sigterm_ends_with_the_session(
    tmp_path: Path,
) -> None:
    log = tmp_path / "log"
    toml = hostile_upstream("--mode", "immortal", "--log", str(log))
    child_file = Path(str(log) + ".child")
    child = 0
    try:
        async with brokered(tmp_path, toml, RULES) as env, env.turn() as t:
            assert text_of(await t.call("fx.echo", {"path": "/public/x"})) == "echo ok"
            with anyio.fail_after(10):
                while not child_file.exists() or not child_file.read_text():
                    await anyio.sleep(0.05)
            child = int(child_file.read_text())
            assert alive(child)
        # the broker has closed every session
        deadline = time.monotonic() + bound(5.0)
        while alive(child) and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        assert not alive(child), f"the upstream's child {child} outlived its session"
    finally:
        if child and alive(child):
            os.kill(child, signal.SIGKILL)
