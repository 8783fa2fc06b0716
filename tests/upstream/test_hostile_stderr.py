"""A hostile upstream's stderr is bounded like everything else it sends.

The stdio upstream's stderr is read by a relay thread line by line, scrubbed,
kept (the last lines, for reports) and relayed to the host's stderr. An
upstream that writes one enormous line (or never ends one) made the host
buffer all of it — 256 MiB of stderr grew the host to 1.37 GB — scrub it,
keep it and relay it whole: a broken upstream can exhaust the host's memory
through the one channel ``limits`` does not cover.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.upstream.conftest import (
    brokered,
    hostile_rules,
    hostile_upstream,
    text_of,
)

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024

RULES = hostile_rules("echo", "bad", permit="/public/**")


def hostile(mode: str, log: Path) -> str:
    return hostile_upstream("--mode", mode, "--log", str(log), call_s=60)


async def test_an_enormous_stderr_line_is_not_buffered_kept_or_relayed_whole(
    tmp_path: Path,
) -> None:
    async with brokered(tmp_path, hostile("stderr-huge", tmp_path / "log"), RULES) as env:
        async with env.turn(http_timeout=90) as t:
            # 64 MiB of stderr in one line, then an answer
            result = await t.call("fx.bad", {"path": "/public/x", "n": 64})
            after = await t.call("fx.echo", {"path": "/public/x"})
        relayed = env.stderr.getvalue()
    assert text_of(result) == "wrote 64 MiB to stderr"
    assert after.is_error is False
    longest = max((len(line) for line in relayed.splitlines()), default=0)
    # the line is relayed (shortened), never 64 MiB of it
    assert 0 < longest <= MIB, f"a stderr line of {longest} characters was relayed whole"


async def test_terminal_escapes_from_an_upstream_never_reach_the_operators_terminal(
    tmp_path: Path,
) -> None:
    """Its server name, its stderr and its failures are shown with control characters
    escaped (``sharedos.terminal.printable``): nothing it sends can clear, retitle or
    rewrite the operator's screen."""
    async with brokered(tmp_path, hostile("escapes", tmp_path / "log"), RULES) as env:
        async with env.turn() as t:
            report = "\n".join(t.upstreams.report())
            await t.call("fx.echo", {"path": "/public/x"})
        relayed = env.stderr.getvalue()
    assert "hostile stderr" in relayed and "\\x1b[2J" in relayed
    assert "\x1b" not in relayed and "\x07" not in relayed and "\r" not in relayed
    assert "\x1b" not in report and "\x07" not in report
