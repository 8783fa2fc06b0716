"""A result must satisfy its outputSchema read in the dialect the schema names, as the harness's
client reads it.

SharedOS checked every relayed ``structuredContent`` against the published
outputSchema read as Draft 2020-12, whatever its ``$schema`` said. The MCP SDK
clients read it in the dialect it names (``validator_for``), and TypeScript
servers publish draft-07 schemas (``zod-to-json-schema``). An upstream whose
draft-07 outputSchema says ``"dependencies": {"w": ["v"]}`` (no keyword in
Draft 2020-12) answered ``{"w": ...}``: SharedOS recorded the call
``succeeded`` and relayed it, and the harness's client raised instead of
receiving a result. Such a result is now a failed call (``upstream_error``);
a result the dialect accepts still passes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio

RULES = hostile_rules("bad", permit="/public/**")
ARGS = {"type": "object", "properties": {"path": {"type": "string"}, "how": {"type": "string"}}}
DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFT4 = "http://json-schema.org/draft-04/schema#"

#: draft-07: "w" needs "v" (``dependencies``, ignored by Draft 2020-12)
NEEDS_V = {
    "$schema": DRAFT7,
    "type": "object",
    "properties": {"w": {"type": "string"}, "v": {"type": "integer"}},
    "dependencies": {"w": ["v"]},
}


def tools(output_schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": "bad", "description": "S.", "inputSchema": ARGS, "outputSchema": output_schema}
    ]


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_result_the_declared_dialect_refuses_is_a_failed_result(
    tmp_path: Path, transport: str
) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools(NEEDS_V)), encoding="utf-8")
    toml = hostile_upstream("--mode", "structured", "--tools", str(tools_file))
    async with brokered(tmp_path, toml, RULES) as env:
        async with env.turn(transport=transport) as t:
            # structuredContent {"w": "a string"}: no "v"
            result = await t.call("fx.bad", {"path": "/public/x", "how": "w"})
        [record] = env.records(t.context.turn_id)
    assert result.is_error is True
    assert "outputSchema" in text_of(result) and "dependency" in text_of(result)
    assert (str(record.outcome), str(record.reason)) == ("failed", "upstream_error")
