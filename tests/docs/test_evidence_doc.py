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
