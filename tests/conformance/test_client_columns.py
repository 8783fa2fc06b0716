"""The client columns: the TypeScript SDK and MCP Inspector beside the CLIs in the report.

A programmatic client makes exactly the call it is given, so these columns
exercise every row whose name the client will send — over HTTP and over a
relayed stdio bridge, brokered rows included — and record on each attempt
whether the client accepted the answer (``wire.delivered``): a refusal the
client rejects (a thrown ``McpError``, an Inspector validation failure) fails
the cell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sharedos.conformance.columns.base import ColumnOptions
from sharedos.conformance.columns.client import run as run_client
from sharedos.conformance.grading import grade_column
from sharedos.conformance.manifest import load_manifest
from sharedos.conformance.report import build_report, render_text

pytestmark = [pytest.mark.anyio, pytest.mark.harness]

UNOFFERED = {
    "not-in-run-policy",
    "unpublished-tool",
    "malformed-name-space",
    "malformed-name-long",
    "malformed-name-unicode",
    "brokered-not-in-run-policy",
}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


#: one row of each kind the clients meet: allowed, denied, written, failed in the handler,
#: unoffered (two run policies), brokered allowed, denied and refused as a link, harness-local.
#: The full matrix (tests/cli/test_conformance_columns.py) grades every row with both clients
#: over both transports; here each attempt's wire is checked, on an Inspector process per call.
SAMPLE = (
    "public-read-allowed",
    "private-read-denied",
    "write-home-allowed",
    "handler-failure",
    "unpublished-tool",
    "not-in-run-policy",
    "brokered-read-allowed",
    "brokered-other-repo-denied",
    "brokered-link-symlinked-repository",
    "local-read-secret",
)


async def test_ts_sdk_and_inspector_columns_over_stdio(tmp_path: Path) -> None:
    """Over a relayed stdio bridge, brokered rows included."""
    full = load_manifest()
    manifest = full.model_copy(update={"rows": tuple(r for r in full.rows if r.id in SAMPLE)})
    assert [r.id for r in manifest.rows] == [r.id for r in full.rows if r.id in SAMPLE]
    assert len(manifest.rows) == len(SAMPLE)
    # both clients at once (each column has its own kernel and turn)
    options = ColumnOptions(manifest=manifest, workdir=tmp_path, transport="stdio", jobs=2)
    runs = await run_client(options)
    by_id = {r.column_id: r for r in runs}
    assert set(by_id) == {"client/ts-sdk/stdio", "client/inspector/stdio"}
    unavailable = [r.unavailable_reason for r in runs if not r.available]
    if unavailable:
        pytest.skip(f"clients not installed: {unavailable[0]}")
    for cid, run in by_id.items():
        assert run.identity is not None and run.identity.column == "client"
        grades = {c.row_id: c.grade.value for c in grade_column(manifest, run)}
        for row in manifest.rows:
            if row.local is not None:  # harness-local rows: a client column has no harness
                assert grades[row.id] == "not_available", (cid, row.id, grades[row.id])
                continue
            if cid.startswith("client/ts-sdk/") or row.id not in UNOFFERED:
                want = "passed"
            else:
                # the Inspector refuses a name it was not offered, before any tools/call
                want = "not_exercised"
            assert grades[row.id] == want, (cid, row.id, grades[row.id], run.notes)
        # every answer the client got was a result it accepted: a refusal included
        wires: list[dict[str, Any]] = [a.wire or {} for a in run.attempts]
        assert wires and all(w.get("delivered") is True for w in wires), cid
        refused = [a for a in run.attempts if str(a.outcome) != "succeeded"]
        assert refused and all((a.wire or {}).get("isError") is True for a in refused)
    assert by_id["client/ts-sdk/stdio"].identity.harness_version == "1.32.2"  # type: ignore[union-attr]
    inspector_notes = "\n".join(by_id["client/inspector/stdio"].notes)
    assert "Tool 'files.exec' not found on server." in inspector_notes
    text = render_text(build_report(manifest, runs))
    assert "TypeScript SDK 1.32.2 (stdio)" in text and "MCP Inspector 2.12.0 (stdio)" in text
