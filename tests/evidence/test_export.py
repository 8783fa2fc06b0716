# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)
"""``sharedos evidence export --format jsonl|csv`` streams: its memory does not grow with the store.

The store is filled fast with one bulk INSERT (rows as a host would write
them, without their chain links: export reads records, not links). The export
runs in its own process, whose peak RSS (``wait4``) is compared for a small
and a large store: the difference must stay small. ``make test`` compares
5,000 with 50,000 records (loading 50,000 would take over 100 MB, so the bound
still tells streaming from loading); ``make stress`` (the ``stress`` marker)
10,000 with 1,000,000.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sharedos.evidence import EvidenceRecord, arguments_digest
from sharedos.evidence.export import CSV_COLUMNS, write_csv
from sharedos.evidence.record import OutcomeRecord
from sharedos.outcomes import Outcome
from tests.evidence.stores import Opener, backend, opener, store  # noqa: F401  (fixtures)

LARGE = 50_000
MILLION = 1_000_000
SMALL = 5_000
#: the small store the million-record run compares with
SMALL_STRESS = 10_000
#: what the export may grow by between the small and the large store (loading them would
#: take over a hundred megabytes)
MAX_GROWTH_KB = 40_000

_ROW = (
    "'files.read'",
    "'2026-12-02T10:00:00.000000Z'",
    "'sha256:" + "0" * 64 + "'",
    '\'{"path":"/public/a.txt"}\'',
    "'allow'",
    "'/public/a.txt'",
    "'files'",
    "'read'",
    "'[\"files.sos:5\"]'",
    "'alice'",
)


def bulk_fill(kind: str, location: str, n: int) -> None:
    """``n`` attempts with outcomes, in one statement each (100 turns; placeholder links)."""
    cols = (
        "turn_id, pos, kind, prev_hash, hash, call_id, tool, started_at, arguments_digest, "
        "arguments, effect, resource, namespace, action, rule_ids, principal"
    )
    values = ", ".join(_ROW)
    outcomes = (
        "INSERT INTO chain (turn_id, pos, kind, prev_hash, hash, attempt, outcome, finished_at, "
        f"duration_ms) SELECT turn_id, pos + {n}, 'outcome', '', '', seq, 'succeeded', "
        "'2026-12-02T10:00:00.000300Z', 0.3 FROM chain WHERE kind = 'attempt'"
    )
    if kind == "postgresql":
        import psycopg

        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO chain ({cols}) SELECT 'bulk-' || (g % 100), g, 'attempt', '', '', "
                f"'c' || g, {values} FROM generate_series(1, {n}) AS g"
            )
            conn.execute(outcomes)
        return
    conn = sqlite3.connect(location, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.execute(
            f"WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {n}) "
            f"INSERT INTO chain ({cols}) SELECT 'bulk-' || (i % 100), i, 'attempt', '', '', "
            f"'c' || i, {values} FROM g"
        )
        conn.execute(outcomes)
        conn.execute("COMMIT")
    finally:
        conn.close()


def export_peak_kb(db: str, fmt: str, out: Path) -> int:
    """Run the export in its own process; its peak resident memory in KiB."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from sharedos.cli.main import main; main()",
            "evidence",
            "export",
            "--db",
            db,
            "--format",
            fmt,
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    return int(usage.ru_maxrss)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_export_memory_does_not_grow_with_the_store(
    tmp_path: Path, backend: tuple[str, str], fmt: str
) -> None:
    _flat(tmp_path, backend, fmt, LARGE)


@pytest.mark.stress
@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_million_records_export_in_flat_memory(
    tmp_path: Path, backend: tuple[str, str], fmt: str
) -> None:
    _flat(tmp_path, backend, fmt, MILLION, SMALL_STRESS)


def _flat(
    tmp_path: Path, backend: tuple[str, str], fmt: str, large: int, small: int = SMALL
) -> None:
    kind, _ = backend
    peaks: dict[int, int] = {}
    for n in (small, large):
        if kind == "sqlite":
            location = str(tmp_path / f"e{n}.db")
        else:
            location = _fresh_database(backend[1], n)
        _open(location).close()  # the schema
        bulk_fill(kind, location, n)
        out = tmp_path / f"export-{n}.{fmt}"
        peaks[n] = export_peak_kb(location, fmt, out)
        with out.open(encoding="utf-8") as fh:
            lines = sum(1 for _ in fh)
        assert lines == n + (1 if fmt == "csv" else 0)
        assert oct(out.stat().st_mode & 0o777) == "0o600"
    growth = peaks[large] - peaks[small]
    print(
        f"\nexport {kind} {fmt}: peak RSS {peaks[small]} KiB for {small:,}, {peaks[large]} KiB for {large:,}"
    )
    assert growth < MAX_GROWTH_KB, f"peak RSS {peaks} KiB: grew {growth} KiB"


def _open(location: str) -> Any:
    from sharedos.evidence.url import open_store

    return open_store(location)


def _fresh_database(pg_url: str, n: int) -> str:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    old = conninfo_to_dict(pg_url)["dbname"]
    name = f"{old}_x{n}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return pg_url.replace(f"/{old}?", f"/{name}?", 1)


def test_jsonl_is_exact_and_csv_is_safe_for_spreadsheets(store: Any, tmp_path: Path) -> None:
    seq = store.begin(
        EvidenceRecord(
            turn_id="T",
            call_id="c1",
            tool='=HYPERLINK("http://evil")',
            started_at="2026-12-02T10:00:00.000000Z",
            arguments_digest=arguments_digest({"path": "+x"}),
            arguments={"path": "+x", "é": "ü"},
            resource="@/public/a",
            rule_ids=("files.sos:5",),
        )
    )
    store.finish(seq, OutcomeRecord(Outcome.SUCCEEDED, "2026-12-02T10:00:01Z", 1.0))
    from click.testing import CliRunner

    from sharedos.cli.main import main

    db = getattr(store, "url", None) or store.path
    jsonl = CliRunner().invoke(main, ["evidence", "export", "--db", db, "--format", "jsonl"])
    assert jsonl.exit_code == 0, jsonl.output
    (line,) = jsonl.output.splitlines()
    record = json.loads(line)
    assert record["tool"] == '=HYPERLINK("http://evil")' and record["arguments"]["é"] == "ü"
    assert record["status"] == "succeeded" and record["seq"] == seq
    buf = io.StringIO()
    write_csv(store.query(), buf)
    header, row = list(csv.reader(io.StringIO(buf.getvalue())))
    assert tuple(header) == CSV_COLUMNS
    cells = dict(zip(header, row, strict=True))
    assert cells["tool"].startswith("'=") and cells["resource"] == "'@/public/a"
    assert json.loads(cells["arguments"]) == {"path": "+x", "é": "ü"}
    assert json.loads(cells["rule_ids"]) == ["files.sos:5"]


def test_a_csv_cell_holding_a_carriage_return_stays_one_cell(store: Any) -> None:
    """The writer quoted a cell holding its line terminator (``\\n``), a comma or a quote,
    not one holding a bare CR: a tool name the model chose as ``files.nope CR files.read``
    was written unquoted, and a CSV reader (a spreadsheet too) ends the row there: the
    attempt read as a row cut after its tool ``files.nope`` (no outcome, no reason) and a
    second row starting ``files.read``. One attempt is one row, its name exact."""
    forged = "files.nope\rfiles.read"
    seq = store.begin(
        EvidenceRecord(
            turn_id="T",
            call_id="c1",
            tool=forged,
            started_at="2026-12-02T10:00:00.000000Z",
            arguments_digest=arguments_digest({}),
            arguments={},
        )
    )
    store.finish(seq, OutcomeRecord(Outcome.FAILED, "2026-12-02T10:00:01Z", 1.0))
    buf = io.StringIO()
    write_csv(store.query(), buf)
    text = buf.getvalue()
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert len(rows) == 2, rows
    assert dict(zip(rows[0], rows[1], strict=True))["tool"] == forged
    assert text.endswith("\n") and "\r\n" not in text  # rows still end in a line feed
