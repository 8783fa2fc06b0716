"""A published tool whose harness name passes 64 characters is still offered, called and recorded.

Pi 1.6's built-in MCP client (``pi-mcp`` ``createMcpToolName``) cuts a name
longer than 64 characters and appends ``_`` + 8 hex digits of a hash
(``mcp__sharedos__strict_sttt…_4537be9e``); dsh does the same with 12. The
scripted model and the correlation knew only dsh's form, so through Pi a
published tool with a canonical name over 49 characters was never called: the
model "guessed" an unhashed name Pi refuses, and the row stayed not exercised
as if the tool had not been offered. Measured with every pinned CLI over HTTP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.catalog.definition import ToolMetadata
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.harness.runtime import create_mcp_harness_runtime
from sharedos.harness.tools import HarnessUnavailable
from sharedos.kernel import Kernel, RuntimeHost
from sharedos.kernel.context import AccessContext
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.policy import compile_source
from sharedos.testing.scripted_model import ScriptedAttempt

pytestmark = [pytest.mark.anyio, pytest.mark.harness]

HARNESSES = ("claude-code", "codex", "pi", "pi-adapter", "dsh")
#: 60 characters: ``mcp__sharedos__`` + its sanitized form is 75, over Pi's 64
LONG = "strict.s" + "t" * 52


async def _echo(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult.text("ok " + hctx.resource)


def _tool(name: str) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description="Answers ok and the path.",
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
        metadata=ToolMetadata(namespace="strict", source="tests"),
        handler=_echo,
    )


@pytest.mark.parametrize("harness", HARNESSES)
async def test_every_cli_calls_a_tool_with_a_long_name(tmp_path: Path, harness: str) -> None:
    try:
        runtime = create_mcp_harness_runtime(harness)
        runtime.version()
    except HarnessUnavailable as exc:
        pytest.skip(str(exc))
    policy = compile_source(
        "namespace strict\n"
        f"requirement {LONG} {{ action read; resource path(args.path) }}\n"
        "requirement strict.short { action read; resource path(args.path) }\n"
        'permit read on "/public/**"\n'
        "toolpolicy run {\n  mode open\n  managed strict.*\n}\n",
        "long.sos",
    )
    registry = ToolRegistry()
    registry.register(_tool(LONG))
    registry.register(_tool("strict.short"))
    store = SqliteEvidenceStore(tmp_path / "evidence.sqlite")
    try:
        host = RuntimeHost(Kernel(policy, registry), store)
        ctx = AccessContext(principal="alice")
        plan = [
            ScriptedAttempt("long", LONG, {"path": "/public/a"}),
            ScriptedAttempt("short", "strict.short", {"path": "/public/b"}),
        ]
        result = await runtime.run_turn(
            host,
            ctx,
            policy.tool_policies["run"],
            plan=plan,
            workdir=tmp_path / "turns",
            transport="http",
            timeout_s=120,
        )
        records = [(r.tool, str(r.outcome)) for r in store.query(turn_id=ctx.turn_id)]
    finally:
        store.close()
    assert records == [(LONG, "succeeded"), ("strict.short", "succeeded")], (
        result.notes,
        [(c.key, c.alias, c.reply) for c in result.issued],
    )
