"""Content blocks the harness's MCP client refuses are refused before they are relayed.

The ``mcp`` SDK parses an image's ``data``, an embedded resource's ``blob`` and an
annotation's ``lastModified`` as any string; the TypeScript SDK the harnesses' clients
are built on refuses the whole result when one is not base64 (``atob``) or not an
RFC 3339 date-time. A hostile upstream returning ``"data": "not base64!"`` had its call
recorded succeeded while the harness's client threw and saw no result. Now it fails
``upstream_error``, nothing of it relayed (docs/upstreams.md, "Failures").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio

KINDS = ("image", "audio", "blob", "dated", "image-error", "echo")
RULES = hostile_rules(*(k.replace("-", "_") for k in KINDS))


async def test_content_mcp_clients_refuse_fails_and_is_never_relayed(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    tools = [{"name": k, "description": k, "inputSchema": schema} for k in KINDS]
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools), encoding="utf-8")
    toml = hostile_upstream("--mode", "bad-base64", "--tools", str(tools_file))
    async with brokered(tmp_path, toml, RULES.replace("image_error", "image-error")) as env:
        async with env.turn() as t:
            results = {k: await t.call(f"fx.{k}", {"path": "/public/x"}) for k in KINDS}
            turn_id = t.context.turn_id
        records = {r.tool: r for r in env.records(turn_id)}
    assert text_of(results["echo"]) == "echo ok"
    for kind in KINDS[:-1]:
        result = results[kind]
        assert result.is_error, kind
        assert "MCP clients refuse" in text_of(result), (kind, text_of(result))
        assert "before" not in text_of(result)  # nothing of the upstream's content
        record = records[f"fx.{kind}"]
        assert (str(record.outcome), str(record.reason)) == ("failed", "upstream_error"), kind
    assert str(records["fx.echo"].outcome) == "succeeded"
