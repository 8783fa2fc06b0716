"""One tool MCP does not accept is refused by name; the rest of its upstream is served.

docs/upstreams.md ("Naming"): a tool whose schema is not an object schema MCP
accepts is refused, "the rest of the upstream still served". But the SDK's
client session validates a tools/list answer as a whole: one tool listed with
``"inputSchema": {"type": "array"}``, or with no inputSchema at all, made the
whole upstream unavailable for the turn ("failed to list its tools:
ValidationError ...").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio

RULES = hostile_rules("echo", "listy", "bare")

TOOLS: list[dict[str, Any]] = [
    {
        "name": "echo",
        "description": "Echo.",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {"name": "listy", "description": "An array schema.", "inputSchema": {"type": "array"}},
    {"name": "bare", "description": "No inputSchema at all."},
]


async def _listed(tmp_path: Path, tools: list[dict[str, Any]]) -> tuple[Any, list[str]]:
    """A turn brokering an upstream that lists ``tools``: its upstream status, the names
    the turn published."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools), encoding="utf-8")
    toml = hostile_upstream("--tools", str(tools_file))
    async with brokered(tmp_path, toml, RULES) as env, env.turn() as t:
        [status] = t.upstreams.statuses
        return status, await t.names()


async def test_a_tool_mcp_refuses_is_refused_alone(tmp_path: Path) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS), encoding="utf-8")
    toml = hostile_upstream("--tools", str(tools_file))
    async with brokered(tmp_path, toml, RULES) as env, env.turn() as t:
        [status] = t.upstreams.statuses
        names = await t.names()
        echo = await t.call("fx.echo", {"path": "/public/x"})
    assert status.state == "ok", status.lines()
    assert names == ["fx.echo"]
    assert text_of(echo) == "echo ok"
    refused = {r.tool: r.reason for r in status.refused}
    assert set(refused) == {"listy", "bare"}
    assert "inputSchema" in refused["listy"] and "inputSchema" in refused["bare"]


@pytest.mark.parametrize("mode", ["cursor-loop", "cursor-grow"])
async def test_a_listing_cut_at_its_page_limit_says_so(tmp_path: Path, mode: str) -> None:
    """A paginator that never ends is followed for ``MAX_LIST_PAGES`` pages; the turn still
    opens with what was listed, and its report says the listing was cut there."""
    toml = hostile_upstream("--mode", mode)
    async with brokered(tmp_path, toml, RULES) as env, env.turn() as t:
        [status] = t.upstreams.statuses
        report = "\n".join(t.upstreams.report())
    assert status.state == "ok", status.lines()
    assert status.listed >= 50  # every page it sent was read, up to the limit
    assert "after 50 pages" in report, report


def _nested(keyword: str, levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {keyword: schema}
    return schema


@pytest.mark.parametrize("keyword", ["items", "not"])
async def test_a_deeply_nested_schema_is_refused_alone_and_every_turn_still_opens(
    tmp_path: Path, keyword: str
) -> None:
    """150 levels of ``items`` (a 2 KB schema, far under every limit, and JSON the SDK
    parses) took the meta-schema check past Python's recursion limit: the RecursionError
    escaped the broker, and no turn of the host opened while the upstream listed it."""
    deep = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "deep": _nested(keyword, 150)},
    }
    tools = [*TOOLS[:1], {"name": "listy", "description": "Deep.", "inputSchema": deep}]
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools), encoding="utf-8")
    toml = hostile_upstream("--tools", str(tools_file))
    async with brokered(tmp_path, toml, RULES) as env, env.turn() as t:
        [status] = t.upstreams.statuses
        names = await t.names()
        echo = await t.call("fx.echo", {"path": "/public/x"})
    assert status.state == "ok", status.lines()
    assert names == ["fx.echo"]
    assert text_of(echo) == "echo ok"
    [refused] = status.refused
    assert refused.tool == "listy" and "nests deeper than 64 levels" in refused.reason


@pytest.mark.parametrize("refused_first", [True, False])
async def test_a_name_listed_twice_is_refused_even_when_one_copy_is_refused(
    tmp_path: Path, refused_first: bool
) -> None:
    """Two different definitions under one name (a paginator whose pages disagree): the
    upstream may run either, so neither is published. Counting only the copies that could
    be published let the other copy through when one was refused (here: a lookahead RE2
    cannot compile); and with the refused copy listed last, every call of the published
    one then failed as "changed since the turn opened"."""
    good = {"name": "echo", "description": "Echo.", "inputSchema": TOOLS[0]["inputSchema"]}
    bad = {
        "name": "echo",
        "description": "Echo, another way.",
        "inputSchema": {
            "type": "object",
            "properties": {"path": {"type": "string", "pattern": "^(?=/public/)"}},
        },
    }
    tools = [bad, good] if refused_first else [good, bad]
    status, names = await _listed(tmp_path, tools)
    assert names == []
    assert "the upstream lists this name twice" in {r.reason for r in status.refused}
    assert status.published == ()


async def test_a_tool_with_a_boolean_property_schema_is_refused_alone(tmp_path: Path) -> None:
    """One listed tool with ``"properties": {"x": true}`` (valid JSON Schema) was published,
    and the TypeScript SDK's client (the harnesses') refused the bridge's whole tools/list
    for it: the harness saw no tool of the turn. It is refused by name instead."""
    tools = [
        TOOLS[0],
        {
            "name": "bare",
            "description": "A boolean property schema.",
            "inputSchema": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "x": True},
            },
        },
    ]
    status, names = await _listed(tmp_path, tools)
    assert names == ["fx.echo"]
    [refused] = status.refused
    assert refused.tool == "bare" and "property 'x' is not a schema object" in refused.reason


async def test_an_output_schema_regex_mcp_clients_cannot_compile_is_refused_alone(
    tmp_path: Path,
) -> None:
    """RE2 compiles ``(?i)abc``; the TypeScript SDK's client compiles every outputSchema
    regex as ECMA-262 when it lists the tools, threw, and refused the bridge's whole
    tools/list: the harness saw no tool of the turn. The tool is refused by name."""
    pattern = {"type": "string", "pattern": "(?i)abc"}
    tools = [
        TOOLS[0],
        {
            "name": "bare",
            "description": "An RE2-only regex in its outputSchema.",
            "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
            "outputSchema": {"type": "object", "properties": {"v": pattern}},
        },
    ]
    status, names = await _listed(tmp_path, tools)
    assert names == ["fx.echo"]
    [refused] = status.refused
    assert refused.tool == "bare" and "MCP clients cannot compile" in refused.reason
