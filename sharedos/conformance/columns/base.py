"""The column interface: what every conformance column module provides and returns.

A column is a module ``sharedos.conformance.columns.<kind>`` (``scripted``,
``live``, ``mcp``) exposing::

    async def run(options: ColumnOptions) -> list[ColumnRun]

One call may produce several columns (one per vendor shape, one per harness and
transport). The CLI builds ``ColumnOptions`` from its flags and imports the
module lazily; the report grades every ``ColumnRun`` against the manifest.

A column that cannot run here (a harness CLI missing or failing its ``--version``)
still returns a ``ColumnRun`` with ``available=False`` and an
``unavailable_reason``: the report keeps the column and says why, instead of
silently dropping it.

Attempts are the evidence records attributed to the column, normalised into
``Attempt``. Grading matches them to manifest rows by call id when the column
controls ids (``match_by="call_id"`` plus ``row_call_ids``), otherwise on tool
+ canonical resource (``match_by="tool_resource"``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sharedos.conformance.localrows import LocalObservation
from sharedos.conformance.manifest import Manifest
from sharedos.evidence import record_dict
from sharedos.identity import ColumnKind, SystemIdentity
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.redaction import Redactor
from sharedos.toolpolicy import ToolPolicy

MatchBy = Literal["call_id", "tool_resource"]


@dataclass(frozen=True)
class ColumnOptions:
    """How the CLI (or a test) asks a column to run.

    ``shapes`` is used by the scripted column, ``harnesses``/``transport``/``host_config``
    by the live and mcp columns; a column ignores options that are not its own.
    ``workdir`` is a fresh private directory the column may use for sandbox trees,
    evidence databases and harness configuration (the caller deletes it).
    ``policy_paths`` overrides the shipped rules (tests compile a deliberately
    broken copy through it); ``None`` means the shipped rules/ and policy/.
    """

    manifest: Manifest
    workdir: Path
    shapes: tuple[str, ...] = ()
    harnesses: tuple[str, ...] = ()
    transport: str | None = None
    host_config: Path | None = None
    policy_paths: tuple[Path, ...] | None = None
    timeout_s: float = 300.0
    #: scripted column: the most model steps one turn may take before it is broken off
    max_steps: int = 64
    #: the host's secrets (host-configuration env values): scrubbed from everything reported
    secrets: Redactor = field(default_factory=Redactor)
    #: how the columns' evidence stores commit (the host configuration's ``[evidence]``)
    evidence_synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    #: how many columns of one kind may run at once (each in its own environment: its own
    #: kernel, evidence store, sandbox tree, ports and turns); 1 runs them one by one
    jobs: int = 1


class Attempt(BaseModel):
    """One evidence record attributed to a column, reduced to what grading needs.

    ``record`` keeps the full evidence record (JSON) so a failed cell can show it.
    ``wire`` holds what the harness side saw, when the column can observe it;
    grading reads three keys and fails the cell when they disagree with the record:
    ``isError`` (the error flag the harness/model saw, must equal outcome != succeeded),
    ``delivered`` (False: the result never reached the model) and ``contentEqual``
    (False: the model decoded other content than the kernel returned). For a brokered
    tool, ``upstream`` holds what the upstream's own tap saw (``calls``: requests with
    the authorized arguments, ``rawCalls``: with the arguments as written, when they
    differ), and grading fails a refused call the upstream received, or a success it
    did not. Other keys (aliases, harness call ids) are kept as diagnostics.
    """

    model_config = ConfigDict(extra="forbid")

    call_id: str
    tool: str
    resource: str | None = None
    principal: str | None = None
    #: None for an interrupted attempt (an attempt row with no outcome: the host stopped
    #: between the two commits); grading never counts it as passed
    outcome: Outcome | None
    reason: ReasonCode | None = None
    evidence_seq: int | None = None
    record: dict[str, Any] = Field(default_factory=dict)
    wire: dict[str, Any] | None = None
    #: the (context, run policy) names of the manifest group whose turn made the attempt,
    #: when the column knows it: a tool+resource match never takes another turn's attempt
    group: tuple[str, str] | None = None
    #: the manifest row the model issued this call for, when the column knows it (its
    #: script's call, tied to the record): the attempt is that row's, never another's
    row: str | None = None


class ColumnRun(BaseModel):
    """The result of one column: identity, availability, attempts, and how to match them."""

    model_config = ConfigDict(extra="forbid")

    #: stable id used as the report's column key, e.g. ``scripted/responses``, ``mcp/codex/http``
    column_id: str
    kind: ColumnKind
    #: short human header, e.g. ``Responses`` or ``Codex (http)``
    label: str
    identity: SystemIdentity | None = None
    available: bool = True
    unavailable_reason: str | None = None
    match_by: MatchBy = "tool_resource"
    #: manifest row id -> the call id the column issued for it (``match_by="call_id"`` only)
    row_call_ids: dict[str, str] = Field(default_factory=dict)
    attempts: list[Attempt] = Field(default_factory=list)
    tool_policy: ToolPolicy | None = None
    #: free-form notes shown under the column (why a row was not attempted, diagnostics)
    notes: list[str] = Field(default_factory=list)
    #: ``{ID.root}`` placeholder -> the path it stood for in this column's environment
    #: (grading binds the rows with it before matching)
    bindings: dict[str, str] = Field(default_factory=dict)
    #: rows this column could not serve at all -> why (graded not available)
    unavailable_rows: dict[str, str] = Field(default_factory=dict)
    #: harness-local rows: row id -> what the sandbox's side showed after the turn
    #: (None: this column runs no harness with tools of its own, so they are not available)
    local: dict[str, LocalObservation] | None = None
    duration_s: float | None = None
    evidence_path: str | None = None

    def scrubbed(self, secrets: Redactor) -> ColumnRun:
        """This column with every string in it scrubbed of ``secrets`` (see sharedos.redaction)."""
        if not secrets:
            return self
        return ColumnRun.model_validate(secrets.scrub_json(self.model_dump(mode="json")))

    @classmethod
    def unavailable(cls, column_id: str, kind: ColumnKind, label: str, reason: str) -> ColumnRun:
        """A column kept in the report, marked not available, with the reason."""
        return cls(
            column_id=column_id, kind=kind, label=label, available=False, unavailable_reason=reason
        )


#: a column to run: one already settled (a column that cannot run here), or how to start it
ColumnJob = ColumnRun | Callable[[], Awaitable[ColumnRun]]


async def run_at_most(jobs: int, columns: Sequence[ColumnJob]) -> list[ColumnRun]:
    """Run ``columns`` with at most ``jobs`` of them at once; the results keep their order.

    Columns share nothing but the process (each builds its own environment: kernel,
    evidence store, sandbox tree, ports), so the order they finish in changes no grade.
    If one raises, the others are cancelled and the error propagates, as it would have
    one by one.
    """
    gate = asyncio.Semaphore(max(1, jobs))

    async def gated(start: Callable[[], Awaitable[ColumnRun]]) -> ColumnRun:
        async with gate:
            return await start()

    pending: list[ColumnRun | asyncio.Task[ColumnRun]] = []
    try:
        async with asyncio.TaskGroup() as group:
            for column in columns:
                if isinstance(column, ColumnRun):
                    pending.append(column)
                else:
                    pending.append(group.create_task(gated(column)))
    except ExceptionGroup as failed:
        # the caller catches what one column raises, not a group of them (the first
        # failure cancelled the rest, so there is rarely a second)
        raise failed.exceptions[0] from None
    return [p if isinstance(p, ColumnRun) else p.result() for p in pending]


def attempt_from_record(
    record: Any,
    *,
    wire: dict[str, Any] | None = None,
    group: tuple[str, str] | None = None,
    row: str | None = None,
) -> Attempt:
    """Normalise one evidence record (an ``EvidenceRecord`` or its dict form) into an ``Attempt``.

    Reads ``call_id``, ``tool``, ``resource`` (the canonical resource, also looked for
    on the record's decision), ``principal``, ``outcome``, ``reason`` and ``seq``;
    ``group`` is the (context, run policy) of the turn that made it, ``row`` the manifest
    row the model issued it for (when known).
    """
    data = record_dict(record)
    resource = data.get("resource")
    if resource is None and isinstance(data.get("decision"), dict):
        resource = data["decision"].get("resource")
    reason = data.get("reason")
    seq = data.get("seq", data.get("evidence_seq"))
    return Attempt(
        call_id=str(data.get("call_id", "")),
        tool=str(data.get("tool", "")),
        resource=resource,
        principal=data.get("principal"),
        outcome=Outcome(data["outcome"]) if data.get("outcome") is not None else None,
        reason=ReasonCode(reason) if reason else None,
        evidence_seq=int(seq) if seq is not None else None,
        record=data,
        wire=wire,
        group=group,
        row=row,
    )
