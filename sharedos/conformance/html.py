"""The self-contained HTML report: one file, inline CSS, no scripts, no network assets.

A person sees the matrix at a glance: green ✓ passed, red ✗ failed, grey ○ not
exercised (never green), hatched – column not available (with the reason on
hover and in the column list). The catalogue check is the first thing on the
page, above the matrix, because refusals of columns given different catalogues
cannot be compared.
"""

from __future__ import annotations

import html
import json

from sharedos.conformance.grading import SYMBOLS, Cell, Grade
from sharedos.conformance.report import ColumnReport, Report
from sharedos.terminal import unambiguous


def escape(text: str) -> str:
    """``text`` for HTML: markup escaped, and every character that is not shown as itself
    (a control character, which HTML does not allow; a bidi override) spelled out;
    line ends are kept (HTML shows them as space, or as lines in ``<pre>``)."""
    return html.escape("\n".join(unambiguous(line) for line in text.split("\n")))


_CSS = """
:root { --pass:#1e8e3e; --fail:#d93025; --none:#9aa0a6; --na:#e8eaed; --ink:#202124; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       margin: 24px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; }
.meta { color: #5f6368; margin-bottom: 14px; }
.banner { padding: 10px 14px; border-radius: 6px; margin: 10px 0 16px; font-weight: 600; }
.banner.ok { background: #e6f4ea; border: 1px solid #a8dab5; }
.banner.bad { background: #fce8e6; border: 1px solid #f4a49e; color: #a50e0e; }
.totals span { display: inline-block; margin-right: 16px; font-weight: 600; }
table { border-collapse: collapse; }
table.matrix th, table.matrix td { border: 1px solid #dadce0; padding: 4px 8px; }
table.matrix thead th { background: #f1f3f4; font-size: 12px; vertical-align: bottom; }
table.matrix th.kind { text-transform: uppercase; letter-spacing: .04em; font-size: 11px; color: #5f6368; }
table.matrix td.row { white-space: nowrap; }
table.matrix td.row small { color: #5f6368; display: block; }
td.cell { text-align: center; font-size: 18px; font-weight: 700; min-width: 64px; }
td.passed { background: #e6f4ea; color: var(--pass); }
td.failed { background: #fce8e6; color: var(--fail); }
td.not_exercised { background: #f8f9fa; color: var(--none); }
td.informational { background: #e8f0fe; color: #1a73e8; font-style: italic; }
td.not_available { background: repeating-linear-gradient(45deg, #f1f3f4, #f1f3f4 6px, #e8eaed 6px, #e8eaed 12px);
                   color: #80868b; }
th.unavailable { color: #80868b; }
.legend span { margin-right: 18px; }
.legend b { display: inline-block; width: 22px; text-align: center; border-radius: 4px; }
table.cols td, table.cols th { border-bottom: 1px solid #e8eaed; padding: 4px 10px 4px 0; text-align: left;
                               vertical-align: top; font-size: 13px; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; background: #f1f3f4; padding: 1px 4px;
       border-radius: 3px; word-break: break-all; }
table.matrix td code { word-break: normal; overflow-wrap: normal; }
.fail-detail { border-left: 4px solid var(--fail); padding: 6px 12px; margin: 8px 0; background: #fff8f7; }
pre { white-space: pre-wrap; font: 12px ui-monospace, Menlo, monospace; margin: 4px 0; }
.claims li { margin-bottom: 6px; }
"""


def _cell_html(cell: Cell) -> str:
    title = cell.detail or f"expected {cell.expected}, got {cell.actual}"
    if cell.grade is Grade.PASSED:
        title = f"passed: {cell.actual} ({cell.attempts} attempt(s))" + (
            f"; {cell.detail}" if cell.detail else ""
        )
    label = {
        Grade.PASSED: "passed",
        Grade.FAILED: "failed",
        Grade.NOT_EXERCISED: "not exercised",
        Grade.NOT_AVAILABLE: "not available",
        Grade.INFORMATIONAL: "informational",
    }[cell.grade]
    return (
        f'<td class="cell {cell.grade.value}" title="{escape(title)}" aria-label="{label}">'
        f"{SYMBOLS[cell.grade]}</td>"
    )


def _kind_groups(columns: list[ColumnReport]) -> list[tuple[str, int]]:
    groups: list[tuple[str, int]] = []
    for col in columns:
        if groups and groups[-1][0] == col.kind:
            groups[-1] = (col.kind, groups[-1][1] + 1)
        else:
            groups.append((col.kind, 1))
    return groups


def _matrix(report: Report) -> str:
    parts = [
        '<table class="matrix"><thead><tr><th rowspan="2">row</th><th rowspan="2">expected</th>'
    ]
    for kind, span in _kind_groups(report.columns):
        parts.append(f'<th class="kind" colspan="{span}">{escape(kind)}</th>')
    parts.append("</tr><tr>")
    for col in report.columns:
        cls = "" if col.available else ' class="unavailable"'
        tip = col.unavailable_reason or (col.identity.label() if col.identity else col.label)
        parts.append(f'<th{cls} title="{escape(tip)}">{escape(col.label)}</th>')
    parts.append("</tr></thead><tbody>")
    for row, cells in zip(report.rows, report.cells, strict=True):
        parts.append(
            f'<tr><td class="row"><b>{escape(row.id)}</b><small>{escape(row.title)}</small></td>'
            f"<td><code>{escape(row.expected).replace('/', '/<wbr>')}</code></td>"
        )
        parts.extend(_cell_html(c) for c in cells)
        parts.append("</tr>")
    parts.append("</tbody></table>")
    return "".join(parts)


def _columns_table(report: Report) -> str:
    parts = [
        '<table class="cols"><thead><tr><th>column</th><th>identity</th><th>catalogHash</th>'
        "<th>evidence</th><th>grades</th></tr></thead><tbody>"
    ]
    for col in report.columns:
        if not col.available:
            parts.append(
                f"<tr><td><b>{escape(col.column_id)}</b></td>"
                f'<td colspan="4"><b>not available:</b> {escape(col.unavailable_reason or "")}</td></tr>'
            )
            continue
        ident = col.identity
        if ident is not None:
            ext = f" via {escape(ident.mcp_extension)}" if ident.mcp_extension else ""
            ident_html = (
                f"{escape(ident.harness)} {escape(ident.harness_version)} · {escape(ident.column.value)}"
                f" · model <code>{escape(ident.declared_model)}</code> · mcpSupport "
                f"{escape(ident.mcp_support.value)}{ext} · SharedOS {escape(ident.sharedos_version)}"
            )
            if col.confinement is not None:
                style = "" if col.confined else ' style="color:var(--fail)"'
                ident_html += f"<br><b{style}>{escape(col.confinement)}</b>"
            hash_html = f"<code>{escape((ident.catalog_hash or '-')[:16])}</code>"
        else:
            ident_html, hash_html = "-", "-"
        c = col.counts
        ev = (
            f"{c.attempts} attempts: {c.succeeded} succeeded, <b>{c.denied} denied</b>, "
            f"<b>{c.failed} failed</b>, {c.cancelled} cancelled"
        )
        if col.inconsistent_records:
            ev += f' <span style="color:var(--fail)">({len(col.inconsistent_records)} inconsistent)</span>'
        grades = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sorted(col.grades.items()))
        unserved: dict[str, list[str]] = {}
        for row_id, why in col.unavailable_rows.items():
            unserved.setdefault(why, []).append(row_id)
        notes = "".join(
            f"<br><small><b>not available here</b> ({escape(', '.join(ids))}): {escape(why)}</small>"
            for why, ids in unserved.items()
        )
        notes += "".join(f"<br><small>{escape(n)}</small>" for n in col.notes)
        parts.append(
            f"<tr><td><b>{escape(col.column_id)}</b><br><small>{escape(col.label)}</small>{notes}</td>"
            f"<td>{ident_html}</td><td>{hash_html}</td><td>{ev}</td><td>{escape(grades)}</td></tr>"
        )
    parts.append("</tbody></table>")
    return "".join(parts)


def _failures(report: Report) -> str:
    failed = [cell for row in report.cells for cell in row if cell.grade is Grade.FAILED]
    if not failed:
        return "<p>No cell failed.</p>"
    parts = []
    for cell in failed:
        rec = json.dumps(cell.evidence[:1], indent=2, ensure_ascii=False)
        parts.append(
            f'<div class="fail-detail"><b>{escape(cell.row_id)}</b> in <b>{escape(cell.column_id)}</b>: '
            f"expected <code>{escape(cell.expected)}</code>, got <code>{escape(cell.actual or '-')}</code>"
            f"<br>{escape(cell.detail)}<pre>{escape(rec)}</pre></div>"
        )
    return "".join(parts)


def _confinement_banner(report: Report) -> str:
    """Which harness columns ran confined, above the matrix (empty: no harness column)."""
    harness = [c for c in report.columns if c.available and c.confined is not None]
    if not harness:
        return ""
    loose = report.unconfined_columns()
    if not loose:
        return (
            '<div class="banner ok">Harness confinement: every harness column ran in an OS '
            f"sandbox ({escape(harness[0].confinement or '')})</div>"
        )
    items = "".join(
        f"<li><b>{escape(c.column_id)}</b>: {escape(c.confinement or '')}</li>" for c in loose
    )
    return (
        '<div class="banner bad">Harness confinement: these columns ran their harness with no '
        "OS sandbox, so their strict claim does not cover what the harness's own shell and "
        f"file tools could reach:<ul>{items}</ul></div>"
    )


def render_html(report: Report) -> str:
    """One self-contained HTML page (no external resources of any kind)."""
    t = report.totals
    check = report.catalog_check
    banner_cls = "ok" if check.equal else "bad"
    claims = "".join(
        f"<li><b>{escape(name)}</b>: {escape(claim)}</li>"
        for name, claim in report.policies.items()
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(report.title)}</title>
<style>{_CSS}</style></head>
<body>
<h1>{escape(report.title)}</h1>
<div class="meta">generated {escape(report.generated_at)} by SharedOS {escape(report.sharedos_version)}
 · manifest <code>{escape(report.manifest)}</code> · {len(report.rows)} rows × {len(report.columns)} columns</div>
<div class="banner {banner_cls}">Catalogue check: {escape(check.message)}</div>
{_confinement_banner(report)}
<div class="totals"><span style="color:var(--pass)">✓ {t.get("passed", 0)} passed</span>
<span style="color:var(--fail)">✗ {t.get("failed", 0)} failed</span>
<span style="color:var(--none)">○ {t.get("not_exercised", 0)} not exercised</span>
<span style="color:#80868b">– {t.get("not_available", 0)} not available</span>
<span style="color:#1a73e8">i {t.get("informational", 0)} informational</span></div>
<h2>Matrix</h2>
{_matrix(report)}
<p class="legend"><span><b style="background:#e6f4ea;color:var(--pass)">✓</b> passed: exercised, outcome and reason as expected</span>
<span><b style="background:#fce8e6;color:var(--fail)">✗</b> failed: exercised, outcome differs</span>
<span><b style="background:#f8f9fa;color:var(--none)">○</b> not exercised: no matching attempt (not tested, never green)</span>
<span><b style="background:#e8eaed">–</b> not available here (the column, or that row in it)</span>
<span><b style="background:#e8f0fe;color:#1a73e8">i</b> informational: an open run policy, the harness not confined (never a refusal)</span></p>
<h2>Columns</h2>
{_columns_table(report)}
<h2>Failed cells</h2>
{_failures(report)}
<h2>Run policies: what a strict claim covers</h2>
<ul class="claims">{claims}</ul>
</body></html>
"""
