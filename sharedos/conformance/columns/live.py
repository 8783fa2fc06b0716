"""The live column: each installed CLI with its own local tools and no SharedOS catalogue.

It exists to show, from the evidence, what a harness without the catalogue
exercises in the kernel: nothing. No call can reach the kernel, so every row is
not exercised; the notes say which tools the model was offered instead.
"""

from __future__ import annotations

import uuid

from sharedos.conformance.columns.base import ColumnOptions, ColumnRun, attempt_from_record
from sharedos.conformance.columns.harnesses import (
    DSH_REASON,
    LABELS,
    expand_harnesses,
    load_host,
    plan_for,
    unavailable,
)
from sharedos.harness.hostconfig import HostConfigError
from sharedos.harness.runtime import McpHarnessRuntime
from sharedos.harness.tools import HarnessUnavailable
from sharedos.identity import ColumnKind


async def run(options: ColumnOptions) -> list[ColumnRun]:
    """One ``ColumnRun`` per CLI; every row is graded not exercised, and the notes say why."""
    return await run_live_columns(options)


async def run_live_columns(options: ColumnOptions) -> list[ColumnRun]:
    """The live column: each CLI with its local tools only, asked to use files.read."""
    host = load_host(options)
    requested = expand_harnesses(options.harnesses, host)
    runs: list[ColumnRun] = []
    seen_kinds: set[str] = set()
    for hid in requested:
        if hid == "dsh":
            runs.append(unavailable(ColumnKind.LIVE, "dsh", None, DSH_REASON))
            continue
        try:
            cfg = host.get(hid)
        except HostConfigError as exc:
            runs.append(unavailable(ColumnKind.LIVE, hid, None, str(exc)))
            continue
        # Pi with pi-mcp-adapter and no MCP server is just Pi: one live column per CLI.
        cli = "pi" if cfg.kind == "pi-adapter" else cfg.kind
        if cli in seen_kinds:
            continue
        seen_kinds.add(cli)
        if cfg.kind == "pi-adapter":
            cfg = cfg.model_copy(update={"kind": "pi", "id": "pi"})
        try:
            runtime = McpHarnessRuntime(cfg, host)
            runtime.version()
        except HarnessUnavailable as exc:
            runs.append(unavailable(ColumnKind.LIVE, cfg.id, None, str(exc)))
            continue
        runs.append(await run_live_column(runtime, options))
    return runs


async def run_live_column(runtime: McpHarnessRuntime, options: ColumnOptions) -> ColumnRun:
    """One CLI, no catalogue: the default group's files.read rows as the request."""
    from sharedos.conformance.environment import build_environment

    manifest = options.manifest
    hid = runtime.harness.id
    name = f"live-{hid}-{uuid.uuid4().hex[:6]}"
    env = build_environment(manifest, options.workdir, policy_paths=options.policy_paths, name=name)
    column = ColumnRun(
        column_id=f"live/{hid}",
        kind=ColumnKind.LIVE,
        label=f"{LABELS.get(hid, hid)} (live)",
        match_by="tool_resource",
        evidence_path=str(env.evidence_path),
    )
    try:
        rows = [r for r in manifest.rows if r.tool_name == "files.read"] or list(manifest.rows)
        plan, notes = plan_for(rows)
        column.notes.extend(notes)
        ctx = env.context(manifest.default_context, f"{name}-turn")
        tool_policy = env.tool_policy(manifest.default_policy)
        result = await runtime.run_turn(
            env.host,
            ctx,
            tool_policy,
            plan=plan,
            workdir=env.workdir / "turns",
            live=True,
            timeout_s=min(runtime.harness.timeout_s, options.timeout_s),
        )
        # Nothing can have reached the kernel: there was no bridge. Read the store
        # anyway, so the claim "zero rows exercised" comes from the evidence.
        records = env.evidence.query()
        column.attempts.extend(attempt_from_record(r) for r in records)
        column.identity = result.identity
        column.tool_policy = tool_policy
        column.duration_s = round(result.duration_s, 3)
        local = ", ".join(result.offered_tools) or "none"
        column.notes.append(
            f"No SharedOS catalogue was configured: the model was offered only the harness's own tools "
            f"({local}). No tool named files.read (or any alias of it) was offered, so "
            f"{len(result.issued)} call(s) could be issued and {len(records)} attempt(s) reached the "
            "kernel: every row is not exercised. This is what the live column measures: without a "
            "catalogue, the kernel cannot be exercised through the harness."
        )
        column.notes.extend(result.notes)
    finally:
        env.close()
    return column
