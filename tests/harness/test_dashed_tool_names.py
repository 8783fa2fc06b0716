"""A tool whose name holds a dash: what each CLI shows its model, and what the record predicts.

Claude Code, pi-mcp-adapter and dsh keep ``-`` in the name they show the model;
Codex 0.171 (like Pi's built-in client) turns it into ``_``: ``m.dash-y.t`` is
offered as namespace ``mcp__sharedos`` + function ``m_dash_y_t``. The bridge's
alias family on the evidence record, the Codex adapter's reading of its own
events and the correlation's candidates said ``m_dash-y_t`` for Codex — a name
no Codex model ever saw, so a Codex session log could not be matched to the
record by the name its model used. Measured with every pinned CLI over HTTP.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sharedos.bridge.diagnostics import harness_aliases
from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.catalog.definition import ToolMetadata
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.harness.adapters.codex import CodexAdapter
from sharedos.harness.correlate import alias_candidates
from sharedos.harness.runtime import create_mcp_harness_runtime
from sharedos.harness.tools import HarnessUnavailable
from sharedos.kernel import Kernel, RuntimeHost
from sharedos.kernel.context import AccessContext
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.policy import compile_source
from sharedos.testing.scripted_model import ScriptedAttempt

HARNESSES = ("claude-code", "codex", "pi", "pi-adapter", "dsh")
DASHED = "m.dash-y.t"


def _predicted(aliases: dict[str, Any], harness: str) -> list[str]:
    """The names the record's alias family says ``harness`` shows its model."""
    if harness == "codex":
        return [f"{aliases['codex']['namespace']}/{aliases['codex']['name']}"]
    if harness in ("pi", "pi-adapter"):
        return list(aliases["pi"])
    return [aliases[harness]]


def test_codex_names_are_predicted_as_codex_writes_them() -> None:
    aliases = harness_aliases("sharedos", DASHED)
    assert aliases["codex"] == {"namespace": "mcp__sharedos", "name": "m_dash_y_t"}
    assert aliases["claude-code"] == "mcp__sharedos__m_dash-y_t"  # Claude Code keeps the dash
    assert "mcp__sharedos/m_dash_y_t" in alias_candidates("sharedos", DASHED)
    event = {
        "type": "item.completed",
        "item": {
            "id": "item_1",
            "type": "mcp_tool_call",
            "server": "sharedos",
            "tool": DASHED,
            "status": "completed",
            "result": {"content": [{"type": "text", "text": "ok"}]},
        },
    }
    (parsed,) = CodexAdapter().parse_output(json.dumps(event) + "\n").tool_events
    assert parsed.alias == "mcp__sharedos/m_dash_y_t"
    assert parsed.tool == DASHED


async def _echo(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult.text("ok " + hctx.resource)


@pytest.mark.anyio
@pytest.mark.harness
@pytest.mark.parametrize("harness", HARNESSES)
async def test_the_record_predicts_the_name_every_cli_shows(tmp_path: Path, harness: str) -> None:
    try:
        runtime = create_mcp_harness_runtime(harness)
        runtime.version()
    except HarnessUnavailable as exc:
        pytest.skip(str(exc))
    policy = compile_source(
        "namespace m\n"
        f"requirement {DASHED} {{ action read; resource path(args.path) }}\n"
        'permit read on "/public/**"\n'
        "toolpolicy run {\n  mode open\n  managed m.**\n}\n",
        "dash.sos",
    )
    registry = ToolRegistry()
    registry.register(
        ToolDefinition(
            name=DASHED,
            description="Answers ok and the path.",
            input_schema={
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
            metadata=ToolMetadata(namespace="m", source="tests"),
            handler=_echo,
        )
    )
    store = SqliteEvidenceStore(tmp_path / "evidence.sqlite")
    try:
        host = RuntimeHost(Kernel(policy, registry), store)
        ctx = AccessContext(principal="alice")
        result = await runtime.run_turn(
            host,
            ctx,
            policy.tool_policies["run"],
            plan=[ScriptedAttempt("dash", DASHED, {"path": "/public/a"})],
            workdir=tmp_path / "turns",
            transport="http",
            timeout_s=120,
        )
        records = store.query(turn_id=ctx.turn_id)
    finally:
        store.close()
    assert [(r.tool, str(r.outcome)) for r in records] == [(DASHED, "succeeded")], result.notes
    shown = result.aliases_shown[DASHED]
    # the canonical id on the record is the raw MCP tool name; the alias is a diagnostic
    assert _predicted((records[0].diagnostics or {})["aliases"], harness).count(shown) == 1, shown
    # the harness's own account of the call maps back to the canonical tool
    assert [e.tool for e in result.output.tool_events] in ([DASHED], []), result.output.tool_events
