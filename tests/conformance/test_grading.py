"""Grading rules: not exercised is never green, tool+resource matching, catalogHash mismatch first."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedos.cli.conformance import exit_status
from sharedos.conformance.columns.base import ColumnOptions, ColumnRun
from sharedos.conformance.grading import Grade, grade_column
from sharedos.conformance.manifest import Manifest, parse_manifest
from sharedos.conformance.report import build_report, render_text, report_json
from sharedos.conformance.runner import run_report
from sharedos.identity import ColumnKind, McpSupport, SystemIdentity


@pytest.fixture
async def scripted_run(manifest: Manifest, tmp_path: Path) -> ColumnRun:
    """A real scripted column (responses shape) to regrade under other rules."""
    _, runs = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(manifest=manifest, workdir=tmp_path, shapes=("responses",)),
    )
    return runs[0]


def _as_live(
    run: ColumnRun, *, keep: set[str] | None = None, catalog_hash: str | None = "h"
) -> ColumnRun:
    """The same evidence, attributed to a column that cannot control call ids."""
    by_row = {v: k for k, v in run.row_call_ids.items()}
    attempts = [a for a in run.attempts if keep is None or by_row[a.call_id] in keep]
    ident = SystemIdentity(
        harness="claude-code",
        harness_version="2.1.238",
        column=ColumnKind.MCP,
        declared_model="scripted",
        mcp_support=McpSupport.NATIVE,
        catalog_hash=catalog_hash,
    )
    return ColumnRun(
        column_id="mcp/claude-code/http",
        kind=ColumnKind.MCP,
        label="Claude Code (http)",
        identity=ident,
        match_by="tool_resource",
        bindings=run.bindings,  # {git.root} stood for the scripted column's own fixture
        attempts=[
            a.model_copy(update={"call_id": f"toolu_{i}", "wire": None})
            for i, a in enumerate(attempts)
        ],
    )


@pytest.mark.anyio
async def test_tool_resource_matching_grades_every_row(
    manifest: Manifest, scripted_run: ColumnRun
) -> None:
    cells = grade_column(manifest, _as_live(scripted_run))
    assert {c.row_id: c.grade for c in cells} == {
        r.id: Grade.PASSED if r.local is None else Grade.NOT_AVAILABLE for r in manifest.rows
    }


@pytest.mark.anyio
async def test_a_row_never_attempted_is_not_exercised_never_green(
    manifest: Manifest, scripted_run: ColumnRun
) -> None:
    keep = {"public-read-allowed", "private-read-denied"}
    column = _as_live(scripted_run, keep=keep)
    cells = {c.row_id: c for c in grade_column(manifest, column)}
    kernel = [r for r in manifest.rows if r.local is None]
    for row in kernel:
        if row.id in keep:
            assert cells[row.id].grade is Grade.PASSED
        else:
            assert cells[row.id].grade is Grade.NOT_EXERCISED
            assert "no attempt" in cells[row.id].detail
    report = build_report(manifest, [column])
    assert report.totals["passed"] == 2
    assert report.totals["not_exercised"] == len(kernel) - 2
    text = render_text(report)
    assert "Not exercised (not tested — never counted as passed)" in text


@pytest.mark.anyio
async def test_call_id_column_with_a_missing_record_is_not_exercised(
    manifest: Manifest, scripted_run: ColumnRun
) -> None:
    gone = scripted_run.row_call_ids["handler-failure"]
    column = scripted_run.model_copy(
        update={"attempts": [a for a in scripted_run.attempts if a.call_id != gone]}
    )
    cells = {c.row_id: c.grade for c in grade_column(manifest, column)}
    assert cells["handler-failure"] is Grade.NOT_EXERCISED
    kernel = [r for r in manifest.rows if r.local is None]
    assert sum(g is Grade.PASSED for g in cells.values()) == len(kernel) - 1


@pytest.mark.anyio
async def test_a_renamed_tool_fails_even_when_refused(
    manifest: Manifest, scripted_run: ColumnRun
) -> None:
    # a shape that turned "files read" into "files_read" would still be refused
    # tool_unavailable — for the wrong reason; grading must catch it
    cid = scripted_run.row_call_ids["malformed-name-space"]
    attempts = [
        a.model_copy(update={"tool": "files_read"}) if a.call_id == cid else a
        for a in scripted_run.attempts
    ]
    cells = {
        c.row_id: c
        for c in grade_column(manifest, scripted_run.model_copy(update={"attempts": attempts}))
    }
    assert cells["malformed-name-space"].grade is Grade.FAILED
    assert "the kernel received tool 'files_read'" in cells["malformed-name-space"].detail


@pytest.mark.anyio
async def test_a_wire_that_lost_the_error_flag_fails(manifest: Manifest, tmp_path: Path) -> None:
    _, runs = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(manifest=manifest, workdir=tmp_path, shapes=("anthropic",)),
    )
    run = runs[0]
    cid = run.row_call_ids["private-read-denied"]
    attempts = [
        a.model_copy(update={"wire": {**(a.wire or {}), "isError": False}})
        if a.call_id == cid
        else a
        for a in run.attempts
    ]
    cells = {
        c.row_id: c for c in grade_column(manifest, run.model_copy(update={"attempts": attempts}))
    }
    assert cells["private-read-denied"].grade is Grade.FAILED
    assert "isError=False" in cells["private-read-denied"].detail


@pytest.mark.anyio
async def test_catalog_hash_mismatch_is_flagged_before_refusals(
    manifest: Manifest, scripted_run: ColumnRun
) -> None:
    other = _as_live(scripted_run, catalog_hash="0" * 64)
    report = build_report(manifest, [scripted_run, other])
    assert not report.catalog_check.equal
    assert "CATALOGUE MISMATCH" in report.catalog_check.message
    text = render_text(report)
    assert text.index("CATALOGUE MISMATCH") < text.index("private-read-denied")
    assert '"equal": false' in report_json(report)
    # a gate on the exit status must not pass a run whose columns cannot be compared
    status, why = exit_status(report)
    assert status == 1 and why is not None and "CATALOGUE MISMATCH" in why
    same = build_report(
        manifest,
        [scripted_run, _as_live(scripted_run, catalog_hash=scripted_run.identity.catalog_hash)],
    )  # type: ignore[union-attr]
    assert same.catalog_check.equal
    assert exit_status(same) == (0, None)


def test_an_unavailable_column_is_kept_with_its_reason(manifest: Manifest) -> None:
    col = ColumnRun.unavailable("mcp/dsh", ColumnKind.MCP, "dsh", "dsh is not installable here")
    report = build_report(manifest, [col])
    assert all(cells[0].grade is Grade.NOT_AVAILABLE for cells in report.cells)
    assert report.ok  # nothing failed; nothing passed either
    assert report.totals["passed"] == 0
    assert "NOT AVAILABLE: dsh is not installable here" in render_text(report)


def test_strict_claim_is_in_the_report(manifest: Manifest) -> None:
    report = build_report(manifest, [])
    for name, policy in manifest.policies.items():
        assert report.policies[name] == policy.strict_claim()
    assert "Strict run 'conformance'" in render_text(report)


_TWO_TURNS = """
version = 1
title = "one call, two run policies"
default_context = "alice"
default_policy = "conformance"
[contexts.alice]
principal = "alice"
[policies.conformance]
name = "conformance"
mode = "strict"
managed = ["files.read", "files.write"]
harness_local = ["shell.bounded"]
[policies.read-only]
name = "read-only"
mode = "strict"
managed = ["files.read"]
harness_local = ["shell.bounded"]
[sandbox]
[sandbox.files]
"/private/a.txt" = "private\\n"
[[rows]]
id = "private-read-denied"
title = "under the conformance run policy"
tool = "files.read"
arguments = { path = "/private/a.txt" }
expect = { outcome = "denied", reason = "forbidden" }
resource = "/private/a.txt"
[[rows]]
id = "private-read-denied-read-only"
title = "the same call under the read-only run policy"
tool = "files.read"
arguments = { path = "/private/a.txt" }
policy = "read-only"
expect = { outcome = "denied", reason = "forbidden" }
resource = "/private/a.txt"
"""


@pytest.mark.anyio
async def test_an_attempt_of_another_turn_never_grades_a_row(tmp_path: Path) -> None:
    """A tool+resource column whose read-only turn never made the call: that row is not
    exercised, though the conformance turn made the same call with the same outcome
    (it was graded passed from the other turn's record)."""
    manifest = parse_manifest(_TWO_TURNS, "two-turns.toml")
    _, runs = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(manifest=manifest, workdir=tmp_path, shapes=("responses",)),
    )
    assert {c.row_id: c.grade for c in grade_column(manifest, runs[0])} == {
        "private-read-denied": Grade.PASSED,
        "private-read-denied-read-only": Grade.PASSED,
    }
    column = _as_live(runs[0], keep={"private-read-denied"})
    cells = {c.row_id: c for c in grade_column(manifest, column)}
    assert cells["private-read-denied"].grade is Grade.PASSED
    assert cells["private-read-denied-read-only"].grade is Grade.NOT_EXERCISED
    # with both turns' attempts, each row is graded from its own turn's one attempt
    both = {c.row_id: c for c in grade_column(manifest, _as_live(runs[0]))}
    assert [c.attempts for c in both.values()] == [1, 1]


@pytest.mark.anyio
async def test_an_attempt_with_another_rows_exact_arguments_is_that_rows_only(
    manifest: Manifest, scripted_run: ColumnRun
) -> None:
    """The traversal /public/../private/a.txt canonicalizes to /private/a.txt: when only
    the traversal was attempted, private-read-denied is not exercised (it was graded
    passed from the traversal row's record)."""
    column = _as_live(scripted_run, keep={"traversal-denied"})
    cells = {c.row_id: c for c in grade_column(manifest, column)}
    assert cells["traversal-denied"].grade is Grade.PASSED
    assert cells["private-read-denied"].grade is Grade.NOT_EXERCISED


@pytest.mark.anyio
async def test_an_attempt_the_model_made_for_another_row_never_grades_a_row(
    manifest: Manifest, scripted_run: ColumnRun
) -> None:
    """An mcp column's harness altered the traversal row's arguments on the way (the
    kernel still saw /private/a.txt) and never sent private-read-denied's call: that row
    is not exercised (it was graded passed from the traversal row's record, matched by
    tool + resource)."""
    from sharedos.conformance.columns.mcp import _collect
    from sharedos.testing.scripted_model import IssuedCall, ScriptedAttempt
    from tests.conformance.test_harness_columns import _turn

    by_row = {v: k for k, v in scripted_run.row_call_ids.items()}
    (record,) = [a.record for a in scripted_run.attempts if by_row[a.call_id] == "traversal-denied"]
    correlation = {"correlation": {"claudecode/toolUseId": "toolu_1"}}
    record = record | {
        "arguments": {"path": "/public/./../private/a.txt"},
        "diagnostics": (record.get("diagnostics") or {}) | correlation,
    }
    call = IssuedCall(
        key="traversal-denied",
        tool="files.read",
        alias="mcp__sharedos__files_read",
        call_id="toolu_1",
        api="anthropic",
        arguments={"path": "/public/../private/a.txt"},
    )
    result = _turn("claude-code", [call])
    result.evidence.append(record)
    column = ColumnRun(
        column_id="mcp/claude-code/http",
        kind=ColumnKind.MCP,
        label="Claude Code (http)",
        match_by="tool_resource",
        bindings=scripted_run.bindings,
    )
    plan = [ScriptedAttempt("traversal-denied", "files.read", dict(call.arguments))]
    _collect(column, result, manifest.default_context, manifest.default_policy, plan)
    assert any("the harness changed the arguments" in n for n in column.notes)
    cells = {c.row_id: c for c in grade_column(manifest, column)}
    assert cells["private-read-denied"].grade is Grade.NOT_EXERCISED
    # and the traversal row itself (match_arguments): the kernel never saw it as written
    assert cells["traversal-denied"].grade is Grade.NOT_EXERCISED
    # a tie on the tool alone (no harness id, the arguments changed) names no row: the
    # record is matched on tool + resource, as before
    del record["diagnostics"]["correlation"]
    result.evidence[:] = [record]
    column.attempts.clear()
    _collect(column, result, manifest.default_context, manifest.default_policy, plan)
    assert column.attempts[0].row is None


def test_the_json_report_escapes_what_the_text_and_html_spell(
    manifest: Manifest, tmp_path: Path
) -> None:
    # a column's reason comes from a harness probe (its stderr): the text and HTML reports
    # spell a bidi override or a C1 CSI in it, the JSON report wrote them raw
    import json

    from sharedos.conformance.report import write_reports

    why = "dsh --version said: ok\u202e\u2066\x9b2K\u200b"
    dsh = ColumnRun.unavailable("mcp/dsh", ColumnKind.MCP, "dsh", why)
    report = build_report(manifest, [dsh])
    paths = write_reports(report, tmp_path / "out")
    for form, path in paths.items():
        text = path.read_text(encoding="utf-8")
        assert not {"\u202e", "\u2066", "\x9b", "\u200b"} & set(text), (form, ascii(text))
    doc = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert doc["columns"][0]["unavailable_reason"] == why
