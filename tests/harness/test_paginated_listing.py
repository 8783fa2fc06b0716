"""Every installed CLI follows ``nextCursor``: it offers (and calls) a tool of a listing's last page.

The turn bridge serves one tool a page here, so the default catalogue takes
several ``tools/list`` pages. The scripted model calls the catalogue's last
tool; a harness that read only the first page would not offer it, its own
client would refuse the model's guess before any ``tools/call``, and no
attempt would reach the kernel. An attempt in the evidence is the proof that
the CLI walked every page. Both transports: over stdio the page size reaches
the bridge process through the turn file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from sharedos.bridge.limits import TransportLimits
from sharedos.bridge.turn import open_turn
from sharedos.bridge.turnfile import StdioLaunch
from sharedos.conformance.environment import build_environment, default_policy_paths
from sharedos.conformance.manifest import load_manifest
from sharedos.harness import recipes
from sharedos.harness.hostconfig import default_host_config
from sharedos.harness.process import run_process
from sharedos.testing.scripted_model import ScriptedAttempt, ScriptedModelServer

pytestmark = [pytest.mark.harness, pytest.mark.anyio]

HARNESSES = ("claude-code", "codex", "pi", "pi-adapter", "dsh")
LIMITS = TransportLimits(list_page_size=1)


@pytest.mark.parametrize("transport", ["http", "stdio"])
@pytest.mark.parametrize("harness_id", HARNESSES)
async def test_the_cli_calls_a_tool_of_the_last_page(
    harness_id: str, transport: str, tmp_path: Path
) -> None:
    manifest = load_manifest()
    cfg = default_host_config().get(harness_id)
    env = build_environment(manifest, tmp_path, name=f"pages-{harness_id}-{transport}")
    ctx = env.context(manifest.default_context, f"pages-{harness_id}-{transport}-{os.getpid()}")
    tool_policy = env.tool_policy(manifest.default_policy)
    names = sorted(env.host.kernel.list_tools(ctx, tool_policy).names)
    assert names[-1] == "files.write" and len(names) >= 4  # four pages at least
    plan = [
        ScriptedAttempt(
            "last-page", "files.write", {"path": "/public/paged.txt", "content": "last page\n"}
        )
    ]
    turn_dir = Path(tempfile.mkdtemp(prefix="turn-", dir=env.workdir))
    model = ScriptedModelServer(plan, log_path=turn_dir / "model.jsonl").start()
    stdio = None
    if transport == "stdio":
        stdio = StdioLaunch(
            rules=default_policy_paths(),
            evidence_db=env.evidence_path,
            sandbox_root=env.sandbox_root,
            directory=env.workdir,
            limits=LIMITS,
        )
    try:
        async with open_turn(
            env.host,
            ctx,
            tool_policy,
            transport=transport,  # type: ignore[arg-type]
            stdio=stdio,
            limits=LIMITS,
        ) as turn:
            if transport == "http":
                assert turn.diagnostics["pages"] == len(names)
            launch = recipes.prepare(
                cfg,
                bridge=recipes.BridgeEndpoint(turn.transport, turn.url, turn.token, turn.command),
                turn_dir=turn_dir,
                prompt="Write /public/paged.txt with files.write.",
                model_url=model.url,
                host_env=os.environ,
            )
            proc = await run_process(
                launch.argv,
                env=launch.env,
                cwd=launch.cwd,
                timeout_s=120,
                secrets=launch.secret_values,
            )
    finally:
        model.stop()
    records = [r for r in env.evidence.query(turn_id=ctx.turn_id) if r.tool == "files.write"]
    env.close()
    assert not proc.timed_out, proc.stderr[-2000:]
    assert records, (
        f"{harness_id} over {transport} never called files.write (the last page's tool): "
        f"it did not follow nextCursor. stderr: {proc.stderr[-1500:]}"
    )
    assert records[0].arguments["path"] == "/public/paged.txt"
