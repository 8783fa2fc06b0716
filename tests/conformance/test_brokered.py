"""Brokered rows: the real mcp-server-git behind a tap, graded from the kernel's evidence
and from what the upstream itself received."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sharedos.conformance import upstreams
from sharedos.conformance.columns.base import Attempt, ColumnOptions, ColumnRun
from sharedos.conformance.grading import Cell, Grade, grade_column
from sharedos.conformance.manifest import Manifest
from sharedos.conformance.report import Report, render_text
from sharedos.conformance.runner import run_report
from sharedos.conformance.tap import read_tool_calls
from sharedos.harness.shapes import SHAPE_NAMES
from sharedos.identity import ColumnKind
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.resources import shipped_dir
from sharedos.upstream.broker import UpstreamBroker

pytestmark = pytest.mark.skipif(
    upstreams.git_server_command() is None or shutil.which("git") is None,
    reason="mcp-server-git (the dev extra) and git are needed",
)


def _brokered_cells(report: Report) -> dict[str, list[Cell]]:
    return {
        row.id: cells
        for row, cells in zip(report.rows, report.cells, strict=True)
        if row.id.startswith("brokered-")
    }


@pytest.mark.anyio
async def test_the_upstream_receives_exactly_the_allowed_calls_in_canonical_form(
    manifest: Manifest, tmp_path: Path
) -> None:
    keep = tmp_path / "work"
    keep.mkdir()
    report, runs = await run_report(
        manifest, ["scripted"], options=ColumnOptions(manifest=manifest, workdir=keep),
        keep_workdir=keep,
    )  # fmt: skip
    for cells in _brokered_cells(report).values():
        assert {c.grade for c in cells} == {Grade.PASSED}
    root = Path(runs[0].bindings["git.root"])
    assert (root / "team" / ".git").is_dir() and (root / "other" / ".git").is_dir()
    tap = root.parent / "git.tap" / "tap.jsonl"  # its own directory: the sandbox writes there
    received = [json.loads(line) for line in tap.read_text().splitlines()]
    methods = {m.get("method") for m in received}
    assert {"tools/list", "tools/call"} <= methods  # the tap saw the live session
    calls = read_tool_calls(tap)
    # per shape: brokered-read-allowed and brokered-traversal-canonical, both as the
    # canonical team path; nothing for the other repository, the traversal spelling,
    # or the tool outside the run policy
    assert [(c.name, c.arguments) for c in calls] == [
        ("git_log", {"repo_path": str(root / "team")})
    ] * (2 * len(SHAPE_NAMES))
    assert ".." not in tap.read_text() and "/other" not in tap.read_text()
    cells = _brokered_cells(report)
    denied = cells["brokered-other-repo-denied"][0]
    assert "upstream git received nothing for it" in denied.detail
    canonical = cells["brokered-traversal-canonical"][0]
    assert "the canonical resource, not the spelling sent" in canonical.detail
    # and under which credential identity (the evidence's servedBy): the operator's
    assert canonical.detail.endswith(", under credential shared")
    # the planted links: each call allowed on its path, refused at the forwarder
    assert (root / "team" / "linked").is_symlink() and (root / "team" / "up").is_symlink()
    assert (root / "team" / "pointer" / ".git").is_file()
    for row_id in LINK_ROWS:
        assert "upstream git received nothing for it" in cells[row_id][0].detail
    text = render_text(report)
    assert f"{{git.root}} = {root}" in text
    assert "upstream git (git.*): 12 of 12 tools published" in text
    assert "turn alice/brokered: upstream git received 2 tools/call" in text


LINK_ROWS = (
    "brokered-link-symlinked-repository",
    "brokered-link-symlinked-directory",
    "brokered-link-gitdir-pointer",
)


@pytest.mark.anyio
async def test_without_the_link_check_the_link_rows_turn_red(
    manifest: Manifest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on main before issue 22: the kernel allows the path, the forwarder does not look
    at the disk, the upstream follows the link, and the cells say so from its tap."""

    async def unchecked(self: UpstreamBroker, config: object, resource: str) -> None:
        return None

    monkeypatch.setattr(UpstreamBroker, "check_path", unchecked)
    report, _ = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(manifest=manifest, workdir=tmp_path / "w", shapes=("anthropic",)),
    )
    cells = {k: v[0] for k, v in _brokered_cells(report).items()}
    for row_id in LINK_ROWS:
        assert cells[row_id].grade is Grade.FAILED, row_id
        assert cells[row_id].actual == "succeeded", row_id
    assert cells["brokered-read-allowed"].grade is Grade.PASSED
    assert not report.ok


def _rules_with(tmp_path: Path, extra: str) -> tuple[Path, ...]:
    rules = tmp_path / "rules"
    shutil.copytree(shipped_dir("rules"), rules)
    (rules / "zz-extra.sos").write_text(extra, encoding="utf-8")
    return (rules, shipped_dir("policy"))


@pytest.mark.anyio
async def test_a_rule_that_opens_every_repository_turns_the_brokered_denials_red(
    manifest: Manifest, tmp_path: Path
) -> None:
    """The upstream is not confined to a repository: with a careless permit the refused
    calls are forwarded, the upstream answers them, and the cells say so."""
    paths = _rules_with(tmp_path, 'namespace git\npermit read on "/**"\n')
    report, _ = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(
            manifest=manifest, workdir=tmp_path / "w", shapes=("anthropic",), policy_paths=paths
        ),
    )
    cells = {k: v[0] for k, v in _brokered_cells(report).items()}
    for row_id in ("brokered-other-repo-denied", "brokered-traversal-denied"):
        cell = cells[row_id]
        assert cell.grade is Grade.FAILED, row_id
        assert cell.actual == "succeeded"
    assert cells["brokered-read-allowed"].grade is Grade.PASSED
    assert cells["brokered-not-in-run-policy"].grade is Grade.PASSED
    assert not report.ok


@pytest.mark.anyio
async def test_without_mcp_server_git_the_brokered_rows_are_not_available(
    manifest: Manifest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upstreams, "git_server_command", lambda: None)
    report, _ = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(manifest=manifest, workdir=tmp_path, shapes=("pi",)),
    )
    for row, cells in zip(report.rows, report.cells, strict=True):
        if row.id.startswith("brokered-"):
            assert cells[0].grade is Grade.NOT_AVAILABLE
            assert "mcp-server-git is not installed" in cells[0].detail
        elif row.id.startswith("local-"):
            assert cells[0].grade is Grade.NOT_AVAILABLE  # no harness in the scripted column
        else:
            assert cells[0].grade is Grade.PASSED, row.id
    assert report.ok
    assert "rows not available here (brokered-read-allowed" in render_text(report)


def _column(attempt: Attempt) -> ColumnRun:
    return ColumnRun(
        column_id="scripted/pi",
        kind=ColumnKind.SCRIPTED,
        label="Pi",
        match_by="call_id",
        row_call_ids={"brokered-other-repo-denied": "c1", "brokered-read-allowed": "c1"},
        bindings={"git.root": "/w/git"},
        attempts=[attempt],
    )


def _attempt(
    outcome: Outcome, reason: ReasonCode | None, tool: str, path: str, up: dict
) -> Attempt:
    return Attempt(
        call_id="c1",
        tool=tool,
        resource=path,
        outcome=outcome,
        reason=reason,
        record={"arguments": {"repo_path": path}},
        wire={"upstream": {"upstream": "git", **up}},
    )


@pytest.mark.parametrize(
    ("row_id", "outcome", "reason", "tool", "path", "up", "problem"),
    [
        (
            "brokered-other-repo-denied", Outcome.DENIED, ReasonCode.NO_MATCHING_PERMIT,
            "git.git_status", "/w/git/other", {"calls": 1, "rawCalls": None},
            "the kernel refused the call, yet upstream git received 1 tools/call",
        ),
        (
            "brokered-read-allowed", Outcome.SUCCEEDED, None, "git.git_log", "/w/git/team",
            {"calls": 0, "rawCalls": None, "successes": 1},
            "upstream git received 0 tools/call request(s) with the arguments that were authorized",
        ),
        (
            "brokered-read-allowed", Outcome.SUCCEEDED, None, "git.git_log", "/w/git/team",
            {"calls": 1, "rawCalls": None, "successes": 2},
            "the kernel recorded 2 success(es)",
        ),
    ],
)  # fmt: skip
def test_the_upstreams_account_can_fail_a_cell_the_kernel_record_alone_would_pass(
    manifest: Manifest,
    row_id: str,
    outcome: Outcome,
    reason: ReasonCode | None,
    tool: str,
    path: str,
    up: dict[str, object],
    problem: str,
) -> None:
    column = _column(_attempt(outcome, reason, tool, path, up))
    (cell,) = [c for c in grade_column(manifest, column) if c.row_id == row_id]
    assert cell.grade is Grade.FAILED and problem in cell.detail, cell.detail
    # the same attempt with a clean upstream account passes
    clean = {"calls": 0 if outcome is Outcome.DENIED else 2, "rawCalls": None, "successes": 2}
    column = _column(_attempt(outcome, reason, tool, path, clean))
    (cell,) = [c for c in grade_column(manifest, column) if c.row_id == row_id]
    assert cell.grade is Grade.PASSED, cell.detail


def test_a_success_forwarded_as_spelled_not_as_authorized_fails(manifest: Manifest) -> None:
    """brokered-traversal-canonical: the upstream must get the canonical path, not the spelling."""
    spelled = "/w/git/other/../team"
    attempt = Attempt(
        call_id="c1",
        tool="git.git_log",
        resource="/w/git/team",
        outcome=Outcome.SUCCEEDED,
        record={"arguments": {"repo_path": spelled}},
        wire={"upstream": {"upstream": "git", "calls": 1, "rawCalls": 1, "successes": 1}},
    )
    column = _column(attempt).model_copy(
        update={"row_call_ids": {"brokered-traversal-canonical": "c1"}}
    )
    (cell,) = [
        c for c in grade_column(manifest, column) if c.row_id == "brokered-traversal-canonical"
    ]
    assert cell.grade is Grade.FAILED
    assert "received the arguments as the harness wrote them" in cell.detail


@pytest.mark.anyio
async def test_a_workdir_a_policy_pattern_cannot_name_leaves_the_rows_not_available(
    manifest: Manifest, tmp_path: Path
) -> None:
    """A space or a glob character in the path would change what the fixture's permit means:
    the fixture is refused, with the reason, rather than compiled into a different rule."""
    work = tmp_path / "has space*"
    work.mkdir()
    report, _ = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(manifest=manifest, workdir=work, shapes=("dsh",)),
        keep_workdir=work,
    )
    cells = _brokered_cells(report)
    assert {c[0].grade for c in cells.values()} == {Grade.NOT_AVAILABLE}
    assert all("cannot name literally" in c[0].detail for c in cells.values())
    assert report.ok
