"""Column plumbing that needs no CLI: grouping, expansion, and a harness that cannot run."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sharedos.conformance.columns import live, mcp
from sharedos.conformance.columns.base import ColumnOptions, ColumnRun
from sharedos.conformance.columns.harnesses import (
    expand_harnesses,
    expand_transports,
    plan_for,
    turn_groups,
)
from sharedos.conformance.columns.mcp import _collect
from sharedos.conformance.manifest import load_manifest
from sharedos.harness.hostconfig import HostConfigError, default_host_config, parse_host_config
from sharedos.harness.outputs import HarnessOutput
from sharedos.harness.process import ProcessResult
from sharedos.harness.runtime import HarnessTurnResult
from sharedos.identity import ColumnKind, McpSupport, SystemIdentity
from sharedos.testing.scripted_model import IssuedCall, ScriptedAttempt


def test_turn_groups_cover_every_row_once_default_first() -> None:
    manifest = load_manifest()
    groups = turn_groups(manifest)
    assert (groups[0][0], groups[0][1]) == (manifest.default_context, manifest.default_policy)
    ids = [r.id for _, _, rows in groups for r in rows]
    assert sorted(ids) == sorted(r.id for r in manifest.rows)
    plan, notes = plan_for(groups[0][2], canary_port=9)
    assert [a.key for a in plan] == [r.id for r in groups[0][2]] and notes == []
    # without a canary the network row cannot be planned, and the notes say so
    plan, notes = plan_for(groups[0][2])
    assert "local-network-canary" not in [a.key for a in plan]
    assert notes == ["local-network-canary: no canary listens in this column; not attempted"]


def test_expansions() -> None:
    host = default_host_config()
    assert expand_harnesses(["all"], host) == ["claude-code", "codex", "pi", "pi-adapter", "dsh"]
    host = parse_host_config("[harness.codex]\n")
    assert expand_harnesses(["all"], host) == ["codex"]  # only what the host configures
    assert expand_harnesses(["codex", "codex"], host) == ["codex"]
    assert expand_transports(None, "stdio") == ["stdio"]
    assert expand_transports("all", "http") == ["http", "stdio"]
    with pytest.raises(HostConfigError):
        expand_transports("pigeon", "http")


@pytest.mark.anyio
async def test_a_harness_that_cannot_start_is_kept_and_says_why(tmp_path: Path) -> None:
    host = tmp_path / "host.toml"
    host.write_text("[harness.codex]\ncommand = ['/nonexistent/codex']\n")
    options = ColumnOptions(
        manifest=load_manifest(),
        workdir=tmp_path,
        harnesses=("codex", "nope"),
        transport="all",
        host_config=host,
    )
    runs = await mcp.run(options)
    by_id = {r.column_id: r for r in runs}
    assert set(by_id) == {"mcp/codex/http", "mcp/codex/stdio", "mcp/nope"}
    assert not by_id["mcp/codex/http"].available
    assert "/nonexistent/codex not found" in (by_id["mcp/codex/http"].unavailable_reason or "")
    assert "no harness 'nope'" in (by_id["mcp/nope"].unavailable_reason or "")
    lives = await live.run(options)
    assert [r.column_id for r in lives] == ["live/codex", "live/nope"]
    assert not any(r.available for r in lives)


def _turn(harness: str, issued: list[IssuedCall]) -> HarnessTurnResult:
    identity = SystemIdentity(
        harness=harness,
        harness_version="9.9.9",
        column=ColumnKind.MCP,
        declared_model="sharedos-scripted-model/0",
        mcp_support=McpSupport.NATIVE,
        catalog_hash="c" * 64,
    )
    return HarnessTurnResult(
        harness=harness,
        transport="http",
        identity=identity,
        turn_id="t1",
        process=ProcessResult(0, False, False, 1.0, "", ""),
        evidence=[],
        output=HarnessOutput(),
        issued=issued,
        aliases_shown={"files.read": "mcp(files.read)"},
        catalog_names=("files.read",),
        model_requests=2,
        offered_tools=["read", "mcp", "sharedos_files_read"],
        port_closed_after_turn=True,
        turn_dir=Path("."),
    )


def test_a_refused_guess_is_not_exercised_and_the_note_quotes_the_harness() -> None:
    """No evidence for a guessed call: the note says who refused it and what it said."""
    guess = IssuedCall(
        key="unpublished-tool",
        tool="files.exec",
        alias="mcp(files.exec)",
        call_id="call_sos000abc",
        api="chat",
        arguments={"path": "/public/a.txt"},
        guessed=True,
        reply='Tool "files.exec" not found. Use mcp({ search: "..." }) to search.',
    )
    column = ColumnRun(
        column_id="mcp/pi-adapter/http",
        kind=ColumnKind.MCP,
        label="Pi + pi-mcp-adapter (http)",
        match_by="tool_resource",
    )
    plan = [ScriptedAttempt("unpublished-tool", "files.exec", {"path": "/public/a.txt"})]
    for _ in range(2):  # two turns: the finding is stated once per column
        _collect(column, _turn("pi-adapter", [guess]), "alice", "conformance", plan)
    assert column.attempts == []
    guessed = [
        n for n in column.notes if "unpublished-tool: the model guessed mcp(files.exec)" in n
    ]
    assert len(guessed) == 2
    assert 'answered the model "Tool "files.exec" not found.' in guessed[0]
    findings = [n for n in column.notes if n.startswith("finding about the harness")]
    assert len(findings) == 1
    assert "Pi + pi-mcp-adapter's MCP client refuses tool names it was not offered" in findings[0]
    assert "`mcp` proxy tool" in findings[0] and "not a gap in SharedOS" in findings[0]
    # a guessed row is not reported as "not attempted": it was attempted, and refused
    assert not any("not attempted" in n for n in column.notes)


def test_a_turn_whose_model_never_saw_the_tools_says_so_and_stays_not_exercised() -> None:
    """dsh's MCP discovery is asynchronous: a turn assembled before the tools is not green."""
    manifest = load_manifest()
    plan, _ = plan_for(turn_groups(manifest)[0][2])
    result = _turn("dsh", [])
    result.aliases_shown.clear()
    result.offered_tools[:] = ["bash", "read"]
    column = ColumnRun(
        column_id="mcp/dsh/stdio",
        kind=ColumnKind.MCP,
        label="dsh (stdio)",
        match_by="tool_resource",
        local={},
    )
    _collect(column, result, "alice", "conformance", plan)
    (note,) = [n for n in column.notes if "never offered the SharedOS tools" in n]
    assert "2 model request(s), none carried an mcp__sharedos__ tool" in note
    assert "Not exercised, not retried: " in note and "public-read-allowed" in note
    from sharedos.conformance.grading import grade_column

    cells = grade_column(manifest, column)
    assert {c.grade.value for c in cells} == {"not_exercised"}


def test_the_host_configurations_evidence_mode_reaches_the_store(tmp_path: Path) -> None:
    """``[evidence] synchronous = "FULL"`` is the commit mode of every column's store."""
    from sharedos.conformance.environment import column_environment

    host = parse_host_config('[harness.codex]\n[evidence]\nsynchronous = "FULL"\n')
    assert host.evidence.synchronous == "FULL"
    options = ColumnOptions(
        manifest=load_manifest(), workdir=tmp_path, evidence_synchronous=host.evidence.synchronous
    )
    env = column_environment(options, "full")
    try:
        assert env.evidence.synchronous == "FULL"
        with sqlite3.connect(env.evidence_path) as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        env.close()
    assert parse_host_config("[harness.codex]\n").evidence.synchronous == "NORMAL"
