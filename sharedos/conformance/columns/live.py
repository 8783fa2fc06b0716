"""The live column: each installed CLI with its own local tools and no SharedOS catalogue.

It exists to show, from the evidence, what a harness without the catalogue
exercises in the kernel: nothing. No call can reach the kernel, so every row is
not exercised; the notes say which tools the model was offered instead.
"""

from __future__ import annotations

import uuid
from functools import partial

from sharedos.confine import ConfinementUnavailable, ManagedRootVisible
from sharedos.conformance.columns.base import (
    ColumnJob,
    ColumnOptions,
    ColumnRun,
    attempt_from_record,
    run_at_most,
)
from sharedos.conformance.columns.harnesses import (
    expand_harnesses,
    label_for,
    load_host,
    plan_for,
    unavailable,
)
from sharedos.conformance.environment import column_environment
from sharedos.harness.adapters import HarnessUnavailable, get_adapter
from sharedos.harness.hostconfig import HarnessConfig, HostConfigError
from sharedos.harness.runtime import McpHarnessRuntime
from sharedos.identity import ColumnKind


async def run(options: ColumnOptions) -> list[ColumnRun]:
    """One ``ColumnRun`` per CLI; every row is graded not exercised, and the notes say why."""
    host = load_host(options)
    runs: list[ColumnJob] = []
    seen_clis: set[str] = set()
    for hid in expand_harnesses(options.harnesses, host):
        try:
            cfg = host.get(hid)
            cli = get_adapter(cfg.kind).live_kind
        except (HostConfigError, HarnessUnavailable) as exc:
            runs.append(unavailable(ColumnKind.LIVE, hid, None, str(exc)))
            continue
        # Pi with pi-mcp-adapter and no MCP server is just Pi: one live column per CLI.
        if cli in seen_clis:
            continue
        seen_clis.add(cli)
        if cli != cfg.kind:
            cfg = _as_kind(cfg, cli)
        try:
            runtime = McpHarnessRuntime(cfg, host)
            runtime.version()
        except HarnessUnavailable as exc:
            runs.append(unavailable(ColumnKind.LIVE, cfg.id, None, str(exc)))
            continue
        runs.append(partial(_live_or_unavailable, runtime, options))
    return await run_at_most(options.jobs, runs)


async def _live_or_unavailable(runtime: McpHarnessRuntime, options: ColumnOptions) -> ColumnRun:
    """The live column of one CLI, or the column kept unavailable when it cannot be confined."""
    try:
        return await run_live_column(runtime, options)
    except (ConfinementUnavailable, ManagedRootVisible) as exc:
        why = f"the harness cannot be confined: {exc}"
        return unavailable(ColumnKind.LIVE, runtime.harness.id, None, why)


def _as_kind(cfg: HarnessConfig, kind: str) -> HarnessConfig:
    """The same launch settings for the CLI the live column runs instead (pi-adapter → pi)."""
    return cfg.model_copy(update={"kind": kind, "id": kind})


async def run_live_column(runtime: McpHarnessRuntime, options: ColumnOptions) -> ColumnRun:
    """One CLI, no catalogue: the default group's files.read rows as the request."""
    manifest = options.manifest
    hid = runtime.harness.id
    name = f"live-{hid}-{uuid.uuid4().hex[:6]}"
    env = column_environment(
        options, name, no_upstreams="the live column configures no SharedOS catalogue"
    )
    column = ColumnRun(
        column_id=f"live/{hid}",
        kind=ColumnKind.LIVE,
        label=f"{label_for(runtime.harness.kind)} (live)",
        match_by="tool_resource",
        evidence_path=str(env.evidence_path),
    )
    try:
        rows = [r for r in manifest.rows if r.tool_name == "files.read"] or list(manifest.rows)
        plan, notes = plan_for(rows)
        column.notes.extend(notes)
        tool_policy = env.tool_policy(manifest.default_policy)
        result = await runtime.run_turn(
            env.host,
            env.context(manifest.default_context, f"{name}-turn"),
            tool_policy,
            plan=plan,
            workdir=env.workdir / "turns",
            live=True,
            timeout_s=min(runtime.harness.timeout_s, options.timeout_s),
            managed_roots=env.managed_roots(),
        )
        # Nothing can have reached the kernel: there was no bridge. Read the store
        # anyway, so the claim "zero rows exercised" comes from the evidence.
        records = env.evidence.query()
        group = (manifest.default_context, manifest.default_policy)
        column.attempts.extend(attempt_from_record(r, group=group) for r in records)
        column.identity = result.identity
        column.tool_policy = tool_policy
        column.duration_s = round(result.duration_s, 3)
        local = ", ".join(result.offered_tools) or "none"
        column.notes.append(
            f"No SharedOS catalogue was configured: the model was offered only the harness's own "
            f"tools ({local}). No tool named files.read (or any alias of it) was offered, so "
            f"{len(result.issued)} call(s) could be issued and {len(records)} attempt(s) reached "
            "the kernel: every row is not exercised. This is what the live column measures: "
            "without a catalogue, the kernel cannot be exercised through the harness."
        )
        column.notes.extend(result.notes)
    finally:
        env.close()
    return column
