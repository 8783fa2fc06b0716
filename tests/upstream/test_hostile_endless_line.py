"""An upstream writing one line that never ends: its call fails at once, and the upstream
is restarted, instead of every later call waiting out its timeout behind that line.

On stdio a line is bounded while it is read (``sharedos.upstream.transport``),
but its request was answered only at the line's end: a line that never ended
held its call until ``call_s``, and every later call on the session behind it,
for as long as the upstream kept writing; the session was never reopened. Now
a line whose head names its request answers that request the moment it passes
the bound, and a line still going past ``ENDLESS_BYTES`` (1 GiB), or for longer
than the call timeout after passing its bound, ends the session, so the next call
reaches a fresh upstream process.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.timing import bound
from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, refusal_payload

pytestmark = pytest.mark.anyio

RULES = hostile_rules("endless", "echo")
OBJ = {"type": "object", "properties": {"path": {"type": "string"}}}


@pytest.mark.parametrize(("mode", "call_s"), [("endless-line", 60.0), ("endless-drip", 3.0)])
async def test_an_endless_line_fails_its_call_at_once_and_the_upstream_is_restarted(
    tmp_path: Path, mode: str, call_s: float
) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(
        json.dumps(
            [{"name": n, "description": n, "inputSchema": OBJ} for n in ("endless", "echo")]
        ),
        encoding="utf-8",
    )
    # endless-line: a call timeout far above the bounds below (waiting it out fails the
    # test); endless-drip: a byte at a time, so only the time after the bound can tell
    toml = hostile_upstream("--tools", str(tools), "--mode", mode, call_s=call_s)
    async with brokered(tmp_path, toml, RULES) as env, env.turn(http_timeout=90) as t:
        t0 = time.monotonic()
        endless = await t.call("fx.endless", {"path": "/public/x"})
        answered_in = time.monotonic() - t0
        assert endless.is_error
        assert refusal_payload(endless)["reason"] == "upstream_error"
        assert answered_in < bound(10.0), answered_in

        # the session behind the line is ended once the line passes ENDLESS_BYTES (or
        # call_s after its bound); a call
        # in flight then fails, and the next one reaches a new upstream process
        failures = 0
        deadline = time.monotonic() + bound(30.0)
        while True:
            echo = await t.call("fx.echo", {"path": "/public/x"})
            if not echo.is_error:
                break
            failures += 1
            assert time.monotonic() < deadline, "the upstream was never reached again"
        assert failures <= 2, failures
