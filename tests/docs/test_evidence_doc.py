"""docs/evidence.md's fleet-wide revision query says which policy decided each call,
on a real PostgreSQL store where a turn has two writers holding different bundles."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import psycopg

from sharedos.evidence.appender import Opening
from sharedos.evidence.postgres import PostgresEvidenceStore
from tests.evidence.test_postgres import OK, attempt

DOC = Path(__file__).resolve().parents[2] / "docs" / "evidence.md"


def _revision_query() -> str:
    text = DOC.read_text(encoding="utf-8")
    stamped = text[text.index("* **Stamped.**") :]
    blocks = re.findall(r"```sql\n(.*?)```", stamped, re.S)
    assert blocks, "docs/evidence.md has no revision query"
    return str(blocks[0]).strip().rstrip(";").replace("\n  ", "\n")


def test_the_revision_query_names_the_bundle_that_decided_each_call(pg_url: str) -> None:
    old, new = PostgresEvidenceStore(pg_url), PostgresEvidenceStore(pg_url)
    try:
        # the turn opened under r1; its second writer (a bridge relaunched after the
        # bundle update) decides its own call with r2
        old.open_turn(
            Opening(
                turn_id="T",
                opened_at="2026-12-06T10:00:00.000000Z",
                policy_revision="r1",
                identity='{"policyBundleRevision":"r1"}',
            )
        )
        for store, call, revision in ((old, "a", "r1"), (new, "b", "r2")):
            record = dataclasses.replace(attempt(call), identity={"policyBundleRevision": revision})
            store.finish(store.begin(record), OK)
    finally:
        old.close()
        new.close()
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(_revision_query()).fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [("r1", "succeeded", 1), ("r2", "succeeded", 1)]


def _doc(name: str) -> str:
    return (DOC.parent / name).read_text(encoding="utf-8")


def test_the_schema_version_the_docs_state_is_the_stores() -> None:
    """kernel.md, contracts.md and evidence.md said schema 4 (`PRAGMA user_version = 4`)
    two versions after the stores had moved on to 6."""
    from sharedos.evidence import pg_schema, sqlite_schema
    from sharedos.evidence.migrate import LATEST

    assert sqlite_schema.SCHEMA_VERSION == pg_schema.LATEST == LATEST
    kernel = _doc("kernel.md")
    assert re.findall(r"`PRAGMA user_version = (\d+)`", kernel) == [str(LATEST)]
    assert re.findall(r"### Record schema \(version (\d+):", kernel) == [str(LATEST)]
    assert re.findall(r"Schema version (\d+) on both", _doc("contracts.md")) == [str(LATEST)]
    assert re.findall(r"\(WAL, schema version (\d+);", _doc("contracts.md")) == [str(LATEST)]
    evidence = _doc("evidence.md")
    assert re.findall(r"on the same schema \(version (\d+)\)", evidence) == [str(LATEST)]
    table = evidence[evidence.index("## Schema versions") :]
    table = table[: table.index("\n\n", table.index("| version |"))]
    assert re.findall(r"(?m)^\| (\d+) \|", table) == [str(v) for v in range(1, LATEST + 1)]


def test_the_newer_schema_refusal_reads_as_documented() -> None:
    from sharedos.evidence.migrate import LATEST, refuse_unreadable
    from sharedos.evidence.store import EvidenceStoreError

    try:
        refuse_unreadable("…", LATEST + 1, writing=False)
    except EvidenceStoreError as exc:
        said = str(exc)
    else:  # pragma: no cover - the refusal is the point
        raise AssertionError("a newer schema was not refused")
    assert f"`{said}`" in " ".join(_doc("evidence.md").split())


def test_the_wait_at_open_on_a_locked_file_is_the_stores() -> None:
    """kernel.md said a writable open of a locked SQLite file waits 1.5 s (a call's busy
    wait); it waits `_OPEN_WAIT_S` (30 s), for a host creating or migrating the file."""
    from sharedos.evidence import sqlite

    row = next(
        line
        for line in _doc("kernel.md").splitlines()
        if line.startswith("| locked by another connection |")
    )
    stated = re.findall(r"open waits (?:up to )?([\d.]+) s", row)
    assert [float(s) for s in stated] == [sqlite._OPEN_WAIT_S]
