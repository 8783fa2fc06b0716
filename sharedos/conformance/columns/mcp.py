"""The mcp column: installed harness CLIs running natively against the permission-filtered
catalogue through a turn bridge (ADR 0014, "The MCP conformance column").

``run`` runs, per harness and transport, one CLI turn per (context, run policy)
group of manifest rows against a fresh kernel environment, and turns the
evidence into a ``ColumnRun``. Rows are matched on tool + canonical resource. A
row whose tool the harness did not offer the model (not in the turn's
catalogue, an unpublished or malformed name) is guessed at by the scripted
model through the harness's own route; when the harness's client refuses the
guess before any tools/call, the row is not exercised and the notes quote the
refusal.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from sharedos.conformance.columns.base import ColumnOptions, ColumnRun, attempt_from_record
from sharedos.conformance.columns.harnesses import (
    DSH_REASON,
    LABELS,
    clip,
    expand_harnesses,
    expand_transports,
    load_host,
    plan_for,
    policy_paths,
    runtime_for,
    short,
    turn_groups,
    unavailable,
)
from sharedos.harness.correlate import correlate
from sharedos.harness.hostconfig import HostConfigError
from sharedos.harness.runtime import HarnessTurnResult, McpHarnessRuntime
from sharedos.harness.scripted_model import ScriptedAttempt
from sharedos.harness.tools import HarnessUnavailable
from sharedos.identity import ColumnKind


async def run(options: ColumnOptions) -> list[ColumnRun]:
    """One ``ColumnRun`` per harness × transport; a harness that cannot run is kept, unavailable."""
    return await run_mcp_columns(options)


async def run_mcp_columns(options: ColumnOptions) -> list[ColumnRun]:
    """One ``ColumnRun`` per harness × transport (see module doc)."""
    host = load_host(options)
    runs: list[ColumnRun] = []
    for hid in expand_harnesses(options.harnesses, host):
        if hid == "dsh":
            runs.append(unavailable(ColumnKind.MCP, "dsh", None, DSH_REASON))
            continue
        try:
            cfg = host.get(hid)
            transports = expand_transports(options.transport, cfg.transport)
        except HostConfigError as exc:
            runs.append(unavailable(ColumnKind.MCP, hid, None, str(exc)))
            continue
        try:
            runtime = runtime_for(host, hid)
        except HarnessUnavailable as exc:
            runs.extend(unavailable(ColumnKind.MCP, hid, t, str(exc)) for t in transports)
            continue
        for transport in transports:
            runs.append(await run_mcp_column(runtime, options, transport))
    return runs


async def run_mcp_column(
    runtime: McpHarnessRuntime, options: ColumnOptions, transport: str
) -> ColumnRun:
    """All manifest rows through one harness over one transport, against a fresh kernel."""
    from sharedos.bridge.turnfile import StdioLaunch
    from sharedos.conformance.environment import build_environment

    hid = runtime.harness.id
    manifest = options.manifest
    name = f"mcp-{hid}-{transport}-{uuid.uuid4().hex[:6]}"
    env = build_environment(manifest, options.workdir, policy_paths=options.policy_paths, name=name)
    stdio_launch = None
    if transport == "stdio":
        stdio_launch = StdioLaunch(
            rules=policy_paths(options),
            evidence_db=env.evidence_path,
            tool_sets=("files",),
            sandbox_root=env.sandbox_root,
            directory=env.workdir,
        )
    column = ColumnRun(
        column_id=f"mcp/{hid}/{transport}",
        kind=ColumnKind.MCP,
        label=f"{LABELS.get(hid, hid)} ({transport})",
        match_by="tool_resource",
        evidence_path=str(env.evidence_path),
    )
    t0 = time.perf_counter()
    try:
        for ctx_name, pol_name, rows in turn_groups(manifest):
            plan, plan_notes = plan_for(rows)
            column.notes.extend(plan_notes)
            turn_id = f"{name}-{ctx_name}-{pol_name}-{uuid.uuid4().hex[:8]}"
            context = env.context(ctx_name, turn_id)
            tool_policy = env.tool_policy(pol_name)
            timeout = min(runtime.harness.timeout_s, options.timeout_s)
            try:
                result = await runtime.run_turn(
                    env.host,
                    context,
                    tool_policy,
                    plan=plan,
                    workdir=env.workdir / "turns",
                    transport=transport,
                    stdio_launch=stdio_launch,
                    timeout_s=timeout,
                )
            except HarnessUnavailable as exc:
                return unavailable(ColumnKind.MCP, hid, transport, str(exc))
            if column.identity is None:
                column.identity = result.identity
                column.tool_policy = tool_policy
            _collect(column, result, ctx_name, pol_name, plan)
    finally:
        env.close()
    column.duration_s = round(time.perf_counter() - t0, 3)
    return column


def _collect(
    column: ColumnRun,
    result: HarnessTurnResult,
    ctx_name: str,
    pol_name: str,
    plan: Sequence[ScriptedAttempt],
) -> None:
    links = correlate(result.evidence, result.issued, result.output.tool_events)
    for record, link in zip(result.evidence, links, strict=True):
        event = link.get("event") or {}
        issued = link.get("issued") or {}
        wire: dict[str, Any] = {
            "alias": issued.get("alias") or event.get("alias"),
            "harnessCallId": event.get("callId") or issued.get("callId"),
            "correlation": link.get("correlation"),
            "argumentsChanged": bool(link.get("argumentsChanged")),
        }
        if event.get("isError") is not None:
            wire["isError"] = event["isError"]
        column.attempts.append(attempt_from_record(record, wire=wire))
    linked = {(link.get("issued") or {}).get("callId") for link in links}
    group = f"turn {ctx_name}/{pol_name}"
    refused_guesses = 0
    for call in result.issued:
        if call.call_id in linked:
            continue
        answered = f' and answered the model "{clip(call.reply, 160)}"' if call.reply else ""
        if call.guessed:
            refused_guesses += 1
            column.notes.append(
                f"{group}: {call.key}: the model guessed {clip(call.alias, 60)} (a name the harness "
                f"did not offer it) with {dict(call.arguments)}; the harness's client refused it"
                f"{answered}; the evidence store holds no attempt for it (the bridge records every "
                "tools/call it receives), so the row is not exercised"
            )
        else:
            column.notes.append(
                f"{group}: {call.key}: the model called {call.alias} with {dict(call.arguments)}, but no "
                f"attempt reached the kernel (the harness refused it client-side{answered})"
            )
    if refused_guesses:
        _note_client_refusal(column, result)
    for record, link in zip(result.evidence, links, strict=True):
        rec = record.to_dict() if hasattr(record, "to_dict") else dict(record)
        issued = link.get("issued")
        if issued is None:
            column.notes.append(
                f"{group}: the kernel received {short(str(rec.get('tool')))} with "
                f"{rec.get('arguments')!r}, which the model did not send"
            )
        elif link.get("argumentsChanged"):
            column.notes.append(
                f"{group}: {issued['key']}: the model called {issued['alias']} with {issued['arguments']!r}; "
                f"the harness changed the arguments to {rec.get('arguments')!r} before the call reached "
                "the kernel, so the row's attempt was not made as written"
            )
    attempted = {c.key for c in result.issued}
    skipped = [a for a in plan if a.key not in attempted]
    shown = ", ".join(f"{alias} → {name}" for name, alias in sorted(result.aliases_shown.items()))
    column.notes.append(
        f"{group}: catalogHash {result.identity.catalog_hash}; {len(result.issued)} call(s) issued, "
        f"{len(result.evidence)} reached the kernel; {result.duration_s:.1f} s; "
        f"names shown to the model: {shown or 'none'}"
    )
    if skipped:
        why = ", ".join(sorted({f"{a.key} ({short(a.tool)})" for a in skipped}))
        column.notes.append(
            f"{group}: not attempted, because the harness offered the model no tool by that name "
            f"(not in this turn's catalogue): {why}"
        )
    shown_aliases = set(result.aliases_shown.values())
    local = [t for t in result.offered_tools if t not in shown_aliases]
    if local and not any(n.startswith("harness-local tools") for n in column.notes):
        column.notes.append(
            "harness-local tools the CLI also offered the model (its own, not authorized by "
            f"SharedOS; the run policy's strict claim does not cover them): {', '.join(local)}"
        )
    if result.port_closed_after_turn is False:
        column.notes.append(
            f"{group}: WARNING: the bridge port still accepted connections after the turn"
        )
    column.notes.extend(f"{group}: {n}" for n in result.notes)


#: How each harness's client handles a name it did not offer (measured; docs/harnesses.md).
CLIENT_ROUTES = {
    "claude-code": "it answers a call to an unoffered mcp__sharedos__ name with a tool_use_error",
    "codex": "it answers a call in the mcp__sharedos namespace to an unlisted name as an "
    "unsupported call",
    "pi": "its built-in MCP client answers a call to an unoffered mcp__sharedos__ name with "
    "'Tool ... not found'",
    "pi-adapter": "even its `mcp` proxy tool, which takes any name as a string, resolves the "
    "name against the tools it listed from the server and answers 'Tool ... not found' "
    "instead of forwarding it",
}


def _note_client_refusal(column: ColumnRun, result: HarnessTurnResult) -> None:
    """Once per column: the finding that this harness's client refuses unoffered names."""
    if any(n.startswith("finding about the harness") for n in column.notes):
        return
    how = CLIENT_ROUTES.get(result.identity.harness, "it refused the calls client-side")
    column.notes.append(
        f"finding about the harness: {column.label.split(' (')[0]}'s MCP client refuses tool "
        f"names it was not offered ({how}), before any tools/call is sent. The rows naming an "
        "unpublished tool, a malformed name or a tool outside the run policy therefore cannot be "
        "exercised through this harness and stay not exercised: that is a property of the "
        "harness's client, not a gap in SharedOS (the kernel's refusal of those names is "
        "exercised in the scripted columns)"
    )
