"""Column plumbing that needs no CLI: grouping, expansion, and a harness that cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedos.conformance.columns.base import ColumnOptions
from sharedos.conformance.manifest import load_manifest
from sharedos.harness.columns import (
    expand_harnesses,
    expand_transports,
    plan_for,
    run_live_columns,
    run_mcp_columns,
    turn_groups,
)
from sharedos.harness.hostconfig import HostConfigError, default_host_config


def test_turn_groups_cover_every_row_once_default_first() -> None:
    manifest = load_manifest()
    groups = turn_groups(manifest)
    assert (groups[0][0], groups[0][1]) == (manifest.default_context, manifest.default_policy)
    ids = [r.id for _, _, rows in groups for r in rows]
    assert sorted(ids) == sorted(r.id for r in manifest.rows)
    plan, notes = plan_for(groups[0][2])
    assert [a.key for a in plan] == [r.id for r in groups[0][2]] and notes == []


def test_expansions() -> None:
    host = default_host_config()
    assert expand_harnesses(["all"], host) == ["claude-code", "codex", "pi", "pi-adapter", "dsh"]
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
    runs = await run_mcp_columns(options)
    by_id = {r.column_id: r for r in runs}
    assert set(by_id) == {"mcp/codex/http", "mcp/codex/stdio", "mcp/nope"}
    assert not by_id["mcp/codex/http"].available
    assert "/nonexistent/codex not found" in (by_id["mcp/codex/http"].unavailable_reason or "")
    assert "no harness 'nope'" in (by_id["mcp/nope"].unavailable_reason or "")
    live = await run_live_columns(options)
    assert [r.column_id for r in live] == ["live/codex", "live/nope"]
    assert not any(r.available for r in live)
