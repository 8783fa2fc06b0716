"""Backend fixtures shared by the store test modules: the same test on SQLite and PostgreSQL.

``backend`` is (kind, location): a fresh SQLite file or a fresh database on
the session's PostgreSQL cluster. ``opener`` opens stores there (closed at
teardown); ``raw`` runs SQL on the backend directly, as someone with write
access to the database would (the tampering tests).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sharedos.evidence.url import open_store

Opener = Callable[..., Any]
Raw = Callable[..., list[tuple[Any, ...]]]
BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(kind, location): a fresh SQLite file or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "evidence.db")
    else:
        yield "postgresql", request.getfixturevalue("pg_url")


@pytest.fixture
def opener(backend: tuple[str, str]) -> Iterator[Opener]:
    """Opens stores on this test's location; closes them all at the end."""
    opened: list[Any] = []

    def open_(**kw: Any) -> Any:
        store = open_store(backend[1], **kw)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(opener: Opener) -> Any:
    """A writable store on this test's location."""
    return opener()


@pytest.fixture
def raw(backend: tuple[str, str]) -> Iterator[Raw]:
    """``raw(sql, *params)``: one statement, committed, straight to the database (``?`` placeholders)."""
    kind, location = backend
    conns: list[Any] = []

    def run(sql: str, *params: Any) -> list[tuple[Any, ...]]:
        if kind == "sqlite":
            if not conns:
                conns.append(sqlite3.connect(location, isolation_level=None))
            cur = conns[0].execute(sql, params)
            return list(cur.fetchall()) if cur.description else []
        import psycopg

        if not conns:
            conns.append(psycopg.connect(location, autocommit=True))
        cur = conns[0].execute(sql.replace("?", "%s"), params)
        return list(cur.fetchall()) if cur.description else []

    yield run
    for conn in conns:
        conn.close()
