"""A relayed result must satisfy the outputSchema the turn published, whatever the upstream says now.

The turn's catalogue is fixed when it opens, outputSchema included; the
harness's client (the Python and TypeScript SDKs) validates every result's
``structuredContent`` against it. The broker's own SDK client validates
against the upstream's *latest* listing instead, which another turn's listing
refreshes on the shared pooled session. So an upstream that changes a tool's
outputSchema while a turn is open gets a result the turn's schema forbids
through SharedOS, recorded ``succeeded``, and the harness's client raises
instead of receiving a result. (Since a tool changed under an open turn is
refused before it is called, the check shows on a result the unchanged tool's
own schema forbids.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio

RULES = hostile_rules("echo", "bad", permit="/public/**")

OLD = {"type": "object", "properties": {"v": {"type": "integer"}}, "required": ["v"]}
NEW = {"type": "object", "properties": {"w": {"type": "string"}}, "required": ["w"]}


def tools(output_schema: dict[str, Any]) -> list[dict[str, Any]]:
    args = {"type": "object", "properties": {"path": {"type": "string"}, "how": {"type": "string"}}}
    return [
        {"name": "echo", "description": "Echo.", "inputSchema": args},
        {
            "name": "bad",
            "description": "Structured.",
            "inputSchema": args,
            "outputSchema": output_schema,
        },
    ]


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_result_breaking_the_published_output_schema_is_a_failed_result(
    tmp_path: Path, transport: str
) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools(OLD)), encoding="utf-8")
    toml = hostile_upstream("--mode", "structured", "--tools", str(tools_file))
    async with brokered(tmp_path, toml, RULES) as env:
        async with env.turn(transport=transport) as first:
            # the upstream changes the tool's outputSchema; another turn lists it meanwhile
            tools_file.write_text(json.dumps(tools(NEW)), encoding="utf-8")
            async with env.turn(transport=transport):
                pass
            published = {t.name: t for t in (await first.client.list_tools()).tools}
            assert published["fx.bad"].output_schema == OLD  # the turn's catalogue is fixed
            # structuredContent {"w": ...}: valid for the new schema, not the published one
            result = await first.call("fx.bad", {"path": "/public/x", "how": "w"})
        records = env.records(first.context.turn_id)
    # the changed tool is not called at all: its definition is no longer the turn's
    assert result.is_error is True
    assert "is not the one this turn was given" in text_of(result)
    [record] = records
    assert (str(record.outcome), str(record.reason)) == ("failed", "upstream_unavailable")


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_result_the_published_output_schema_refuses_is_a_failed_result(
    tmp_path: Path, transport: str
) -> None:
    """The upstream lists the tool unchanged and answers with what its schema forbids."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools(OLD)), encoding="utf-8")
    toml = hostile_upstream("--mode", "structured", "--tools", str(tools_file))
    async with brokered(tmp_path, toml, RULES) as env:
        async with env.turn(transport=transport) as turn:
            async with env.turn(transport=transport):  # another turn lists the session again
                pass
            result = await turn.call("fx.bad", {"path": "/public/x", "how": "w"})
        records = env.records(turn.context.turn_id)
    assert result.is_error is True
    assert "outputSchema" in text_of(result)
    [record] = records
    assert (str(record.outcome), str(record.reason)) == ("failed", "upstream_error")
