"""A result relayed with a credential scrubbed out must still satisfy the published outputSchema.

The broker checked an upstream's ``structuredContent`` against the outputSchema
the turn published, then scrubbed the upstream's credentials out of it. A
string that held the credential became ``[redacted]`` (a key holding it too)
after the check: a value the schema constrains (``pattern``, ``minLength``,
``enum``, a required key) then broke the schema. The call was recorded
``succeeded``, and the harness's own client -- which validates every result
against the published outputSchema -- refused the result instead of receiving it.
The check now runs on what is relayed: such a result is a failed call
(``upstream_error``), recorded as such, with no part of the credential.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio

RULES = hostile_rules("bad")

ARGS = {"type": "object", "properties": {"path": {"type": "string"}, "how": {"type": "string"}}}


def tools(v: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": "bad",
            "description": "Answers with its credential in structuredContent.",
            "inputSchema": ARGS,
            "outputSchema": {"type": "object", "properties": {"v": v}, "required": ["v"]},
        }
    ]


@pytest.mark.parametrize(
    "v",
    [
        {"type": "string", "pattern": "^[A-Za-z0-9-]+$"},
        {"type": "string", "minLength": 20},
    ],
    ids=["pattern", "minLength"],
)
async def test_a_result_whose_scrubbed_form_breaks_the_output_schema_is_failed(
    tmp_path: Path, planted: str, v: dict[str, Any]
) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools(v)), encoding="utf-8")
    toml = (
        hostile_upstream("--mode", "leak-invalid", "--tools", str(tools_file))
        + '[upstream.fx.credentials]\nFIXTURE_TOKEN = { env = "SHAREDOS_TEST_TOKEN" }\n'
    )
    # structuredContent {"v": <the credential, alone>}: valid, until it is scrubbed
    how = "structured-0"
    async with brokered(tmp_path, toml, RULES, environ={"SHAREDOS_TEST_TOKEN": planted}) as env:
        async with env.turn() as t:
            result = await t.call("fx.bad", {"path": "/public/x", "how": how})
        [record] = env.records(t.context.turn_id)
    assert result.is_error is True
    assert "outputSchema" in text_of(result)
    assert planted not in text_of(result)
    assert (str(record.outcome), str(record.reason)) == ("failed", "upstream_error")
