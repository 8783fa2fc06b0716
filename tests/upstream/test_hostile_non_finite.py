"""Non-finite numbers from an upstream (progress, results) never reach the harness as invalid MCP.

JSON has no NaN or infinity, but Python's parsers accept ``NaN``, ``Infinity``
and ``1e400`` (which overflows to infinity). An upstream's progress
notification carrying one was relayed, and the bridge wrote it as
``"progress": null`` — a notification no MCP client can accept (the SDK's
client logs "Failed to validate notification" and drops it).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio

RULES = hostile_rules("echo", "bad")


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_non_finite_progress_is_not_relayed_as_invalid_notifications(
    tmp_path: Path, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    toml = hostile_upstream("--mode", "progress-nan")
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    caplog.set_level(logging.WARNING)
    async with brokered(tmp_path, toml, RULES) as env, env.turn(transport=transport) as t:
        result = await t.call("fx.bad", {"path": "/public/x"}, progress_callback=on_progress)
    assert text_of(result) == "progress sent"
    invalid = [r.getMessage() for r in caplog.records if "Failed to validate" in r.getMessage()]
    assert invalid == [], "the harness's client received progress it cannot accept"


async def test_a_result_with_non_finite_numbers_is_a_failed_result(tmp_path: Path) -> None:
    # structuredContent {"v": NaN, "w": Infinity}: relayed, it reached the harness as nulls
    toml = hostile_upstream("--mode", "nan")
    async with brokered(tmp_path, toml, RULES) as env, env.turn() as t:
        result = await t.call("fx.bad", {"path": "/public/x"})
        turn_id = t.context.turn_id
    assert result.is_error is True
    [record] = env.records(turn_id)
    assert (str(record.outcome), str(record.reason)) == ("failed", "upstream_error")
