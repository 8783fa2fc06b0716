"""The scripted column: every manifest row through each vendor wire shape, against the real kernel.

For each shape, rows are grouped into turns by (context, run policy), in
manifest order. Each turn opens a real ``TurnCatalog`` for its context, a
``ScriptedModel`` plans one call per row (it mints the call ids, so grading
matches by call id), and ``HarnessDriver`` runs the loop: vendor JSON out,
``RuntimeHost.invoke_tool`` on the real kernel with the SQLite evidence store,
vendor JSON back. The column's attempts are the evidence records of its turns,
each with what the scripted model decoded from the wire, so grading also checks
that the harness side saw the answer the kernel gave.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from sharedos.conformance.columns.base import Attempt, ColumnOptions, ColumnRun, attempt_from_record
from sharedos.conformance.environment import ConformanceEnv, column_environment, merge_wire
from sharedos.conformance.manifest import Manifest, Row
from sharedos.evidence.turns import evidence_turn
from sharedos.harness.driver import (
    DriverError,
    DriverTurn,
    HarnessDriver,
    PlannedCall,
    ScriptedModel,
)
from sharedos.harness.shapes import SHAPE_NAMES, get_shape
from sharedos.harness.shapes.neutral import ShapeError, WireShape
from sharedos.identity import ColumnKind, McpSupport, SystemIdentity

#: What the scripted model declares itself as: recorded as what it is, never a real model.
SCRIPTED_MODEL = "sharedos-scripted-model"

PROMPT = (
    "SharedOS conformance: issue each planned tool call exactly once, then stop. "
    "Report every refusal as it was returned."
)


def resolve_shapes(requested: Sequence[str]) -> tuple[str, ...]:
    """Shape names for ``--shape`` values (``all`` or none means every shape); ``ValueError`` if unknown."""
    if not requested or "all" in requested:
        return SHAPE_NAMES
    unknown = [s for s in requested if s not in SHAPE_NAMES]
    if unknown:
        raise ValueError(f"unknown shape(s) {unknown}; choose from {', '.join(SHAPE_NAMES)} or all")
    return tuple(dict.fromkeys(requested))


def _groups(manifest: Manifest) -> list[tuple[str, str, list[tuple[int, Row]]]]:
    groups: dict[tuple[str, str], list[tuple[int, Row]]] = {}
    for i, row in enumerate(manifest.rows):
        groups.setdefault((manifest.context_of(row), manifest.policy_of(row)), []).append((i, row))
    # the default (context, policy) turn first: its catalogHash is the column's
    default = (manifest.default_context, manifest.default_policy)
    ordered = sorted(groups.items(), key=lambda kv: kv[0] != default)
    return [(ctx, pol, rows) for (ctx, pol), rows in ordered]


def call_id_for(shape: str, index: int, row: Row) -> str:
    """The call id the scripted model mints for a row (``[A-Za-z0-9_-]``, as Anthropic requires)."""
    return f"sos_{shape}_{index:02d}_{row.id}"


def identity_for(shape: WireShape, env: ConformanceEnv, catalog_hash: str | None) -> SystemIdentity:
    """SystemIdentity of a scripted shape column."""
    return SystemIdentity(
        harness=f"harness-driver/{shape.name}",
        harness_version=shape.api,
        column=ColumnKind.SCRIPTED,
        declared_model=SCRIPTED_MODEL,
        mcp_support=McpSupport.NONE,
        catalog_hash=catalog_hash,
        policy_bundle_hash=env.policy_bundle_hash,
    )


async def run_shape(
    env: ConformanceEnv, shape_name: str, *, run_tag: str, max_steps: int = 64
) -> ColumnRun:
    """Run every manifest row through one shape; return its column.

    A turn that breaks off (the model kept calling past ``max_steps``, or wire
    JSON that does not fit the shape) is noted; its unrecorded rows are graded
    not exercised.
    """
    manifest = env.manifest
    shape = get_shape(shape_name)
    started = time.perf_counter()
    column_identity: SystemIdentity | None = None
    row_call_ids: dict[str, str] = {}
    attempts: list[Attempt] = []
    notes: list[str] = []
    unavailable = env.unavailable_rows()
    for n, (ctx_name, policy_name, rows) in enumerate(_groups(manifest)):
        # the group's index keeps turn ids apart when names would spell alike
        # (context "a-b" + policy "c" and context "a" + policy "b-c"): each turn's
        # records are read back by its turn id, never another turn's with them
        turn_id = f"{run_tag}-{shape.name}-{n}-{ctx_name}-{policy_name}"
        context = env.context(ctx_name, turn_id)
        tool_policy = env.tool_policy(policy_name)
        plan = []
        for index, row in rows:
            if row.id in unavailable or row.local is not None:
                # a harness-local row needs a harness with tools of its own: the
                # driver has none (graded not available, grading.LOCAL_NEEDS_HARNESS)
                continue
            call_id = call_id_for(shape.name, index, row)
            row_call_ids[row.id] = call_id
            bound = row.bind(env.bindings)
            plan.append(PlannedCall(row.id, call_id, bound.tool_name, dict(bound.arguments)))
        if not plan:
            continue
        async with env.turn(context) as brokered:
            catalog = env.catalog(context, tool_policy)
            identity = identity_for(shape, env, catalog.catalog_hash)
            if column_identity is None:
                column_identity = identity
            model = ScriptedModel(shape, plan, SCRIPTED_MODEL)
            driver = HarnessDriver(
                shape,
                env.host,
                declared_model=SCRIPTED_MODEL,
                identity=identity.as_record(),
                max_steps=max_steps,
            )
            # the turn's opening record now and its seal when the driver's loop ends,
            # as every other column's turn (``open_turn``) has them
            async with evidence_turn(
                env.evidence,
                turn_id=turn_id,
                catalog_hash=catalog.catalog_hash,
                policy_hash=env.host.kernel.policy_hash,
                identity=identity.as_record(),
                owe=env.host.owe_evidence,
                settle=env.host.settle_owed,
                taken=env.host.finish_taken,
                redactor=env.host.host_secrets,
            ):
                try:
                    turn = await driver.run_turn(model, context, tool_policy, catalog, PROMPT)
                except (DriverError, ShapeError) as exc:
                    # the turn broke off: what was recorded is graded, the rest is honestly
                    # left not exercised (never green)
                    notes.append(f"turn {ctx_name}/{policy_name} aborted: {exc}")
                    turn = DriverTurn(exchanges=list(driver.last_exchanges))
            records = env.evidence.query(turn_id=turn_id)
            upstream = brokered.wires(records)
            seen_note = brokered.note(f"turn {ctx_name}/{policy_name}")
            if seen_note is not None and any(r.upstream for _, r in rows):
                notes.append(seen_note)
        sent = {ex.call.call_id: ex for ex in turn.exchanges}
        for record, seen_upstream in zip(records, upstream, strict=True):
            seen = model.seen.get(record.call_id)
            exchange = sent.get(record.call_id)
            wire = {
                "shape": shape.name,
                "wireName": model.wire_names.get(record.call_id),
                "offered": record.tool in model.offered,
                "delivered": seen is not None,
                "isError": seen.is_error if seen is not None else None,
                "contentEqual": (
                    seen is not None
                    and exchange is not None
                    and list(seen.content) == list(exchange.sent.content)
                ),
                "kernelReceivedTool": exchange.call.name if exchange else None,
            }
            attempts.append(
                attempt_from_record(
                    record,
                    wire=merge_wire(wire, seen_upstream),
                    group=(ctx_name, policy_name),
                )
            )
        issued = [p for p in plan if p.call_id in model.wire_names]
        guessed = [p.tool for p in issued if p.tool not in model.offered]
        if guessed:
            shown = ", ".join(sorted({g if len(g) <= 24 else g[:21] + "..." for g in guessed}))
            notes.append(
                f"turn {ctx_name}/{policy_name}: {len(catalog)} tools offered; the model also "
                f"guessed names not offered: {shown}"
            )
    notes.extend(env.upstream_notes())
    if not shape.carries_error_flag:
        notes.append(
            f"{shape.label} has no error flag on tool results: refusals reach the model as output text"
        )
    return ColumnRun(
        column_id=f"scripted/{shape.name}",
        kind=ColumnKind.SCRIPTED,
        label=shape.label,
        identity=column_identity,
        available=True,
        match_by="call_id",
        row_call_ids=row_call_ids,
        attempts=attempts,
        tool_policy=manifest.policies[manifest.default_policy],
        notes=notes,
        duration_s=round(time.perf_counter() - started, 3),
        evidence_path=str(env.evidence_path),
        bindings=env.bindings,
        unavailable_rows=unavailable,
    )


async def run(options: ColumnOptions) -> list[ColumnRun]:
    """Run the scripted column for each requested shape (``options.shapes``; empty = all).

    ``options.max_steps`` bounds each turn's model steps.
    """
    shapes = resolve_shapes(options.shapes)
    max_steps = options.max_steps
    env = column_environment(options, "scripted")
    run_tag = f"scripted-{uuid.uuid4().hex[:8]}"
    try:
        async with env.serving_upstreams():
            return [
                await run_shape(env, name, run_tag=run_tag, max_steps=max_steps) for name in shapes
            ]
    finally:
        env.close()
