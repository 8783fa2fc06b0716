"""The conformance report: the graded matrix plus everything needed to read it honestly.

``build_report`` grades every column against the manifest and adds, before any
comparison of refusals, the catalogHash equality check (columns that were given
different catalogues are flagged), per-column SystemIdentity, run policies with
their strict claim, and denied vs failed counts. ``render_text`` and
``report_json`` are the human and machine forms; ``html.render_html`` the
at-a-glance page. ``write_reports`` writes all three.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

import sharedos
from sharedos.atomicfile import write_atomically
from sharedos.conformance.columns.base import ColumnRun
from sharedos.conformance.grading import SYMBOLS, Cell, Grade, grade_column
from sharedos.conformance.localrows import confinement_of
from sharedos.conformance.manifest import Manifest, Row
from sharedos.identity import SystemIdentity, catalog_hash_mismatch
from sharedos.outcomes import Outcome, outcome_for_reason
from sharedos.redaction import NO_SECRETS, Redactor
from sharedos.terminal import json_spelled, unambiguous


def display_tool(name: str, limit: int = 40) -> str:
    """A tool name safe to print: odd characters escaped, long names shortened with their length."""
    plain = name.isascii() and name.isprintable()
    shown = name if plain else name.encode("unicode_escape").decode("ascii")
    if len(shown) > limit:
        shown = f"{shown[: limit - 12]}…({len(name)} chars)"
    return shown


class RowReport(BaseModel):
    """A manifest row as the report shows it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    tool: str
    arguments: Any
    context: str
    policy: str
    expected: str
    why: str


class ColumnCounts(BaseModel):
    """What the column's evidence holds, by outcome and reason."""

    model_config = ConfigDict(extra="forbid")

    attempts: int = 0
    succeeded: int = 0
    denied: int = 0
    failed: int = 0
    cancelled: int = 0
    by_reason: dict[str, int] = Field(default_factory=dict)


class ColumnReport(BaseModel):
    """One column of the matrix with its identity, policy claim and counts."""

    model_config = ConfigDict(extra="forbid")

    column_id: str
    kind: str
    label: str
    identity: SystemIdentity | None
    available: bool
    unavailable_reason: str | None
    match_by: str
    tool_policy: dict[str, Any] | None
    strict_claim: str | None
    counts: ColumnCounts
    #: records whose outcome and reason disagree (denied and failed must stay distinguishable)
    inconsistent_records: list[str] = Field(default_factory=list)
    grades: dict[str, int] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    duration_s: float | None = None
    evidence_path: str | None = None
    #: rows this column could not serve -> why (their cells are not available)
    unavailable_rows: dict[str, str] = Field(default_factory=dict)
    #: ``{ID.root}`` placeholder -> the path it stood for in this column
    bindings: dict[str, str] = Field(default_factory=dict)
    #: a harness column's confinement, one plain line (None: no harness ran, e.g. scripted)
    confinement: str | None = None
    #: whether that harness ran in an OS sandbox (None: no harness)
    confined: bool | None = None


class CatalogCheck(BaseModel):
    """Whether the compared columns were given the same catalogue."""

    model_config = ConfigDict(extra="forbid")

    equal: bool
    hashes: dict[str, str | None]
    message: str


class Report(BaseModel):
    """The whole report (its JSON form is ``report.json``)."""

    model_config = ConfigDict(extra="forbid")

    title: str
    generated_at: str
    sharedos_version: str
    manifest: str
    catalog_check: CatalogCheck
    policies: dict[str, str]
    rows: list[RowReport]
    columns: list[ColumnReport]
    #: cells[row_index][column_index]
    cells: list[list[Cell]]
    totals: dict[str, int]

    @property
    def ok(self) -> bool:
        """True when no cell failed."""
        return self.totals.get(Grade.FAILED.value, 0) == 0

    def unconfined_columns(self) -> list[ColumnReport]:
        """Harness columns whose harness ran with no OS sandbox (their strict claim does
        not cover the harness's own tools)."""
        return [c for c in self.columns if c.available and c.confined is False]


def _counts(column: ColumnRun) -> tuple[ColumnCounts, list[str]]:
    outcomes = Counter(a.outcome.value if a.outcome else "interrupted" for a in column.attempts)
    reasons = Counter(a.reason.value for a in column.attempts if a.reason is not None)
    bad = [
        f"{a.call_id}: outcome {a.outcome.value if a.outcome else 'interrupted'} with reason {a.reason.value}"
        for a in column.attempts
        if a.reason is not None and outcome_for_reason(a.reason) is not a.outcome
    ]
    counts = ColumnCounts(
        attempts=len(column.attempts),
        succeeded=outcomes.get(Outcome.SUCCEEDED.value, 0),
        denied=outcomes.get(Outcome.DENIED.value, 0),
        failed=outcomes.get(Outcome.FAILED.value, 0),
        cancelled=outcomes.get(Outcome.CANCELLED.value, 0),
        by_reason=dict(sorted(reasons.items())),
    )
    return counts, bad


def _row_report(row: Row, manifest: Manifest) -> RowReport:
    arguments = row.arguments
    if row.local is not None:
        arguments = row.local.model_dump(exclude_none=True) | {
            "guard": row.effective_guard.model_dump(exclude_defaults=True)
        }
    return RowReport(
        id=row.id,
        title=row.title,
        tool=display_tool(row.tool_name),
        arguments=arguments,
        context=manifest.context_of(row),
        policy=manifest.policy_of(row),
        expected=row.expected,
        why=row.why,
    )


def catalog_check(columns: list[ColumnRun]) -> CatalogCheck:
    """Compare catalogHash across columns that had a catalogue."""
    idents = {c.column_id: c.identity for c in columns if c.available}
    mismatch = catalog_hash_mismatch(idents)
    hashes = {cid: (i.catalog_hash if i else None) for cid, i in idents.items()}
    if mismatch is not None:
        groups: dict[str | None, list[str]] = {}
        for cid, h in mismatch.items():
            groups.setdefault(h, []).append(cid)
        parts = [f"{(h or '-')[:12]}: {', '.join(cids)}" for h, cids in groups.items()]
        return CatalogCheck(
            equal=False,
            hashes=hashes,
            message=(
                "CATALOGUE MISMATCH: these columns were not given the same tool catalogue, so "
                "comparing their refusals says nothing until that is explained — "
                + "; ".join(parts)
            ),
        )
    with_hash = [h for h in hashes.values() if h]
    if not with_hash:
        return CatalogCheck(equal=True, hashes=hashes, message="no column served a catalogue")
    return CatalogCheck(
        equal=True,
        hashes=hashes,
        message=f"every column with a catalogue was given the same one (catalogHash {with_hash[0][:16]}…)",
    )


def build_report(
    manifest: Manifest, columns: list[ColumnRun], *, title: str | None = None
) -> Report:
    """Grade ``columns`` against ``manifest`` and assemble the report."""
    col_reports: list[ColumnReport] = []
    by_column: list[list[Cell]] = []
    totals: Counter[str] = Counter()
    for column in columns:
        column_cells = grade_column(manifest, column)
        by_column.append(column_cells)
        grades = Counter(c.grade.value for c in column_cells)
        totals.update(grades)
        counts, bad = _counts(column)
        policy = column.tool_policy
        confinement, confined = (
            confinement_of(column.identity)
            if column.available and column.kind.value in _HARNESS_KINDS
            else (None, None)
        )
        col_reports.append(
            ColumnReport(
                column_id=column.column_id,
                kind=column.kind.value,
                label=column.label,
                identity=column.identity,
                available=column.available,
                unavailable_reason=column.unavailable_reason,
                match_by=column.match_by,
                tool_policy=policy.model_dump(mode="json") if policy else None,
                strict_claim=policy.strict_claim() if policy else None,
                counts=counts,
                inconsistent_records=bad,
                grades=dict(grades),
                notes=list(column.notes),
                duration_s=column.duration_s,
                evidence_path=column.evidence_path,
                unavailable_rows=dict(column.unavailable_rows),
                bindings=dict(column.bindings),
                confinement=confinement,
                confined=confined,
            )
        )
    cells = [[by_column[c][r] for c in range(len(columns))] for r in range(len(manifest.rows))]
    return Report(
        title=title or f"SharedOS conformance — {manifest.title}",
        generated_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        sharedos_version=sharedos.__version__,
        manifest=manifest.source,
        catalog_check=catalog_check(columns),
        policies={name: p.strict_claim() for name, p in manifest.policies.items()},
        rows=[_row_report(r, manifest) for r in manifest.rows],
        columns=col_reports,
        cells=cells,
        totals={g.value: totals.get(g.value, 0) for g in Grade},
    )


def report_json(report: Report) -> str:
    """The machine-readable report (a C1 control, a bidi override or a zero-width space a
    harness or an upstream put in a note or a reason written as its ``\\uNNNN`` escape,
    as the text and HTML forms spell it: the same JSON value)."""
    return json_spelled(
        json.dumps(report.model_dump(mode="json", by_alias=True), indent=2, ensure_ascii=False)
    )


_MATCH_LABEL = {"call_id": "call id", "tool_resource": "tool + canonical resource"}
#: Column kinds that run a harness CLI (their confinement is reported).
_HARNESS_KINDS = ("mcp", "live")


def confinement_summary(report: Report) -> list[str]:
    """Plain lines on what confined each harness column (first thing after the catalogue
    check: a strict claim says nothing about the harness's own tools when it ran free)."""
    harness = [c for c in report.columns if c.available and c.confined is not None]
    if not harness:
        return []
    lines = [
        "Harness confinement (what stood between the harness's own tools and the "
        "managed resources):"
    ]
    for col in harness:
        lines.append(f"* {col.column_id}: {col.confinement}")
    if report.unconfined_columns():
        lines.append(
            "  A column marked NOT CONFINED ran its harness with no OS sandbox: its strict "
            "claim does not cover what the harness's own shell and file tools could reach."
        )
    return lines


def _short_label(column: ColumnReport) -> str:
    return column.column_id


def totals_line(report: Report) -> str:
    """``3 passed, 0 failed, ...`` (informational cells only when there are any)."""
    t = report.totals
    line = (
        f"{t.get('passed', 0)} passed, {t.get('failed', 0)} failed, "
        f"{t.get('not_exercised', 0)} not exercised, {t.get('not_available', 0)} not available"
    )
    if t.get("informational"):
        line += f", {t['informational']} informational"
    return line


def render_matrix(report: Report) -> str:
    """The matrix alone: rows × columns with ✓ passed, ✗ failed, ○ not exercised, – not available."""
    headers = [_short_label(c) for c in report.columns]
    id_width = max(len("row"), *(len(r.id) for r in report.rows))
    widths = [max(len(h), 3) for h in headers]
    lines = [
        "  ".join(
            ["row".ljust(id_width), *(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
        )
    ]
    lines.append("  ".join(["-" * id_width, *("-" * w for w in widths)]))
    for row, cells in zip(report.rows, report.cells, strict=True):
        marks = [SYMBOLS[cell.grade].ljust(w) for cell, w in zip(cells, widths, strict=True)]
        lines.append("  ".join([row.id.ljust(id_width), *marks]).rstrip())
    lines.append("")
    lines.append(
        "✓ passed   ✗ failed   ○ not exercised (never green)   "
        "– not available here (the column, or that row in it)   "
        "i informational (open run policy: not confined, never a refusal)"
    )
    return "\n".join(lines)


def render_text(report: Report) -> str:
    """The human report: catalogue check first, then the matrix, columns, failures, claims."""
    out: list[str] = [report.title, "=" * len(report.title), ""]
    out.append(f"generated {report.generated_at} by SharedOS {report.sharedos_version}")
    out.append(f"manifest: {report.manifest} ({len(report.rows)} rows)")
    out.append("")
    out.append("Catalogue check: " + report.catalog_check.message)
    out.append("")
    summary = confinement_summary(report)
    if summary:
        out.extend([*summary, ""])
    out.extend(render_matrix(report).split("\n"))
    out.append("")
    out.append("Cells: " + totals_line(report))
    out.append("")
    out.append("Columns")
    out.append("-------")
    for col in report.columns:
        out.append(f"* {col.column_id} — {col.label}")
        if not col.available:
            out.append(f"    NOT AVAILABLE: {col.unavailable_reason}")
            continue
        ident = col.identity
        if ident is not None:
            ext = f" ({ident.mcp_extension})" if ident.mcp_extension else ""
            out.append(
                f"    identity: {ident.harness} {ident.harness_version}, column {ident.column.value}, "
                f"declared model {ident.declared_model!r}, mcpSupport {ident.mcp_support.value}{ext}"
            )
            out.append(
                f"    catalogHash {ident.catalog_hash or '-'}  policy bundle {ident.policy_bundle_hash or '-'}"
            )
        if col.confinement is not None:
            out.append(f"    confinement: {col.confinement}")
        c = col.counts
        out.append(
            f"    evidence: {c.attempts} attempts — {c.succeeded} succeeded, {c.denied} denied, "
            f"{c.failed} failed, {c.cancelled} cancelled; matched by {_MATCH_LABEL.get(col.match_by, col.match_by)}"
        )
        if c.by_reason:
            out.append("    reasons: " + ", ".join(f"{k} {v}" for k, v in c.by_reason.items()))
        for bad in col.inconsistent_records:
            out.append(f"    INCONSISTENT RECORD: {bad}")
        if col.duration_s is not None:
            out.append(f"    ran in {col.duration_s:.2f} s")
        for key, path in col.bindings.items():
            out.append(f"    {{{key}}} = {path}")
        why_rows: dict[str, list[str]] = {}
        for row_id, why in col.unavailable_rows.items():
            why_rows.setdefault(why, []).append(row_id)
        for why, ids in why_rows.items():
            out.append(f"    rows not available here ({', '.join(ids)}): {why}")
        for note in col.notes:
            out.append(f"    note: {note}")
    failures = [cell for row in report.cells for cell in row if cell.grade is Grade.FAILED]
    if failures:
        out.append("")
        out.append("Failed cells")
        out.append("------------")
        for cell in failures:
            out.append(
                f"* {cell.row_id} in {cell.column_id}: expected {cell.expected}, got {cell.actual}"
            )
            out.append(f"    {cell.detail}")
            for rec in cell.evidence[:1]:
                keep = {
                    k: rec.get(k)
                    for k in (
                        "seq",
                        "call_id",
                        "tool",
                        "outcome",
                        "reason",
                        "resource",
                        "rule_ids",
                        "error",
                    )
                    if k in rec
                }
                out.append(f"    evidence: {json.dumps(keep, ensure_ascii=False)}")
    unexercised = [
        cell for row in report.cells for cell in row if cell.grade is Grade.NOT_EXERCISED
    ]
    if unexercised:
        out.append("")
        out.append("Not exercised (not tested — never counted as passed)")
        out.append("----------------------------------------------------")
        for cell in unexercised:
            out.append(f"* {cell.row_id} in {cell.column_id}: {cell.detail}")
    informational = [
        cell for row in report.cells for cell in row if cell.grade is Grade.INFORMATIONAL
    ]
    if informational:
        out.append("")
        out.append("Informational (open run policy: not confined, never a refusal)")
        out.append("--------------------------------------------------------------")
        for cell in informational:
            out.append(f"* {cell.row_id} in {cell.column_id}: {cell.actual}")
            out.append(f"    {cell.detail}")
    out.append("")
    out.append("Run policies and what their claim covers")
    out.append("----------------------------------------")
    for name, claim in report.policies.items():
        out.append(f"* {name}: {claim}")
    out.append("")
    out.append("Rows")
    out.append("----")
    for row in report.rows:
        out.append(
            f"* {row.id}: {row.title} — {row.tool} {json.dumps(row.arguments, ensure_ascii=False)}"
        )
        out.append(f"    context {row.context}, policy {row.policy}, expected {row.expected}")
    # each entry is one line: what a harness, a client or an upstream put in a note or a
    # detail (ANSI escapes, a newline forging a line, a bidi override) is spelled out
    return "\n".join(unambiguous(line) for line in out) + "\n"


def report_paths(out_dir: Path, stem: str) -> dict[str, Path]:
    """Where ``write_reports`` writes each form: ``{"json"|"text"|"html": path}``."""
    return {
        "json": out_dir / f"{stem}.json",
        "text": out_dir / f"{stem}.txt",
        "html": out_dir / f"{stem}.html",
    }


def write_reports(
    report: Report, out_dir: Path, *, stem: str = "conformance", secrets: Redactor | None = None
) -> dict[str, Path]:
    """Write ``<stem>.json``, ``<stem>.txt`` and ``<stem>.html`` into ``out_dir`` (each 0600,
    scrubbed of ``secrets`` in every spelling); return their paths."""
    from sharedos.conformance.html import render_html

    scrub = (secrets or NO_SECRETS).scrub
    if secrets:
        # scrubbed before it is rendered too: the text and HTML forms spell a control
        # character \xNN, which is no spelling of a secret that holds one (a PEM key)
        report = Report.model_validate(secrets.scrub_json(report.model_dump(mode="json")))
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = report_paths(out_dir, stem)
    write_private_text(paths["json"], scrub(report_json(report) + "\n"))
    write_private_text(paths["text"], scrub(render_text(report)))
    write_private_text(paths["html"], scrub(render_html(report)))
    return paths


def write_private_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, readable by its owner only (0600), whole or not at all:
    a full disk leaves the report of the run before as it was (``sharedos.atomicfile``).
    An ``OSError`` names ``path`` (not the temporary file beside it)."""
    try:
        write_atomically(path, text, mode=0o600, exact_mode=True)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
