"""pytest fixtures for a real PostgreSQL server (imported by tests/conftest.py).

``postgres_cluster`` starts one throwaway cluster per test session (initdb
once); ``pg_url`` gives each test a database of its own on it. Where the
server cannot run here the tests that ask for it skip, saying why.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.fleet.pgcluster import ClusterUnavailable, TempCluster

_NAMES = itertools.count(1)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[TempCluster]:
    """A running throwaway PostgreSQL cluster (Unix socket + 127.0.0.1, random port)."""
    try:
        cluster = TempCluster().start()
    except ClusterUnavailable as exc:
        pytest.skip(f"PostgreSQL not available: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(postgres_cluster: TempCluster) -> str:
    """The Unix-socket URL of a fresh, empty database for this test."""
    return postgres_cluster.create_database(f"t{next(_NAMES)}")
