"""Name and definition refusals: clear, naming the upstream and the tool; the rest still works."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.upstream.conftest import FIXTURE, PY, brokered

pytestmark = pytest.mark.anyio

OBJ = {"type": "object", "properties": {"path": {"type": "string"}}}


def upstream(uid: str, namespace: str, tools: list[dict[str, Any]], tmp: Path) -> str:
    tools_file = tmp / f"{uid}.tools.json"
    tools_file.write_text(json.dumps(tools), encoding="utf-8")
    return (
        f'[upstream.{uid}]\nnamespace = "{namespace}"\ncommand = {json.dumps(PY)}\n'
        f'args = {json.dumps([str(FIXTURE), "--tools", str(tools_file)])}\npinning = "off"\n'
    )


async def test_unpublishable_tools_are_refused_by_name_and_the_rest_works(tmp_path: Path) -> None:
    tools = [
        {"name": "echo", "description": "Echo.", "inputSchema": OBJ},
        {"name": "has space", "description": "Bad name.", "inputSchema": OBJ},
        {"name": "x" * 126, "description": "Too long once prefixed.", "inputSchema": OBJ},
        {"name": "get.sum", "description": "Dotted.", "inputSchema": OBJ},
        {"name": "get_sum", "description": "Underscored.", "inputSchema": OBJ},
        {"name": "nodesc", "inputSchema": OBJ},
    ]
    rules = (
        "namespace fx\n"
        + "".join(
            "requirement fx." + n + " { action read; resource path(args.path) }\n"
            for n in ("echo", "get.sum", "get_sum", "nodesc")
        )
        + 'permit read on "/public/**"\n'
        + "toolpolicy run { mode open\n managed fx.* }\n"
    )
    toml = upstream("fx", "fx", tools, tmp_path)
    async with brokered(tmp_path, toml, rules) as env, env.turn() as t:
        names = await t.names()
        echo = await t.call("fx.echo", {"path": "/public/x"})
        listed = {tool.name: tool for tool in (await t.client.list_tools()).tools}
        [status] = t.upstreams.statuses
        assert status.state == "ok", status.lines()
    refused = {r.tool: r.reason for r in status.refused}
    assert names == ["fx.echo", "fx.nodesc"]
    assert echo.is_error is False
    assert "not a valid tool name after prefixing" in refused["has space"]
    assert "not a valid tool name after prefixing" in refused["x" * 126]
    assert "after the harness alias sanitization" in refused["get.sum"]
    assert "after the harness alias sanitization" in refused["get_sum"]
    lines = "\n".join(status.lines())
    assert "upstream 'fx', tool 'has space'" in lines
    assert "upstream 'fx', tool 'get.sum'" in lines
    assert "which gave no description" in (listed["fx.nodesc"].description or "")


async def test_names_colliding_across_upstreams_are_both_refused(tmp_path: Path) -> None:
    a = upstream("one", "a_b", [{"name": "c", "description": "C.", "inputSchema": OBJ}], tmp_path)
    b = upstream(
        "two",
        "a",
        [
            {"name": "b.c", "description": "B.C.", "inputSchema": OBJ},
            {"name": "ok", "description": "Fine.", "inputSchema": OBJ},
        ],
        tmp_path,
    )
    rules = (
        'namespace a_b\nrequirement a_b.c { action read; resource path(args.path) }\npermit read on "/**"\n'
        "namespace a\nrequirement a.b.c { action read; resource path(args.path) }\n"
        'requirement a.ok { action read; resource path(args.path) }\npermit read on "/**"\n'
        "toolpolicy run { mode open\n managed a_b.*, a.** }\n"
    )
    async with brokered(tmp_path, a + b, rules) as env, env.turn() as t:
        names = await t.names()
        statuses = {s.upstream: s for s in t.upstreams.statuses}
    assert names == ["a.ok"]
    assert [r.tool for r in statuses["one"].refused] == ["c"]
    assert [r.tool for r in statuses["two"].refused] == ["b.c"]
    assert "a_b_c" in statuses["one"].refused[0].reason


async def test_a_brokered_tool_never_shadows_a_builtin(tmp_path: Path) -> None:
    from sharedos.catalog import ToolDefinition

    tools = [{"name": "read", "description": "Shadow.", "inputSchema": OBJ}]
    rules = (
        'namespace sh\nrequirement sh.read { action read; resource path(args.path) }\npermit read on "/**"\n'
        "toolpolicy run { mode open\n managed sh.* }\n"
    )
    async with brokered(tmp_path, upstream("u", "sh", tools, tmp_path), rules) as env:
        env.registry.register(
            ToolDefinition(name="sh.read", description="Built in.", input_schema=OBJ)
        )
        async with env.turn() as t:
            [status] = t.upstreams.statuses
            catalog = t.turn.catalog.wire()
    assert [r.reason for r in status.refused] == ["'sh.read' is already a SharedOS tool"]
    assert [c["metadata"]["source"] for c in catalog] == ["sharedos"]


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_a_tool_2026_clients_would_drop_is_refused_by_name(
    tmp_path: Path, protocol: str
) -> None:
    """A tool whose x-mcp-header annotations MCP 2026-07-28 clients refuse is dropped by
    every such client without a word: SharedOS's own session listing the upstream (auto)
    would lose it unreported; published (legacy), the catalogue and its hash would hold a
    tool the harness never sees. Either way it is refused by name, the rest served."""
    header = {"type": "object", "properties": {"path": {"type": "string", "x-mcp-header": "P"}}}
    tools = [
        {"name": "echo", "description": "Echo.", "inputSchema": header},
        {
            "name": "spaced",
            "description": "Not a token.",
            "inputSchema": {
                "type": "object",
                "properties": {"path": {"type": "string", "x-mcp-header": "a b"}},
            },
        },
        {
            "name": "twice",
            "description": "One header, two properties.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "x-mcp-header": "Where"},
                    "also": {"type": "string", "x-mcp-header": "where"},
                },
            },
        },
    ]
    rules = (
        "namespace fx\n"
        + "".join(
            "requirement fx." + n + " { action read; resource path(args.path) }\n"
            for n in ("echo", "spaced", "twice")
        )
        + 'permit read on "/public/**"\n'
        + "toolpolicy run { mode open\n managed fx.* }\n"
    )
    toml = upstream("fx", "fx", tools, tmp_path) + f'protocol = "{protocol}"\n'
    async with brokered(tmp_path, toml, rules) as env, env.turn(mode="auto") as t:
        seen = await t.names()
        published = sorted(t.turn.catalog.names)
        echo = await t.call("fx.echo", {"path": "/public/x"})
        [status] = t.upstreams.statuses
    assert seen == published == ["fx.echo"]
    assert echo.is_error is False
    refused = {r.tool: r.reason for r in status.refused}
    assert sorted(refused) == ["spaced", "twice"]
    assert all("x-mcp-header" in why for why in refused.values())
