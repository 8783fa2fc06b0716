"""The scripted column against the real kernel: every row passes in every shape,
and a deliberately broken rule makes exactly the matching cells fail."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sharedos.conformance.columns.base import ColumnOptions
from sharedos.conformance.grading import Grade
from sharedos.conformance.manifest import Manifest, parse_manifest
from sharedos.conformance.report import render_text
from sharedos.conformance.runner import run_report
from sharedos.evidence import SqliteEvidenceStore
from sharedos.harness.shapes import SHAPE_NAMES
from sharedos.resources import shipped_dir

REQUIRED_ROWS = {
    "public-read-allowed",
    "private-read-denied",
    "private-read-admin-allowed",
    "traversal-denied",
    "write-outside-home-denied",
    "not-in-run-policy",
    "unpublished-tool",
    "malformed-name-space",
    "malformed-name-long",
    "malformed-name-unicode",
    "invalid-arguments",
    "handler-failure",
}


@pytest.mark.anyio
async def test_every_row_passes_in_every_shape(manifest: Manifest, tmp_path: Path) -> None:
    report, _ = await run_report(
        manifest, ["scripted"], options=ColumnOptions(manifest=manifest, workdir=tmp_path)
    )
    assert [c.column_id for c in report.columns] == [f"scripted/{s}" for s in SHAPE_NAMES]
    assert {r.id for r in report.rows} >= REQUIRED_ROWS
    local = {r.id for r in manifest.local_rows()}
    for row, cells in zip(report.rows, report.cells, strict=True):
        for cell in cells:
            if row.id in local:
                # the driver plays the harness: there is no shell of its own to attempt with
                assert cell.grade is Grade.NOT_AVAILABLE, (row.id, cell.column_id)
                assert "HarnessDriver plays the harness" in cell.detail
                continue
            assert cell.grade is Grade.PASSED, (row.id, cell.column_id, cell.detail)
            assert cell.attempts == 1
    assert report.ok and report.catalog_check.equal
    for col in report.columns:
        # denied and failed stay distinguishable in the record
        # failed: handler-failure, invalid-arguments and the three brokered link rows;
        # denied includes release-write-needs-approval (approval_required, out of band)
        assert col.counts.by_reason.get("approval_required") == 1
        assert col.counts.denied == 13 and col.counts.failed == 5 and col.counts.succeeded == 5
        assert col.inconsistent_records == []
        assert col.identity is not None and col.identity.catalog_hash
        assert col.identity.declared_model == "sharedos-scripted-model"


@pytest.mark.anyio
async def test_raw_names_reach_the_kernel_and_every_record_carries_identity(
    manifest: Manifest, tmp_path: Path
) -> None:
    keep = tmp_path / "work"
    keep.mkdir()
    _, runs = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(manifest=manifest, workdir=keep),
        keep_workdir=keep,
    )
    db = Path(runs[0].evidence_path or "")
    assert db.is_file()
    with SqliteEvidenceStore(db) as store:
        records = store.query()
    kernel = [r for r in manifest.rows if r.local is None]
    assert len(records) == len(kernel) * len(SHAPE_NAMES)
    tools = {r.tool for r in records}
    # the malformed names arrive exactly as the rows attempt them, in every shape
    for raw in ("files read", "f" * 200, "files\u2024read", "files.exec"):
        assert raw in tools
        assert sum(1 for r in records if r.tool == raw) == len(SHAPE_NAMES)
    for rec in records:
        assert rec.identity is not None
        assert rec.identity["column"] == "scripted"
        assert rec.identity["catalogHash"] == rec.catalog_hash
        assert rec.identity["policyBundleHash"] == rec.policy_hash
        assert rec.diagnostics is not None and rec.diagnostics["shape"] in SHAPE_NAMES
    # the dotted name was carried as the portable escape on the OpenAI/Anthropic/dsh wires
    # (dsh's own names are [A-Za-z0-9_-]; pi-ai carries any string)
    wire = {
        (r.diagnostics or {})["shape"]: (r.diagnostics or {})["wireName"]
        for r in records
        if r.tool == "files.read"
    }
    assert wire["responses"] == wire["anthropic"] == wire["dsh"] == "files_dread"
    assert wire["pi"] == "files.read"


def _broken_rules(tmp_path: Path) -> Path:
    """A copy of the shipped rules with the /private forbid removed."""
    src = (shipped_dir("rules") / "files.sos").read_text(encoding="utf-8")
    broken, n = re.subn(
        r'@id\("files-private-admins-only"\)\s*\nforbid \* on "/private/\*\*" unless "admin" in context\.roles\n',
        "",
        src,
    )
    assert n == 1, "the shipped rule changed shape; update this test"
    out = tmp_path / "rules"
    out.mkdir()
    (out / "files.sos").write_text(broken, encoding="utf-8")
    return out


@pytest.mark.anyio
async def test_a_broken_rule_makes_the_matching_cells_fail(
    manifest: Manifest, tmp_path: Path
) -> None:
    rules = _broken_rules(tmp_path)
    report, _ = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(manifest=manifest, workdir=tmp_path, policy_paths=(rules,)),
    )
    failing = {"private-read-denied", "traversal-denied"}
    brokered = {r.id for r in manifest.brokered_rows()}
    for row, cells in zip(report.rows, report.cells, strict=True):
        for cell in cells:
            if manifest.row(row.id).local is not None:
                assert cell.grade is Grade.NOT_AVAILABLE, (row.id, cell.detail)
            elif row.id in brokered:
                # the copy holds files.sos alone: the git fixture's rules need rules/git.sos,
                # so the brokered rows are not available (said why), never red or skipped
                assert cell.grade is Grade.NOT_AVAILABLE, (row.id, cell.detail)
                assert "do not compile with this run's rules" in cell.detail
                assert "no requirement of namespace 'git' has action 'read'" in cell.detail
            elif row.id in failing:
                assert cell.grade is Grade.FAILED, (row.id, cell.column_id)
                assert cell.expected == "denied/forbidden"
                assert cell.actual == "denied/no_matching_permit"
                assert cell.evidence and cell.evidence[0]["reason"] == "no_matching_permit"
            else:
                assert cell.grade is Grade.PASSED, (row.id, cell.column_id, cell.detail)
    assert not report.ok
    assert report.totals["failed"] == len(failing) * len(SHAPE_NAMES)
    text = render_text(report)
    assert "Failed cells" in text
    assert (
        "private-read-denied in scripted/responses: expected denied/forbidden, got denied/no_matching_permit"
        in text
    )


@pytest.mark.anyio
async def test_one_shape_only(manifest: Manifest, tmp_path: Path) -> None:
    report, _ = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(manifest=manifest, workdir=tmp_path, shapes=("anthropic",)),
    )
    assert [c.column_id for c in report.columns] == ["scripted/anthropic"]
    assert report.ok


@pytest.mark.anyio
async def test_a_turn_that_breaks_off_leaves_its_rows_not_exercised(
    manifest: Manifest, tmp_path: Path
) -> None:
    # two model steps of three calls each, then the driver cuts the turn off
    report, runs = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(manifest=manifest, workdir=tmp_path, shapes=("dsh",), max_steps=2),
    )
    cells = {row.id: cells[0] for row, cells in zip(report.rows, report.cells, strict=True)}
    # per turn (manifest order within it): step 1's three results reached the model;
    # step 2's calls were recorded but their results never went back (a failure of the
    # loop, not a pass); the rest of the turn never happened (not exercised). The
    # one-row turns (admin, read-only) completed.
    expected: dict[str, Grade] = {}
    for _, _, rows in (
        (
            c,
            p,
            [
                r
                for r in manifest.rows
                if (manifest.context_of(r), manifest.policy_of(r)) == (c, p) and r.local is None
            ],
        )
        for c, p in dict.fromkeys(
            (manifest.context_of(r), manifest.policy_of(r)) for r in manifest.rows
        )
    ):
        for i, row in enumerate(rows):
            expected[row.id] = (
                Grade.PASSED if i < 3 else Grade.FAILED if i < 6 else Grade.NOT_EXERCISED
            )
    expected |= {r.id: Grade.NOT_AVAILABLE for r in manifest.local_rows()}
    assert {k: c.grade for k, c in cells.items()} == expected
    assert sum(g is Grade.FAILED for g in expected.values()) == 3 + 3  # default + brokered turns
    assert all(
        "never reached the model" in c.detail for c in cells.values() if c.grade is Grade.FAILED
    )
    assert cells["handler-failure"].grade is Grade.NOT_EXERCISED
    assert sum("aborted" in n and "after 2 steps" in n for n in runs[0].notes) == 2


_SPELLED_ALIKE = """
version = 1
title = "two turns whose context and policy names spell alike"
default_context = "alice"
default_policy = "x-p"
[contexts.alice]
principal = "alice"
[contexts.alice-x]
principal = "alice"
[policies.x-p]
name = "x-p"
mode = "strict"
managed = ["files.read"]
harness_local = ["shell.bounded"]
[policies.p]
name = "p"
mode = "strict"
managed = ["files.read"]
harness_local = ["shell.bounded"]
[sandbox]
[sandbox.files]
"/public/a.txt" = "public file a\\n"
[[rows]]
id = "first"
title = "in turn alice / x-p"
tool = "files.read"
arguments = { path = "/public/a.txt" }
expect = { outcome = "succeeded" }
[[rows]]
id = "second"
title = "in turn alice-x / p"
tool = "files.read"
context = "alice-x"
policy = "p"
arguments = { path = "/private/a.txt" }
expect = { outcome = "denied", reason = "forbidden" }
"""


@pytest.mark.anyio
async def test_each_turn_reads_back_only_its_own_records(tmp_path: Path) -> None:
    """(alice, x-p) and (alice-x, p) once made one turn id: the second turn read the first
    turn's record back as its own, and the first row failed ("the result never reached
    the model") though it had passed."""
    manifest = parse_manifest(_SPELLED_ALIKE, "alike.toml")
    report, runs = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(manifest=manifest, workdir=tmp_path, shapes=("pi",)),
    )
    (run,) = runs
    assert sorted(a.call_id for a in run.attempts) == sorted(run.row_call_ids.values())
    assert len({a.record["turn_id"] for a in run.attempts}) == 2
    assert [c.grade for c in report.cells[0] + report.cells[1]] == [Grade.PASSED] * 2


@pytest.mark.anyio
async def test_each_scripted_turn_is_opened_and_sealed(manifest: Manifest, tmp_path: Path) -> None:
    """Every turn closes with its seal, as a bridge's does: the scripted column's turns
    were opened by their first row and never sealed, so the demo's store (README:
    `sharedos evidence verify --db reports/evidence.sqlite`) read `0 sealed`, and with
    `--require-seal` every turn was `unsealed`, "never closed: its host died"."""
    from sharedos.evidence.verify import verify_store

    # two turns' rows (alice's, the admin's), one of them waiting on an approval that the
    # turn's close expires before its seal; no brokered upstream to start
    wanted = {"public-read-allowed", "release-write-needs-approval", "private-read-admin-allowed"}
    rows = [r for r in manifest.rows if r.id in wanted]
    small = manifest.model_copy(update={"rows": rows, "upstreams": {}})
    keep = tmp_path / "work"
    keep.mkdir()
    _, runs = await run_report(
        small,
        ["scripted"],
        options=ColumnOptions(manifest=small, workdir=keep, shapes=("pi",)),
        keep_workdir=keep,
    )
    with SqliteEvidenceStore(Path(runs[0].evidence_path or ""), read_only=True) as store:
        report = verify_store(store, require_seal=True)
        turns = {r.turn_id for r in store.query()}
        openings = {t: [link for link in store.iter_links(t) if link.kind == "open"] for t in turns}
    assert report.problems == [], [str(p) for p in report.problems]
    assert turns and report.sealed == len(turns)
    for turn, opening in openings.items():  # opened by the column, with the catalogue it offered
        assert len(opening) == 1, turn
