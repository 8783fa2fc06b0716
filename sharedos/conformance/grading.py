"""Grading: one cell per (row, column) — passed, failed, or not exercised.

* ``passed``: the row was exercised and every matching attempt had the expected
  outcome and reason (and, where the column observed the wire, the harness saw
  the same answer the kernel gave).
* ``failed``: exercised, but some matching attempt differs; the cell carries
  expected vs actual and the evidence record.
* ``not_exercised``: no matching attempt in the evidence. Never green.
* ``not_available``: the column could not run here at all (e.g. dsh), or could
  not serve this row (a brokered row in a column without the upstream; the
  column's ``unavailable_rows`` says why).
* ``informational``: a harness-local row under an OPEN run policy: the harness
  was not confined by design, so what happened is reported, never green as a
  refusal.

Harness-local rows (``local = {...}``) never reach the kernel: they are graded
from the sandbox's side (``ColumnRun.local``, see ``conformance.localrows``).
Under a strict run policy a cell passes when the harness made the attempt and
nothing leaked, changed or reached the canary, and fails when something did
(whichever layer was supposed to stop it); a row the harness never attempted is
not exercised.

Matching: by call id when the column controls ids (``ColumnRun.row_call_ids``),
otherwise on tool + canonical resource (+ principal when the record has one), among
the attempts of the row's own turn (its context and run policy, ``Attempt.group``)
and never an attempt the model issued for another row (``Attempt.row``);
a row without a resource (unknown tool, bad arguments, unresolvable path) is
matched on tool + the exact arguments instead, and when several rows share a
tool + resource, attempts carrying a row's exact arguments are preferred (and an
attempt carrying another row's exact arguments belongs to that row only).
Rows are bound to the column first: a ``{ID.root}`` placeholder stands for the
path of the column's own upstream fixture (``ColumnRun.bindings``).

For a brokered tool, the upstream's own input (a tap in front of the real
server) is part of the evidence: a call the kernel refused must never have
reached the upstream, and a call the kernel recorded as succeeded must have
reached it with the arguments that were authorized (the canonical resource,
not the spelling the harness sent).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sharedos.conformance.columns.base import Attempt, ColumnRun
from sharedos.conformance.manifest import Manifest, Row
from sharedos.outcomes import Outcome, ReasonCode, outcome_for_reason


class Grade(StrEnum):
    """A cell's grade."""

    PASSED = "passed"
    FAILED = "failed"
    NOT_EXERCISED = "not_exercised"
    NOT_AVAILABLE = "not_available"
    INFORMATIONAL = "informational"


SYMBOLS: dict[Grade, str] = {
    Grade.PASSED: "✓",
    Grade.FAILED: "✗",
    Grade.NOT_EXERCISED: "○",
    Grade.NOT_AVAILABLE: "–",
    Grade.INFORMATIONAL: "i",
}

#: Why a column without a harness CLI of its own cannot serve a harness-local row.
LOCAL_NEEDS_HARNESS = {
    "scripted": (
        "a harness-local row needs a harness with tools of its own: in the scripted column "
        "HarnessDriver plays the harness and has no shell, file or network tool (these rows "
        "run in the mcp columns)"
    ),
    "live": (
        "harness-local rows run in the mcp columns, where the scripted model makes the CLI "
        "call its own tools under the row's run policy; the live column plays no script"
    ),
}


class Cell(BaseModel):
    """One graded cell."""

    model_config = ConfigDict(extra="forbid")

    row_id: str
    column_id: str
    grade: Grade
    expected: str
    actual: str | None = None
    detail: str = ""
    attempts: int = 0
    evidence: list[dict[str, Any]] = Field(default_factory=list)


def _actual(attempt: Attempt) -> str:
    if attempt.outcome is None:
        return "interrupted"
    if attempt.outcome is Outcome.SUCCEEDED or attempt.reason is None:
        return attempt.outcome.value
    return f"{attempt.outcome.value}/{attempt.reason.value}"


def matching_attempts(row: Row, manifest: Manifest, column: ColumnRun) -> list[Attempt]:
    """The column's attempts that belong to ``row`` (see the module docstring for the rules)."""
    row = row.bind(column.bindings)
    if column.match_by == "call_id":
        call_id = column.row_call_ids.get(row.id)
        if call_id is None:
            return []
        return [a for a in column.attempts if a.call_id == call_id]
    if "tool_resource" not in row.match:
        return []
    principal = manifest.contexts[manifest.context_of(row)].principal
    group = (manifest.context_of(row), manifest.policy_of(row))
    out = []
    for a in column.attempts:
        if a.tool != row.tool_name:
            continue
        if a.row is not None and a.row != row.id:
            # the model issued it for another row (the harness may have altered its
            # arguments on the way): the same tool and resource says nothing about this one
            continue
        if a.group is not None and a.group != group:
            # made in another row group's turn (another context or run policy): the
            # same tool and resource there says nothing about this row
            continue
        if row.resource is not None and a.resource != row.resource:
            continue
        if row.resource is None:
            # rows without a resource (unknown tool, bad arguments, unresolvable path)
            # are told apart by their arguments, exactly as the row states them
            if a.resource is not None:
                continue
            if "arguments" in a.record and a.record["arguments"] != row.arguments:
                continue
        if a.principal is not None and a.principal != principal:
            continue
        out.append(a)
    # two rows can share tool + resource (a direct read of /private/a.txt and a
    # traversal that canonicalizes to it): attempts with the row's exact arguments
    # are the better match when there are any; an attempt carrying another row's
    # exact arguments is that row's, never this one's
    exact = [a for a in out if a.record.get("arguments") == row.arguments]
    if exact or row.match_arguments:
        return exact
    others = [
        other.bind(column.bindings).arguments
        for other in manifest.rows
        if other.id != row.id
        and other.local is None
        and other.tool_name == row.tool_name
        and (manifest.context_of(other), manifest.policy_of(other)) == group
    ]
    return [a for a in out if a.record.get("arguments") not in others]


def _wire_problem(attempt: Attempt) -> str | None:
    """What the harness side saw must be what the kernel answered."""
    wire = attempt.wire
    if wire is None:
        return None
    if wire.get("delivered") is False:
        return "the result never reached the model"
    if wire.get("contentEqual") is False:
        return "the result content the model decoded differs from what the kernel returned"
    is_error = wire.get("isError")
    if is_error is not None and bool(is_error) != (attempt.outcome is not Outcome.SUCCEEDED):
        return f"the model saw isError={is_error} for a {_actual(attempt)} outcome"
    return _upstream_problem(attempt)


#: Outcomes after which nothing may have been forwarded upstream: no handler ran, or
#: the forwarder refused the call's path (a link on disk) before forwarding it.
_NOT_FORWARDED = {
    ReasonCode.INVALID_ARGUMENTS,
    ReasonCode.EVIDENCE_UNAVAILABLE,
    ReasonCode.LINKED_RESOURCE,
}


def _upstream_account(attempt: Attempt) -> str | None:
    """For a passed brokered cell: what the upstream's own input showed (the report says it)."""
    up = (attempt.wire or {}).get("upstream")
    if not isinstance(up, dict):
        return None
    name = up.get("upstream", "the upstream")
    if attempt.outcome is Outcome.SUCCEEDED:
        canonical = (
            " (the canonical resource, not the spelling sent)" if up.get("rawCalls") == 0 else ""
        )
        return f"upstream {name} received it with the authorized arguments{canonical}{_served(attempt)}"
    return f"upstream {name} received nothing for it (its tap log)"


def _served(attempt: Attempt) -> str:
    """`` under credential X``: which credential identity the evidence says served the call."""
    diag = attempt.record.get("diagnostics")
    served = diag.get("servedBy") if isinstance(diag, dict) else None
    if not isinstance(served, dict) or not served.get("credential"):
        return ""
    return f", under credential {served['credential']}"


def _upstream_problem(attempt: Attempt) -> str | None:
    """A refused call must not have reached the upstream; a success must have, as authorized."""
    up = (attempt.wire or {}).get("upstream")
    if not isinstance(up, dict):
        return None
    calls = int(up.get("calls") or 0)
    raw = int(up.get("rawCalls") or 0)
    name = up.get("upstream", "the upstream")
    refused = attempt.outcome is Outcome.DENIED or (
        attempt.outcome is Outcome.FAILED and attempt.reason in _NOT_FORWARDED
    )
    if refused and calls + raw:
        return (
            f"the kernel refused the call, yet upstream {name} received {calls + raw} "
            "tools/call request(s) with its arguments (its tap log)"
        )
    if attempt.outcome is Outcome.SUCCEEDED:
        wanted = max(int(up.get("successes") or 0), 1)
        if calls < wanted:
            return (
                f"the kernel recorded {wanted} success(es) with these arguments in the turn, "
                f"but upstream {name} received {calls} tools/call request(s) with the "
                "arguments that were authorized (its tap log)"
            )
        if raw:
            return (
                f"upstream {name} received the arguments as the harness wrote them, not the "
                "canonical resource that was authorized"
            )
    return None


def grade_local_cell(row: Row, column: ColumnRun) -> Cell:
    """Grade one harness-local row from the sandbox's side (see the module docstring)."""
    expected = row.expected
    kind = row.local.tool if row.local is not None else "local"

    def cell(grade: Grade, detail: str, actual: str | None = None, attempts: int = 0) -> Cell:
        return Cell(
            row_id=row.id,
            column_id=column.column_id,
            grade=grade,
            expected=expected,
            actual=actual,
            detail=detail,
            attempts=attempts,
        )

    if column.local is None:
        return cell(
            Grade.NOT_AVAILABLE,
            LOCAL_NEEDS_HARNESS.get(
                column.kind.value,
                "this column runs no harness CLI with tools of its own (harness-local rows "
                "run in the mcp columns)",
            ),
        )
    obs = column.local.get(row.id)
    if obs is None:
        return cell(Grade.NOT_EXERCISED, "no turn of this column made this row's attempt")
    if not obs.issued:
        offered = ", ".join(obs.offered_tools) or "none"
        return cell(
            Grade.NOT_EXERCISED,
            f"the harness offered the model no {kind} tool of its own that could make this "
            f"attempt (its tools: {offered}), or the turn ended before it",
        )
    breaches = obs.breaches()
    actual = obs.actual()
    if obs.unchecked and not breaches:
        return cell(
            Grade.NOT_EXERCISED,
            "the sandbox's side could not be checked: " + "; ".join(obs.unchecked),
            attempts=1,
        )
    call = f"{obs.harness_tool} {obs.arguments}"
    said = f'; the harness answered the model "{obs.reply}"' if obs.reply is not None else ""
    if not obs.answered and not breaches:
        return cell(
            Grade.NOT_EXERCISED,
            f"the model called {call}, but the harness never answered the call (the turn "
            "ended first); nothing leaked, changed or reached",
            attempts=1,
        )
    if obs.policy_mode != "strict":
        happened = "; ".join(breaches) if breaches else f"nothing leaked ({obs.stopped_by})"
        return cell(
            Grade.INFORMATIONAL,
            f"open run policy {obs.policy!r}: the harness was NOT confined ({obs.confinement}). "
            f"Informational, not a refusal by SharedOS: {happened}. Call: {call}{said}",
            actual=actual,
            attempts=1,
        )
    if breaches:
        return cell(
            Grade.FAILED,
            f"under strict run policy {obs.policy!r}: {'; '.join(breaches)}; "
            f"confinement: {obs.confinement}. Call: {call}{said}",
            actual=actual,
            attempts=1,
        )
    return cell(
        Grade.PASSED,
        f"{obs.stopped_by}; {obs.checks()}; confinement: {obs.confinement}. Call: {call}{said}",
        actual=actual,
        attempts=1,
    )


def grade_cell(row: Row, manifest: Manifest, column: ColumnRun) -> Cell:
    """Grade one row in one column."""
    expected = row.expected
    if not column.available or row.id in column.unavailable_rows:
        return Cell(
            row_id=row.id,
            column_id=column.column_id,
            grade=Grade.NOT_AVAILABLE,
            expected=expected,
            detail=column.unavailable_rows.get(row.id)
            or column.unavailable_reason
            or "column not available",
        )
    if row.local is not None:
        return grade_local_cell(row, column)
    expect = row.expect
    assert expect is not None  # a kernel row (validated)
    row = row.bind(column.bindings)
    attempts = matching_attempts(row, manifest, column)
    if not attempts:
        how = "call id" if column.match_by == "call_id" else "tool + resource"
        return Cell(
            row_id=row.id,
            column_id=column.column_id,
            grade=Grade.NOT_EXERCISED,
            expected=expected,
            detail=f"no attempt in the evidence matches this row (by {how})",
        )
    problems: list[str] = []
    for a in attempts:
        want_reason = expect.reason
        if a.tool != row.tool_name:
            # the raw string must reach the kernel unchanged: a shape that renamed
            # "files read" to "files_read" would still be refused, for the wrong reason
            problems.append(
                f"call {a.call_id}: the kernel received tool {a.tool!r}, "
                f"the row attempts {row.tool_name!r}"
            )
        elif (
            column.match_by == "call_id"
            and "arguments" in a.record
            and a.record["arguments"] != row.arguments
        ):
            problems.append(
                f"call {a.call_id}: the kernel received arguments {a.record['arguments']!r}"
            )
        elif a.outcome is None:
            problems.append(f"call {a.call_id}: interrupted (the attempt has no recorded outcome)")
        elif a.outcome is not expect.outcome or (
            expect.outcome is not Outcome.SUCCEEDED and a.reason is not want_reason
        ):
            problems.append(f"call {a.call_id}: expected {expected}, got {_actual(a)}")
        elif a.reason is not None and outcome_for_reason(a.reason) is not a.outcome:
            problems.append(
                f"call {a.call_id}: record says {a.outcome.value} with reason {a.reason.value}"
            )
        else:
            wire = _wire_problem(a)
            if wire is not None:
                problems.append(f"call {a.call_id}: {wire}")
    actual = ", ".join(sorted({_actual(a) for a in attempts}))
    evidence = [a.record for a in attempts[:3]]
    if problems:
        return Cell(
            row_id=row.id,
            column_id=column.column_id,
            grade=Grade.FAILED,
            expected=expected,
            actual=actual,
            detail="; ".join(problems),
            attempts=len(attempts),
            evidence=evidence,
        )
    return Cell(
        row_id=row.id,
        column_id=column.column_id,
        grade=Grade.PASSED,
        expected=expected,
        actual=actual,
        detail="; ".join(sorted({u for a in attempts if (u := _upstream_account(a))})),
        attempts=len(attempts),
        evidence=evidence,
    )


def grade_column(manifest: Manifest, column: ColumnRun) -> list[Cell]:
    """Grade every manifest row in one column, in manifest order."""
    return [grade_cell(row, manifest, column) for row in manifest.rows]


def columns_as_run(manifest: Manifest, runs: list[ColumnRun]) -> dict[str, Any]:
    """Every column as it ran and each cell's grade, as JSON-ready data:
    ``{"columns": [column, ...], "grades": {column id: {row id: cell}}}``."""
    return {
        "columns": [run.model_dump(mode="json") for run in runs],
        "grades": {
            run.column_id: {
                c.row_id: c.model_dump(mode="json") for c in grade_column(manifest, run)
            }
            for run in runs
        },
    }
