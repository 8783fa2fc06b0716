"""`sharedos conformance run` with the scripted, live, mcp and client columns side by side (real
CLIs, and the TypeScript SDK and MCP Inspector as programmatic clients).

The run itself is the session's ``full_matrix`` (tests/full_matrix.py), which
tests/harness/test_harness_mcp.py reads too."""

from __future__ import annotations

from typing import Any

import pytest

from tests.full_matrix import FullMatrix

#: every column, every CLI and transport, each turn in its own sandbox: a guard against a
#: hang on a loaded machine, never a measure of speed
pytestmark = [pytest.mark.harness, pytest.mark.timeout(1500)]


def test_report_shows_scripted_live_and_mcp_columns(full_matrix: FullMatrix) -> None:
    out = full_matrix.out
    report = full_matrix.report
    kinds = {c["kind"] for c in report["columns"]}
    assert kinds == {"scripted", "live", "mcp", "client"}
    ids = [c["column_id"] for c in report["columns"]]
    for harness in ("claude-code", "codex", "pi", "pi-adapter", "dsh"):
        for transport in ("http", "stdio"):
            assert f"mcp/{harness}/{transport}" in ids, ids
    assert {"live/claude-code", "live/codex", "live/pi", "live/dsh"} <= set(ids)
    for client in ("ts-sdk", "inspector"):
        for transport in ("http", "stdio"):
            assert f"client/{client}/{transport}" in ids, ids
    http, stdio = by_id_cells(report, "mcp/dsh/http"), by_id_cells(report, "mcp/dsh/stdio")
    dsh = {row: http[row] | stdio[row] for row in http}
    for row in ("public-read-allowed", "private-read-denied", "traversal-denied",
                "write-home-allowed"):  # fmt: skip
        assert dsh[row] == {"passed"}, (row, dsh[row])
    # brokered rows: the real mcp-server-git behind the host's broker, in the scripted and
    # the mcp columns over both transports (a stdio bridge relays to the host's broker)
    brokered = [r["id"] for r in report["rows"] if r["id"].startswith("brokered-")]
    assert len(brokered) == 8  # 3 of them the link rows (issue 22)
    for harness in ("claude-code", "codex", "pi", "pi-adapter", "dsh"):
        for transport in ("http", "stdio"):
            cells = by_id_cells(report, f"mcp/{harness}/{transport}")
            for row in brokered:
                want = {"not_exercised"} if row == "brokered-not-in-run-policy" else {"passed"}
                assert cells[row] == want, (harness, transport, row, cells[row])
    # the programmatic clients make every row's call: the TS SDK sends every name it is
    # given (all rows pass), the Inspector refuses names it was not offered (not exercised)
    unoffered = {
        "not-in-run-policy",
        "unpublished-tool",
        "malformed-name-space",
        "malformed-name-long",
        "malformed-name-unicode",
        "brokered-not-in-run-policy",
    }
    local_rows = {r["id"] for r in report["rows"] if r["id"].startswith("local-")}
    for transport in ("http", "stdio"):
        # harness-local rows: a client column has no harness of its own to try them with
        ts = by_id_cells(report, f"client/ts-sdk/{transport}")
        for row, grades in ts.items():
            assert grades == ({"not_available"} if row in local_rows else {"passed"}), (row, grades)
        inspector = by_id_cells(report, f"client/inspector/{transport}")
        for row, grades in inspector.items():
            want = (
                {"not_available"}
                if row in local_rows
                else {"not_exercised"}
                if row in unoffered
                else {"passed"}
            )
            assert grades == want, (row, grades)
    for shape in ("responses", "anthropic", "pi", "dsh"):
        cells = by_id_cells(report, f"scripted/{shape}")
        assert all(cells[row] == {"passed"} for row in brokered), (shape, cells)
    by_id = {c["column_id"]: c for c in report["columns"]}
    assert not by_id["mcp/codex/stdio"].get("unavailable_rows")
    assert by_id["client/ts-sdk/stdio"]["identity"]["harness"] == "ts-sdk"
    adapter = by_id["mcp/pi-adapter/stdio"]["identity"]
    assert adapter["mcpSupport"] == "extension" and adapter["mcpExtension"] == "pi-mcp-adapter"
    assert by_id["live/claude-code"]["counts"]["attempts"] == 0
    # the same catalogue went to the scripted and mcp columns (default context), so no flag
    assert report["catalog_check"]["equal"] is True, report["catalog_check"]
    assert report["totals"].get("failed", 0) == 0
    # harness-local rows (issue 22): the CLI's own tools against the managed resources,
    # graded from the sandbox's side; green only where the harness ran confined
    local = [r["id"] for r in report["rows"] if r["id"].startswith("local-")]
    assert len(local) == 7
    for harness in ("claude-code", "codex", "pi", "pi-adapter", "dsh"):
        for transport in ("http", "stdio"):
            cid = f"mcp/{harness}/{transport}"
            assert by_id[cid]["confined"] is True, by_id[cid]["confinement"]
            cells = by_id_cells(report, cid)
            for row in local:
                want = {"informational"} if row == "local-open-shell-read-secret" else {"passed"}
                assert cells[row] == want, (cid, row, cells[row])
    for cid in ("scripted/responses", "live/codex"):
        assert all(by_id_cells(report, cid)[row] == {"not_available"} for row in local), cid
    assert report["totals"]["informational"] == 10
    text = next(out.glob("*.txt")).read_text()
    assert "mcp/claude-code/stdio" in text or "Claude Code (stdio)" in text
    assert "* mcp/codex/http: confined by bubblewrap" in text
    assert "Informational (open run policy: not confined, never a refusal)" in text
    html = next(out.glob("*.html")).read_text()
    assert "Pi + pi-mcp-adapter (stdio)" in html and "<script src=" not in html
    assert "every harness column ran in an OS sandbox" in html


def by_id_cells(report: dict[str, Any], column_id: str) -> dict[str, set[str]]:
    """row id -> {grade} of one column of a JSON report."""
    index = [c["column_id"] for c in report["columns"]].index(column_id)
    return {row[index]["row_id"]: {row[index]["grade"]} for row in report["cells"]}
