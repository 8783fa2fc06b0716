"""A harness CLI's own per-call MCP timeout against SharedOS's bound on the call.

``sharedos run`` with an upstream of the default ``call_s`` (60 s) gives each call 70 s
(``call_s`` + the ping + 5 s), and each CLI gave up after 60 s: measured with Pi 1.6.0,
its model read "MCP request timed out after 60000ms" while SharedOS recorded
``upstream_timeout``, and with a longer ``call_s`` the call ran on and could succeed
after the model was told it had timed out. The runtime tells each CLI the host's bound
and the CLI waits past it.
"""

from __future__ import annotations

import json
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
from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream

pytestmark = [pytest.mark.anyio, pytest.mark.harness("pi")]

RULES = (
    "namespace t\n"
    "requirement t.peek { action read; resource path(args.path) }\n"
    'permit read on "/public/**"\n'
    "toolpolicy run {\n  mode open\n  managed t.*\n}\n"
)


def _pi() -> Any:
    try:
        runtime = create_mcp_harness_runtime("pi")
        runtime.version()
    except HarnessUnavailable as exc:
        pytest.skip(str(exc))
    return runtime


async def test_the_runtime_gives_the_cli_a_call_timeout_past_the_hosts(tmp_path: Path) -> None:
    """While Pi runs, a tool reads the ``mcp.json`` the runtime wrote for it: its per-call
    timeout outlasts the host's handler timeout (before: none, Pi's own 60 s)."""
    runtime = _pi()
    turns = tmp_path / "turns"
    seen: list[float] = []

    async def peek(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        for path in turns.rglob("mcp.json"):
            entry = json.loads(path.read_text())["mcpServers"]["sharedos"]
            seen.append(float(entry.get("timeout", 60)))
        return HandlerResult.text("peeked")

    policy = compile_source(RULES, "run.sos")
    registry = ToolRegistry()
    registry.register(
        ToolDefinition(
            name="t.peek",
            description="Reads the harness's MCP configuration.",
            input_schema={
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
            metadata=ToolMetadata(namespace="t", source="tests"),
            handler=peek,
        )
    )
    store = SqliteEvidenceStore(tmp_path / "evidence.sqlite")
    try:
        result = await runtime.run_turn(
            RuntimeHost(Kernel(policy, registry), store, handler_timeout_s=75.0),
            AccessContext(principal="alice"),
            policy.tool_policies["run"],
            plan=[ScriptedAttempt("peek", "t.peek", {"path": "/public/a"})],
            workdir=turns,
            transport="http",
            timeout_s=120,
        )
    finally:
        store.close()
    assert [str(r.outcome) for r in result.evidence] == ["succeeded"], result.notes
    assert seen and min(seen) >= 75.0 + 30, seen


@pytest.mark.stress
async def test_the_model_reads_sharedoss_upstream_timeout_not_the_clients(
    tmp_path: Path,
) -> None:
    """An upstream that never answers, with ``sharedos run``'s handler timeout for
    ``call_s`` 61 s: Pi's model reads SharedOS's ``upstream_timeout`` refusal, not Pi's
    own "MCP request timed out after 60000ms" (about 65 s)."""
    runtime = _pi()
    toml = hostile_upstream("--mode", "never", call_s=61.0)
    async with brokered(tmp_path, toml, hostile_rules("bad"), handler_timeout_s=61.0 + 10.0) as env:
        ctx = env.context("alice")
        async with env.broker.turn(ctx):
            result = await runtime.run_turn(
                env.host,
                ctx,
                env.policy.tool_policies["run"],
                plan=[ScriptedAttempt("slow", "fx.bad", {"path": "/public/x"})],
                workdir=tmp_path / "turns",
                transport="http",
                timeout_s=150,
            )
    assert [r.reason for r in result.evidence] == ["upstream_timeout"], result.notes
    (reply,) = [c.reply or "" for c in result.issued]
    assert "timed out after 60000ms" not in reply, reply
    assert "did not answer" in reply, reply
