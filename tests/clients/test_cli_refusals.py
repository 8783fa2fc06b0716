"""What each harness CLI shows its model for a refusal of a tool that declares an outputSchema.

Such a refusal carries no ``structuredContent`` (schema-validating clients would
reject it): the sentence, then the payload as a JSON text block. Measured with
the five pinned CLIs over a relayed stdio bridge, brokered (server-filesystem)
and built-in (``strict.stat``): the scripted model reads what its harness
handed it for each call, and every CLI shows the model the refusal — denied
and failed told apart in the words — while the kernel's record says the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sharedos.harness.runtime import create_mcp_harness_runtime
from sharedos.harness.tools import HarnessUnavailable
from sharedos.testing.scripted_model import ScriptedAttempt
from tests.clients.world import strict_world

pytestmark = [pytest.mark.anyio, pytest.mark.harness]

HARNESSES = ("claude-code", "codex", "pi", "pi-adapter", "dsh")


def _is_error_flags(turn_dir: Path) -> dict[str, Any]:
    """call id -> the error flag the harness put on the tool result it sent the model (if any)."""
    flags: dict[str, Any] = {}
    log = turn_dir / "model-requests.jsonl"
    for line in log.read_text(encoding="utf-8").splitlines():
        body = json.loads(line).get("body") or {}
        for msg in body.get("messages") or []:
            content = msg.get("content") if isinstance(msg, dict) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    flags[str(block.get("tool_use_id"))] = block.get("is_error")
    return flags


@pytest.mark.parametrize("harness", HARNESSES)
async def test_every_cli_shows_its_model_the_refusal(tmp_path: Path, harness: str) -> None:
    try:
        runtime = create_mcp_harness_runtime(harness)
        runtime.version()
    except HarnessUnavailable as exc:
        pytest.skip(str(exc))
    async with strict_world(tmp_path) as world:
        env, share = world.env, world.share
        ctx = env.context("alice")
        plan = [
            ScriptedAttempt("denied", "fs.read_text_file", {"path": f"{share}/private/secret.txt"}),
            ScriptedAttempt("failed", "strict.stat", {"path": "/public/fail"}),
            ScriptedAttempt("allowed", "fs.read_text_file", {"path": f"{share}/public/a.txt"}),
        ]
        async with env.broker.turn(ctx):
            result = await runtime.run_turn(
                env.host,
                ctx,
                env.policy.tool_policies["run"],
                plan=plan,
                workdir=tmp_path / "turns",
                transport="stdio",
                timeout_s=150,
            )
    assert [(str(r.outcome), r.tool) for r in result.evidence] == [
        ("denied", "fs.read_text_file"),
        ("failed", "strict.stat"),
        ("succeeded", "fs.read_text_file"),
    ], result.notes
    replies = {c.key: c.reply or "" for c in result.issued}
    flags = _is_error_flags(result.turn_dir)
    shown = {
        c.key: {"reply": replies[c.key][:600], "isErrorFlag": flags.get(c.call_id)}
        for c in result.issued
    }
    print(f"\n{harness}: " + json.dumps(shown, indent=1))
    # the sentence and the payload (as JSON text) reach the model, denied and failed apart
    assert "SharedOS policy denial" in replies["denied"], shown
    assert '"outcome": "denied"' in replies["denied"], shown
    assert "SharedOS tool failure" in replies["failed"], shown
    assert '"outcome": "failed"' in replies["failed"], shown
    assert "top secret" not in replies["denied"]
    assert "public words" in replies["allowed"], shown
