"""The mcp column: installed harness CLIs running natively against the permission-filtered
catalogue through a turn bridge (ADR 0014, "The MCP conformance column").

``run`` runs, per harness and transport, one CLI turn per (context, run policy)
group of manifest rows against a fresh kernel environment, and turns the
evidence into a ``ColumnRun``. Rows are matched on tool + canonical resource. A
row whose tool the harness did not offer the model (not in the turn's
catalogue, an unpublished or malformed name) is guessed at by the scripted
model through the harness's own route; when the harness's client refuses the
guess before any tools/call, the row is not exercised and the notes quote the
refusal. A turn whose model was never offered the SharedOS tools at all (dsh's
asynchronous MCP discovery can do that) is said so, and its rows stay not
exercised: it is never retried until green.

Harness-local rows (``local = {...}``) are planned beside the others: the
scripted model has the CLI call its OWN shell, read or write tool. Around each
turn the column reads the guarded secrets, digests the guarded files and counts
the connections of a TCP canary it listens with on 127.0.0.1, then grades those
rows from the sandbox's side (``conformance.localrows``), with the turn's
confinement as its SystemIdentity records it.

Brokered rows (``[upstreams.ID]`` in the manifest) run over both transports:
the column's environment starts the upstream broker in this process, and each
turn is opened with ``env.turn(context)`` so its catalogue holds the brokered
tools. Over stdio the bridge process the harness launches relays every call
to this process (``sharedos.bridge.relay``), which holds the pooled upstream
sessions, so the same rows run with the same re-authorization and evidence.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from sharedos.confine import ConfinementUnavailable, ManagedRootVisible
from sharedos.conformance.columns.base import (
    ColumnJob,
    ColumnOptions,
    ColumnRun,
    attempt_from_record,
    run_at_most,
)
from sharedos.conformance.columns.harnesses import (
    clip,
    expand_harnesses,
    expand_transports,
    label_for,
    load_host,
    plan_for,
    runtime_for,
    short,
    turn_groups,
    unavailable,
)
from sharedos.conformance.environment import column_environment, merge_wire
from sharedos.conformance.localrows import (
    Canary,
    GuardBaseline,
    LocalRowTurn,
    confinement_of,
    local_row_turns,
    observe_turn,
    turn_baseline,
)
from sharedos.harness.adapters import HarnessUnavailable, get_adapter
from sharedos.harness.correlate import CallLink, correlate
from sharedos.harness.hostconfig import HostConfigError
from sharedos.harness.runtime import HarnessTurnResult, McpHarnessRuntime
from sharedos.identity import ColumnKind
from sharedos.testing.scripted_model import ScriptedAttempt


async def run(options: ColumnOptions) -> list[ColumnRun]:
    """One ``ColumnRun`` per harness × transport; a harness that cannot run is kept, unavailable."""
    host = load_host(options)
    runs: list[ColumnJob] = []
    for hid in expand_harnesses(options.harnesses, host):
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
        runs.extend(partial(run_mcp_column, runtime, options, t) for t in transports)
    return await run_at_most(options.jobs, runs)


async def run_mcp_column(
    runtime: McpHarnessRuntime, options: ColumnOptions, transport: str
) -> ColumnRun:
    """All manifest rows through one harness over one transport, against a fresh kernel."""
    from sharedos.bridge.turnfile import StdioLaunch

    hid = runtime.harness.id
    name = f"mcp-{hid}-{transport}-{uuid.uuid4().hex[:6]}"
    env = column_environment(options, name)
    # stdio: a relayed bridge (the turn's directory under the column's own workdir)
    stdio_launch = StdioLaunch(directory=env.workdir) if transport == "stdio" else None
    unavailable_rows = env.unavailable_rows()
    # the host's TCP canary (bound now, so its port is known; closed with the column)
    canary = Canary()
    # harness-local rows also name the files.* root and the canary's port
    bindings = {
        **env.bindings,
        "files.root": str(env.sandbox_root),
        "canary.port": str(canary.port),
    }
    column = ColumnRun(
        column_id=f"mcp/{hid}/{transport}",
        kind=ColumnKind.MCP,
        label=f"{label_for(runtime.harness.kind)} ({transport})",
        match_by="tool_resource",
        evidence_path=str(env.evidence_path),
        bindings=bindings,
        unavailable_rows=unavailable_rows,
        local={},
    )
    t0 = time.perf_counter()
    try:
        canary.start()
        async with env.serving_upstreams():
            for ctx_name, pol_name, rows in turn_groups(options.manifest):
                rows = [r for r in rows if r.id not in unavailable_rows]
                served = [r.bind(bindings if r.local else env.bindings) for r in rows]
                if not served:
                    continue  # nothing this column can serve in that turn: no harness launch
                plan, plan_notes = plan_for(served, canary_port=canary.port)
                column.notes.extend(plan_notes)
                local_rows = local_row_turns(rows, bindings)
                guards = turn_baseline(local_rows, canary)
                tool_policy = env.tool_policy(pol_name)
                context = env.context(
                    ctx_name, f"{name}-{ctx_name}-{pol_name}-{uuid.uuid4().hex[:8]}"
                )
                try:
                    async with env.turn(context) as brokered:
                        result = await runtime.run_turn(
                            env.host,
                            context,
                            tool_policy,
                            plan=plan,
                            workdir=env.workdir / "turns",
                            transport=transport,
                            stdio_launch=stdio_launch,
                            timeout_s=min(runtime.harness.timeout_s, options.timeout_s),
                            managed_roots=env.managed_roots(),
                            upstream_confinement=brokered.upstreams.confinement()
                            if brokered.upstreams is not None
                            else None,
                        )
                        upstream = brokered.wires(result.evidence)
                        seen = brokered.note(f"turn {ctx_name}/{pol_name}")
                except HarnessUnavailable as exc:
                    return unavailable(ColumnKind.MCP, hid, transport, str(exc))
                except (ConfinementUnavailable, ManagedRootVisible) as exc:
                    # a strict column that cannot be confined is not run unconfined
                    return unavailable(
                        ColumnKind.MCP, hid, transport, f"the harness cannot be confined: {exc}"
                    )
                # a harness may echo a host credential back in a reply: scrub before any clipping
                result.issued = [
                    replace(c, reply=options.secrets.scrub(c.reply)) if c.reply else c
                    for c in result.issued
                ]
                if column.identity is None:
                    column.identity = result.identity
                    column.tool_policy = tool_policy
                _collect(column, result, ctx_name, pol_name, plan, upstream)
                if seen is not None and any(r.upstream and not r.local for r in served):
                    column.notes.append(seen)
                if local_rows:
                    _collect_local(
                        column,
                        result,
                        local_rows,
                        guards,
                        canary,
                        ctx_name,
                        pol_name,
                        tool_policy.mode.value,
                    )
            column.notes.extend(env.upstream_notes())
    finally:
        canary.close()
        env.close()
    column.duration_s = round(time.perf_counter() - t0, 3)
    return column


def _collect(
    column: ColumnRun,
    result: HarnessTurnResult,
    ctx_name: str,
    pol_name: str,
    plan: Sequence[ScriptedAttempt],
    upstream: Sequence[dict[str, Any] | None] | None = None,
) -> None:
    """Add one turn's attempts and notes to the column; ``upstream`` holds, per evidence
    record, what a brokered upstream's tap saw of it."""
    group = f"turn {ctx_name}/{pol_name}"
    # harness-local calls never reach the kernel: they are graded by _collect_local
    catalogue_calls = [c for c in result.issued if c.local is None]
    result = replace(result, issued=catalogue_calls)
    plan = [a for a in plan if a.local is None]
    links = correlate(result.evidence, result.issued, result.output.tool_events)
    seen = list(upstream) if upstream is not None else [None] * len(links)
    for record, link, up in zip(result.evidence, links, seen, strict=True):
        column.attempts.append(
            attempt_from_record(
                record,
                wire=merge_wire(_wire(link), up),
                group=(ctx_name, pol_name),
                row=_row_of(link),
            )
        )
    _note_calls_without_attempts(column, result, links, group)
    _note_attempts_without_calls(column, links, group)
    _note_turn(column, result, plan, group)
    column.notes.extend(f"{group}: {n}" for n in result.notes)


def _collect_local(
    column: ColumnRun,
    result: HarnessTurnResult,
    rows: Sequence[LocalRowTurn],
    guards: GuardBaseline,
    canary: Canary,
    ctx_name: str,
    pol_name: str,
    mode: str,
) -> None:
    """Grade-ready observations of the turn's harness-local rows, and a note for each."""
    group = f"turn {ctx_name}/{pol_name}"
    label, confined = confinement_of(result.identity)
    shown = set(result.aliases_shown.values())
    observed, notes = observe_turn(
        rows,
        base=guards,
        canary=canary,
        turn_dir=result.turn_dir,
        texts={},
        issued=result.issued,
        offered_tools=[t for t in result.offered_tools if t not in shown],
        policy=pol_name,
        policy_mode=mode,
        confinement=label,
        confined=confined,
    )
    assert column.local is not None
    column.local.update(observed)
    column.notes.extend(f"{group}: {n}" for n in notes)
    for row_id, obs in observed.items():
        if not obs.issued:
            column.notes.append(
                f"{group}: {row_id}: not attempted: the harness offered no {obs.kind} tool of "
                "its own that could make it"
            )
            continue
        said = f'; it answered the model "{obs.reply}"' if obs.reply is not None else ""
        column.notes.append(
            f"{group}: {row_id}: the model called the harness's own {obs.harness_tool} with "
            f"{obs.arguments}{said}. Sandbox side: {obs.actual()}. Stopped by: {obs.stopped_by}"
        )


def _row_of(link: CallLink) -> str | None:
    """The manifest row the model issued this record's call for, when the tie is sure: by
    the harness's own correlation id, or by identical arguments. A harness that altered
    one row's arguments and dropped another's call then never lends the first row's record
    to the second; a tie made on the tool alone (a harness with no id that coerced the
    arguments) may be another row's call, so it names no row (tool + resource decides)."""
    issued = link.issued
    if issued is None:
        return None
    by_id = link.correlation is not None and link.correlation[1] == issued.call_id
    return issued.key if by_id or not link.arguments_changed else None


def _wire(link: CallLink) -> dict[str, Any]:
    """What the harness side saw of one attempt, for the report (grading reads ``isError``)."""
    event, issued = link.event, link.issued
    wire: dict[str, Any] = {
        "alias": (issued.alias if issued else None) or (event.alias if event else None),
        "harnessCallId": (event.call_id if event else None) or (issued.call_id if issued else None),
        "correlation": dict([link.correlation]) if link.correlation else None,
        "argumentsChanged": link.arguments_changed,
    }
    if event is not None and event.is_error is not None:
        wire["isError"] = event.is_error
    return wire


def _note_calls_without_attempts(
    column: ColumnRun, result: HarnessTurnResult, links: Sequence[CallLink], group: str
) -> None:
    """Calls the model made that never reached the kernel (the harness refused them)."""
    linked = {link.issued.call_id for link in links if link.issued is not None}
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
                f"{group}: {call.key}: the model called {call.alias} with {dict(call.arguments)}, but "
                f"no attempt reached the kernel (the harness refused it client-side{answered})"
            )
    if refused_guesses:
        _note_client_refusal(column, result)


def _note_attempts_without_calls(column: ColumnRun, links: Sequence[CallLink], group: str) -> None:
    """Attempts the model did not make as written (altered or unknown to it)."""
    for link in links:
        rec, issued = link.record, link.issued
        if issued is None:
            column.notes.append(
                f"{group}: the kernel received {short(str(rec.get('tool')))} with "
                f"{rec.get('arguments')!r}, which the model did not send"
            )
        elif link.arguments_changed:
            column.notes.append(
                f"{group}: {issued.key}: the model called {issued.alias} with "
                f"{dict(issued.arguments)!r}; the harness changed the arguments to "
                f"{rec.get('arguments')!r} before the call reached the kernel, so the row's "
                "attempt was not made as written"
            )


def _note_turn(
    column: ColumnRun, result: HarnessTurnResult, plan: Sequence[ScriptedAttempt], group: str
) -> None:
    """The turn's summary, what was not attempted and why, and the harness's own tools."""
    attempted = {c.key for c in result.issued}
    skipped = [a for a in plan if a.key not in attempted]
    shown = ", ".join(f"{alias} → {name}" for name, alias in sorted(result.aliases_shown.items()))
    column.notes.append(
        f"{group}: catalogHash {result.identity.catalog_hash}; {len(result.issued)} call(s) issued, "
        f"{len(result.evidence)} reached the kernel; {result.duration_s:.1f} s; "
        f"names shown to the model: {shown or 'none'}"
    )
    if skipped and plan and not result.saw_catalogue and result.model_requests:
        column.notes.append(
            f"{group}: the model was never offered the SharedOS tools in this turn "
            f"({result.model_requests} model request(s), none carried an mcp__sharedos__ tool): "
            "the harness's MCP client had not registered them when the turn was assembled. "
            f"Not exercised, not retried: {', '.join(sorted({a.key for a in skipped}))}"
        )
    elif skipped:
        why = ", ".join(sorted({f"{a.key} ({short(a.tool)})" for a in skipped}))
        column.notes.append(
            f"{group}: not attempted, because the harness offered the model no tool by that name "
            f"(not in this turn's catalogue): {why}"
        )
    shown_aliases = set(result.aliases_shown.values())
    local = [t for t in result.offered_tools if t not in shown_aliases]
    if local and not any(n.startswith("harness-local tools") for n in column.notes):
        conf = result.identity.confinement
        where = (
            f"they ran inside the harness's sandbox ({conf.label()}), which shows no managed root"
            if conf is not None and conf.confined
            else "the run policy's strict claim does not cover them; the harness was "
            + (conf.label() if conf is not None else "not confined")
        )
        column.notes.append(
            "harness-local tools the CLI also offered the model (its own, not authorized by "
            f"SharedOS call by call; {where}): {', '.join(local)}"
        )
    if result.port_closed_after_turn is False:
        column.notes.append(
            f"{group}: WARNING: the bridge port still accepted connections after the turn"
        )


def _note_client_refusal(column: ColumnRun, result: HarnessTurnResult) -> None:
    """Once per column: the finding that this harness's client refuses unoffered names."""
    if any(n.startswith("finding about the harness") for n in column.notes):
        return
    try:
        how = get_adapter(result.identity.harness).client_route
    except HarnessUnavailable:
        how = "it refused the calls client-side"
    column.notes.append(
        f"finding about the harness: {column.label.split(' (')[0]}'s MCP client refuses tool "
        f"names it was not offered ({how}), before any tools/call is sent. The rows naming an "
        "unpublished tool, a malformed name or a tool outside the run policy therefore cannot be "
        "exercised through this harness and stay not exercised: that is a property of the "
        "harness's client, not a gap in SharedOS (the kernel's refusal of those names is "
        "exercised in the scripted columns)"
    )
