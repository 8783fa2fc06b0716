"""A tool whose schema the SDK would reject never breaks tools/list for the others."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.server.lowlevel.server import Server

from sharedos.bridge.server import TurnEndpoint
from sharedos.bridge.wire import WireSieve, sieve_catalog
from sharedos.catalog.definition import PublishedToolDefinition, ToolMetadata
from sharedos.kernel.context import AccessContext
from sharedos.kernel.kernel import TurnCatalog
from tests.bridge.conftest import OPEN_POLICY, Runtime

pytestmark = pytest.mark.anyio

ODD_SCHEMA: dict[str, Any] = {"properties": {"q": {"type": "string"}}, "type": "array"}


def _odd_tool() -> PublishedToolDefinition:
    # Built around validation on purpose: the registry would refuse this tool,
    # and the bridge's own check is what is being tested.
    return PublishedToolDefinition.model_construct(
        name="odd.tool",
        description="A tool whose inputSchema root is not an object",
        input_schema=ODD_SCHEMA,
        output_schema=None,
        annotations=None,
        metadata=ToolMetadata(namespace="odd"),
    )


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_odd_schema_is_left_out_and_the_rest_is_listed(runtime: Runtime, mode: str) -> None:
    context = AccessContext(principal="alice")
    real = runtime.host.kernel.list_tools(context, OPEN_POLICY)
    catalog = TurnCatalog(
        tools=(*real.tools, _odd_tool()),
        catalog_hash=real.catalog_hash,
        names=frozenset({*real.names, "odd.tool"}),
    )
    endpoint = TurnEndpoint(
        runtime_host=runtime.host, context=context, tool_policy=OPEN_POLICY, catalog=catalog
    )
    async with Client(endpoint.build_server(), mode=mode) as client:
        listed = sorted(t.name for t in (await client.list_tools()).tools)
    assert listed == sorted(real.names)
    assert [e.name for e in endpoint.excluded] == ["odd.tool"]
    assert "object" in endpoint.excluded[0].reason


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_control_the_bare_sdk_fails_the_whole_list(mode: str) -> None:
    """Without the sieve, the SDK rejects every tool at once (why the check exists)."""
    tool = types.Tool.model_construct(name="odd.tool", description="d", input_schema=ODD_SCHEMA)
    good = types.Tool(name="good.tool", description="d", input_schema={"type": "object"})

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[good, tool])

    server: Server[Any] = Server("bare", on_list_tools=on_list_tools)
    async with Client(server, mode=mode) as client:
        with pytest.raises(Exception):  # noqa: B017 - MCPError -32603 for the whole list
            await client.list_tools()


def test_sieve_reasons() -> None:
    ok, excluded = sieve_catalog(
        [
            {"name": "a.b", "description": "fine", "inputSchema": {"type": "object"}},
            {"name": "no.desc", "description": " ", "inputSchema": {"type": "object"}},
            {
                "name": "bad.json",
                "description": "d",
                "inputSchema": {"type": "object", "properties": {"x": {"type": 3}}},
            },
            {
                "name": "bad.out",
                "description": "d",
                "inputSchema": {"type": "object"},
                "outputSchema": {"type": "string"},
            },
        ]
    )
    assert [t.name for t in ok] == ["a.b"]
    reasons = {e.name: e.reason for e in excluded}
    assert "description" in reasons["no.desc"]
    assert "JSON Schema" in reasons["bad.json"]
    assert "outputSchema" in reasons["bad.out"]


def _published(name: str, schema: dict[str, Any]) -> PublishedToolDefinition:
    return PublishedToolDefinition.model_construct(
        name=name,
        description="A tool",
        input_schema=schema,
        output_schema=None,
        annotations=None,
        metadata=ToolMetadata(namespace=name.split(".")[0]),
    )


def test_the_sieve_remembers_a_tool_and_rechecks_a_changed_one() -> None:
    """Verdicts are kept per definition hash across turns; a changed definition is not let through."""
    sieve = WireSieve()
    good = {"type": "object", "properties": {"q": {"type": "string"}}}
    ok, excluded = sieve.sieve([_published("memo.tool", good)])
    assert [t.name for t in ok] == ["memo.tool"] and not excluded
    again, _ = sieve.sieve([_published("memo.tool", dict(good))])  # a later turn, equal tool
    assert again[0] is ok[0] and sieve.checked == 1
    # the same name, a changed schema: a new hash, checked, and left out
    changed = {"type": "object", "properties": {"q": {"type": 3}}}
    ok2, excluded2 = sieve.sieve([_published("memo.tool", changed)])
    assert ok2 == [] and [e.name for e in excluded2] == ["memo.tool"]
    assert "not a valid JSON Schema" in excluded2[0].reason
    assert sieve.checked == 2
    # a changed description is a changed definition too: checked again, published as changed
    described = PublishedToolDefinition.model_construct(
        **{**_published("memo.tool", good).__dict__, "description": "Another description"}
    )
    ok3, _ = sieve.sieve([described])
    assert ok3[0].description == "Another description" and sieve.checked == 3


def test_the_sieve_is_bounded() -> None:
    sieve = WireSieve(maxsize=3)
    sieve.sieve([_published(f"n.t{i}", {"type": "object"}) for i in range(10)])
    assert len(sieve) == 3
