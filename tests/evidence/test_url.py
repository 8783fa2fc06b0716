"""Which store a ``--db`` value names: paths and sqlite URLs, PostgreSQL URLs, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedos.evidence.store import EvidenceStoreError
from sharedos.evidence.url import open_store, parse_store_url


@pytest.mark.parametrize(
    ("value", "kind", "location"),
    [
        ("evidence.db", "sqlite", "evidence.db"),
        ("/var/lib/sharedos/e.db", "sqlite", "/var/lib/sharedos/e.db"),
        ("sqlite:///var/lib/e.db", "sqlite", "/var/lib/e.db"),
        ("sqlite:relative/e.db", "sqlite", "relative/e.db"),
        (":memory:", "sqlite", ":memory:"),
        ("postgresql://u@h/db", "postgresql", "postgresql://u@h/db"),
        ("postgres://u@h:5432/db", "postgresql", "postgres://u@h:5432/db"),
        (
            "postgresql://u@/db?host=/run/postgresql",
            "postgresql",
            "postgresql://u@/db?host=/run/postgresql",
        ),
    ],
)
def test_locations(value: str, kind: str, location: str) -> None:
    target = parse_store_url(value)
    assert (target.kind, target.location) == (kind, location)


@pytest.mark.parametrize("value", ["mysql://h/db", "http://h/evidence", "sqlite://", "", "  "])
def test_what_names_no_store_is_refused(value: str) -> None:
    with pytest.raises(ValueError):
        parse_store_url(value)


def test_a_password_is_never_shown() -> None:
    assert parse_store_url("postgresql://u:pw@h/db").shown == "postgresql://u:***@h/db"


def test_readers_never_create_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    with pytest.raises(EvidenceStoreError, match="no evidence database"):
        open_store(missing, read_only=True)
    with pytest.raises(EvidenceStoreError, match="no evidence database"):
        open_store(f"sqlite://{missing}", must_exist=True)
    assert not missing.exists()
    with pytest.raises(EvidenceStoreError, match="unknown evidence store scheme"):
        open_store("mysql://h/db")


def test_a_postgres_store_over_a_unix_socket_names_its_socket() -> None:
    """A sandbox must not be shown the socket (tests/confine/test_escape_evidence_socket.py)."""
    from sharedos.evidence.url import postgres_sockets, store_files

    assert postgres_sockets("postgresql://u@/db?host=/run/postgresql", {}) == [
        "/run/postgresql/.s.PGSQL.5432"
    ]
    assert postgres_sockets("postgresql://u@/db?host=/a,/b&port=1,2", {}) == [
        "/a/.s.PGSQL.1",
        "/b/.s.PGSQL.2",
    ]
    assert postgres_sockets("host=/x port=7 dbname=e", {}) == ["/x/.s.PGSQL.7"]
    assert postgres_sockets("postgresql://u@/db", {"PGHOST": "/s", "PGPORT": "9"}) == [
        "/s/.s.PGSQL.9"
    ]
    assert postgres_sockets("postgresql://u@db.internal/e", {}) == []  # TCP only
    assert store_files("/var/e.sqlite")[0] == "/var/e.sqlite"
