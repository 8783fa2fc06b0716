"""A tool whose schema the SDK would reject never breaks tools/list for the others."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.server.lowlevel.server import Server

from sharedos.bridge.server import TurnEndpoint
from sharedos.bridge.wire import sieve_catalog
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
