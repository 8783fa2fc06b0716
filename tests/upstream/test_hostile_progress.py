"""An upstream flooding a call with progress notifications: the harness gets a bounded trickle.

Every progress notification an upstream sent was relayed to the harness's client,
one write each: 20,000 of them in a second meant 20,000 notifications on the
harness's stream, each with whatever message text the upstream chose. Progress is
informational, so past the first ``PROGRESS_BURST`` SharedOS relays at most one per
``PROGRESS_INTERVAL_S`` (and any that reaches its total), and it cuts each message to
``PROGRESS_MESSAGE_CHARS``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sharedos.upstream.connection import (
    PROGRESS_BURST,
    PROGRESS_INTERVAL_S,
    PROGRESS_MESSAGE_CHARS,
)
from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio

RULES = hostile_rules("echo", "bad")


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_progress_flood_reaches_the_harness_as_a_bounded_trickle(
    tmp_path: Path, transport: str
) -> None:
    n = 3000
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    toml = hostile_upstream("--mode", "flood")
    async with brokered(tmp_path, toml, RULES) as env, env.turn(transport=transport) as t:
        started = time.monotonic()
        result = await t.call(
            "fx.bad",
            {"path": "/public/x", "n": n, "message_chars": 4 * PROGRESS_MESSAGE_CHARS},
            progress_callback=on_progress,
        )
        took = time.monotonic() - started
    assert text_of(result) == f"flooded {n}"
    # the first ones are relayed as they come; then no more than one per interval of the call
    assert [p for p, _ in seen[:PROGRESS_BURST]] == list(range(PROGRESS_BURST))
    bound = PROGRESS_BURST + took / PROGRESS_INTERVAL_S + 1
    assert len(seen) <= bound, f"{len(seen)} of {n} progress notifications relayed in {took:.1f} s"
    assert [p for p, _ in seen] == sorted(p for p, _ in seen)
    for _, message in seen:
        assert message is not None
        assert len(message) == PROGRESS_MESSAGE_CHARS + 1 and message.endswith("…")
