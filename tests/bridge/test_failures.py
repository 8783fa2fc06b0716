"""The bridge never raises from tools/call, and a refusal's text is written for the model."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from sharedos.bridge.server import TurnEndpoint
from sharedos.kernel.context import AccessContext
from sharedos.kernel.runtime import RuntimeHost
from tests.bridge.conftest import OPEN_POLICY, Runtime

pytestmark = pytest.mark.anyio


class BrokenRuntime(RuntimeHost):
    """A runtime whose invoke_tool fails outright (fault injection: it must never happen)."""

    async def invoke_tool(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("kernel exploded")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_internal_failure_is_a_recorded_result_not_a_jsonrpc_error(
    runtime: Runtime, mode: str
) -> None:
    broken = BrokenRuntime(runtime.host.kernel, runtime.evidence)
    ctx = AccessContext(principal="alice")
    endpoint = TurnEndpoint(
        runtime_host=broken,
        context=ctx,
        tool_policy=OPEN_POLICY,
        catalog=runtime.host.kernel.list_tools(ctx, OPEN_POLICY),
    )
    async with Client(endpoint.build_server(), mode=mode) as client:
        result = await client.call_tool("files.read", {"path": "/public/a.txt"})
    assert result.is_error
    payload = result.structured_content or {}
    assert payload["outcome"] == "failed" and payload["reason"] == "internal_error"
    assert "kernel exploded" not in str(result.content)  # internals stay in the host's log
    (record,) = runtime.evidence.query(turn_id=ctx.turn_id)
    assert str(record.outcome) == "failed" and str(record.reason) == "internal_error"
    assert record.tool == "files.read"
