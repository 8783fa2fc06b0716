"""A PostgreSQL store replaced under a live write connection is refused (a real server)."""

from __future__ import annotations

import pytest

from sharedos.evidence.postgres import PostgresEvidenceStore
from sharedos.evidence.store import EvidenceStoreError

from .test_postgres import OK, admin, attempt


def test_a_store_id_changed_under_a_live_connection_is_refused(pg_url: str) -> None:
    store = PostgresEvidenceStore(pg_url)
    try:
        store.finish(store.begin(attempt("a")), OK)
        with admin(pg_url) as conn:  # the database at the URL becomes another store
            conn.execute("UPDATE meta SET value = 'another-store' WHERE key = 'store_id'")
        # no connection was lost: the writer keeps the one it holds
        with pytest.raises(EvidenceStoreError) as err:
            store.begin(attempt("b"))
        assert err.value.cause == "replaced"
    finally:
        store.close()


def test_a_store_recreated_under_a_live_connection_is_refused(pg_url: str) -> None:
    store = PostgresEvidenceStore(pg_url)
    try:
        store.finish(store.begin(attempt("a")), OK)
        with admin(pg_url) as conn:  # an operator drops the schema...
            conn.execute(
                "DROP VIEW IF EXISTS attempts, outcomes, turns, seals, links, evidence, approvals CASCADE"
            )
            conn.execute("DROP TABLE chain, checkpoint_heads, checkpoints, meta CASCADE")
        PostgresEvidenceStore(pg_url).close()  # ...and another host creates a new store there
        with pytest.raises(EvidenceStoreError) as err:
            store.begin(attempt("b"))
        assert err.value.cause == "replaced"
    finally:
        store.close()
