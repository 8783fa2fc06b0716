"""Refusals of a tool that declares an ``outputSchema`` carry no ``structuredContent``.

Schema-validating clients (the TypeScript SDK, MCP Inspector) check
``structuredContent`` against the tool's ``outputSchema`` even on an
``isError`` result, so the kernel folds a refusal's payload into a JSON text
block after the sentence for such tools, on every path: a denial, a handler
failure, a refusal decided outside the kernel (``refuse``), and a handler's
own error result passed through. Tools without an ``outputSchema`` keep the
payload as ``structuredContent``. (The real clients: tests/clients.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.outcomes import ReasonCode
from sharedos.policy import compile_source

pytestmark = pytest.mark.anyio

POLICY = """
namespace shaped
requirement shaped.get   { action get; resource path(args.path) }
requirement shaped.plain { action get; resource path(args.path) }
permit get on "/public/**"
forbid * on "/private/**"
toolpolicy all { mode open
  managed shaped.* }
"""
SCHEMA = {"type": "object", "properties": {"v": {"type": "integer"}}, "required": ["v"]}


async def _handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    if hctx.resource.endswith("/fail"):
        return HandlerResult.error("backend down")
    if hctx.resource.endswith("/own"):
        return HandlerResult(
            content=[{"type": "text", "text": "own error"}],
            structured={"error": "own"},
            is_error=True,
            passthrough=True,
        )
    return HandlerResult.text("1", structured={"v": 1})


def _tool(name: str, output_schema: dict[str, Any] | None) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=name,
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        output_schema=output_schema,
        handler=_handler,
    )


@pytest.fixture
def host(tmp_path: Path) -> RuntimeHost:
    policy = compile_source(POLICY, "shaped.sos")
    registry = ToolRegistry([_tool("shaped.get", SCHEMA), _tool("shaped.plain", None)])
    return RuntimeHost(Kernel(policy, registry), SqliteEvidenceStore(tmp_path / "e.db"))


async def _call(host: RuntimeHost, tool: str, path: str) -> Any:
    ctx = AccessContext(principal="alice", turn_id="t1")
    tool_policy = host.kernel.policy.tool_policies["all"]
    catalog = host.kernel.list_tools(ctx, tool_policy)
    return await host.invoke_tool(
        ToolCall(tool=tool, arguments={"path": path}, turn_id="t1"),
        ctx,
        tool_policy,
        catalog=catalog,
    )


@pytest.mark.parametrize(
    ("path", "outcome", "reason"),
    [("/private/x", "denied", "forbidden"), ("/public/fail", "failed", "handler_error")],
)
async def test_a_refusal_of_a_tool_with_an_output_schema_has_no_structured_content(
    host: RuntimeHost, path: str, outcome: str, reason: str
) -> None:
    result = await _call(host, "shaped.get", path)
    assert result.is_error and result.structured is None
    sentence, payload_text = (b["text"] for b in result.content)
    payload = json.loads(payload_text)
    assert payload["outcome"] == outcome and payload["reason"] == reason
    assert payload["message"] == sentence  # the payload carries the sentence, as before
    assert "structuredContent" not in result.to_mcp()


async def test_a_tool_without_an_output_schema_keeps_the_payload_structured(
    host: RuntimeHost,
) -> None:
    result = await _call(host, "shaped.plain", "/private/x")
    assert result.structured is not None and result.structured["outcome"] == "denied"
    assert len(result.content) == 1


async def test_a_success_keeps_its_structured_content(host: RuntimeHost) -> None:
    result = await _call(host, "shaped.get", "/public/a")
    assert not result.is_error and result.structured == {"v": 1}


async def test_a_passed_through_error_is_folded_too(host: RuntimeHost) -> None:
    result = await _call(host, "shaped.get", "/public/own")
    assert result.is_error and result.structured is None
    assert [b["text"] for b in result.content] == ["own error", '{"error": "own"}']


async def test_a_refusal_decided_outside_the_kernel_is_folded_by_the_catalogue(
    host: RuntimeHost,
) -> None:
    ctx = AccessContext(principal="alice", turn_id="t2")
    tool_policy = host.kernel.policy.tool_policies["all"]
    catalog = host.kernel.list_tools(ctx, tool_policy)
    result = await host.refuse(
        ToolCall(tool="shaped.get", arguments={"path": "/public/a"}, turn_id="t2"),
        ctx,
        tool_policy,
        ReasonCode.TURN_CLOSED,
        catalog=catalog,
        detail="closed",
    )
    assert result.structured is None and json.loads(result.content[-1]["text"])["reason"] == (
        "turn_closed"
    )
