# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)
"""A store whose unique indexes were dropped is not written as if it still had them.

The ``(turn_id, pos)`` index (``chain_place``) is what makes two writers of one
turn collide instead of forking its chain; ``chain_attempt`` keeps an attempt
to one outcome; the approval indexes keep each approval step to one. Dropped
(by hand, a botched restore, a tool "cleaning up" indexes), nothing fails: the
writers go on, the chain forks, and only a later ``verify`` says so, as if it
had been tampered with. A writable open checks them: SQLite makes them again
(a writable open is its migration), PostgreSQL refuses until ``sharedos
evidence migrate`` makes them again; rows that no longer allow one are refused.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sharedos.evidence.migrate import migrate_store
from sharedos.evidence.store import EvidenceStoreError
from sharedos.evidence.verify import verify_store
from tests.evidence.stores import Opener, Raw, backend, opener, raw  # noqa: F401
from tests.evidence.test_postgres import OK, attempt


def _two_writers_of_one_turn(a: Any, b: Any, calls: int = 60) -> None:
    def write(store: Any, prefix: str) -> None:
        for i in range(calls):
            store.finish(store.begin(attempt(f"{prefix}{i}")), OK)

    threads = [threading.Thread(target=write, args=(s, p)) for s, p in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


#: the unique indexes of ``chain`` (``sharedos.evidence.chain_sql.GUARD_INDEXES``)
GUARDS = [
    "chain_place",
    "chain_attempt",
    "chain_approval_requested",
    "chain_approval_decided",
    "chain_approval_closed",
]


@pytest.mark.parametrize("name", GUARDS)
def test_a_dropped_guard_index_is_not_written_through(
    backend: tuple[str, str], opener: Opener, raw: Raw, name: str
) -> None:
    kind, location = backend
    first = opener()
    first.finish(first.begin(attempt("before")), OK)
    first.close()
    raw(f"DROP INDEX {name}")
    if kind == "postgresql":
        with pytest.raises(EvidenceStoreError, match=f"lacks the unique index {name}") as info:
            opener()
        assert "sharedos evidence migrate" in str(info.value)
        migrate_store(location)
    a, b = opener(), opener()
    listed = (
        "SELECT name FROM sqlite_master WHERE type = 'index'"
        if kind == "sqlite"
        else "SELECT indexname FROM pg_indexes WHERE tablename = 'chain'"
    )
    assert name in {row[0] for row in raw(listed)}
    _two_writers_of_one_turn(a, b)
    rows = raw("SELECT count(*), count(DISTINCT pos) FROM chain WHERE turn_id = 'T'")
    assert rows[0][0] == rows[0][1] == 1 + 2 * (1 + 2 * 60)  # the opening, then every row once
    assert verify_store(a).problems == []


def test_an_index_of_that_name_that_is_not_unique_is_made_again(
    backend: tuple[str, str], opener: Opener, raw: Raw
) -> None:
    kind, location = backend
    opener().close()
    raw("DROP INDEX chain_place")
    raw("CREATE INDEX chain_place ON chain (turn_id, pos)")
    if kind == "postgresql":
        with pytest.raises(EvidenceStoreError, match="chain_place"):
            opener()
        migrate_store(location)
    a, b = opener(), opener()
    _two_writers_of_one_turn(a, b, calls=30)
    assert verify_store(a).problems == []


def test_rows_that_no_longer_allow_the_index_are_refused_not_written(
    backend: tuple[str, str], opener: Opener, raw: Raw
) -> None:
    kind, location = backend
    store = opener()
    store.finish(store.begin(attempt("c1")), OK)
    store.close()
    raw("DROP INDEX chain_place")
    # a forked chain: a second row at position 1
    raw(
        "INSERT INTO chain (turn_id, pos, kind, prev_hash, hash, call_id, tool, started_at, "
        "arguments_digest, effect) VALUES ('T', 1, 'attempt', 'x', 'y', 'c2', 'files.read', "
        "'2026-12-02T10:00:00.000000Z', 'sha256:0', 'allow')"
    )
    with pytest.raises(EvidenceStoreError):
        if kind == "postgresql":
            migrate_store(location)
        else:
            opener()
    with pytest.raises(EvidenceStoreError):
        opener()
