"""A PostgreSQL store replaced under a live write connection is refused (a real server)."""

from __future__ import annotations

import pytest

from sharedos.evidence.postgres import PostgresEvidenceStore
from sharedos.evidence.store import EvidenceStoreError

from .test_postgres import OK, admin, attempt, terminate


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


def test_a_store_without_its_id_is_not_written_until_migrated(pg_url: str) -> None:
    """Every write is guarded on ``meta.store_id``: a store that lost it (or never had
    one) is refused for writing with what to run, and the migration gives it one."""
    from sharedos.evidence import migrate

    PostgresEvidenceStore(pg_url).close()
    with admin(pg_url) as conn:
        conn.execute("DELETE FROM meta WHERE key = 'store_id'")
    with pytest.raises(EvidenceStoreError, match=r"no store_id.*sharedos evidence migrate"):
        PostgresEvidenceStore(pg_url)
    PostgresEvidenceStore(pg_url, read_only=True).close()  # reading needs no id
    with admin(pg_url) as conn:
        migrate.pg_migrate(conn)
    store = PostgresEvidenceStore(pg_url)
    try:
        assert store.store_id
        store.finish(store.begin(attempt("a")), OK)
        with admin(pg_url) as conn:  # removed under the live writer: a replaced store
            conn.execute("DELETE FROM meta WHERE key = 'store_id'")
        with pytest.raises(EvidenceStoreError) as err:
            store.begin(attempt("b"))
        assert err.value.cause == "replaced"
    finally:
        store.close()


def test_a_new_connection_that_cannot_read_the_store_id_yet_is_not_a_replaced_store(
    pg_url: str,
) -> None:
    """The check of a new connection that fails (a lock, a timeout, a cut) proves nothing:
    the store is unavailable while it fails, and writable again after, never ``replaced``."""
    store = PostgresEvidenceStore(
        f"{pg_url}&application_name=under-test", statement_timeout_s=0.3, write_deadline_s=0.6
    )
    try:
        store.finish(store.begin(attempt("a")), OK)
        locker = admin(pg_url)
        try:
            # an operator's long transaction holds meta (ALTER TABLE, VACUUM FULL, a migration)
            locker.execute("BEGIN")
            locker.execute("LOCK TABLE meta IN ACCESS EXCLUSIVE MODE")
            assert terminate(pg_url) >= 1  # the store must connect again, under the lock
            with pytest.raises(EvidenceStoreError) as err:
                store.begin(attempt("b"))
            assert err.value.cause != "replaced"
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        for _ in range(20):  # the pool re-connects in the background, with a backoff
            try:
                store.finish(store.begin(attempt("c")), OK)
                break
            except EvidenceStoreError as exc:
                assert exc.cause != "replaced", exc
        else:
            pytest.fail("the store never became writable again")
        assert [r.call_id for r in store.query()] == ["a", "c"]
    finally:
        store.close()


def test_the_store_writes_read_committed_whatever_the_role_defaults_to(pg_url: str) -> None:
    """The chain's head race is written for read committed; a role set to default to
    serializable would fail some commits (40001) under concurrent writers."""
    PostgresEvidenceStore(pg_url).close()
    with admin(pg_url) as conn:
        role = conn.execute("SELECT current_user").fetchone()[0]
        conn.execute(f'ALTER ROLE "{role}" SET default_transaction_isolation = serializable')
    try:
        store = PostgresEvidenceStore(pg_url)
        try:
            store.finish(store.begin(attempt("a")), OK)
            with store._conn() as conn:
                level = conn.execute("SHOW default_transaction_isolation").fetchone()[0]
            assert level == "read committed"
        finally:
            store.close()
    finally:
        with admin(pg_url) as conn:
            conn.execute(f'ALTER ROLE "{role}" RESET default_transaction_isolation')
