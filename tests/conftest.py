"""Shared fixtures for the whole suite."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fleet.fixtures import pg_url, postgres_cluster  # noqa: F401  (PostgreSQL fixtures)

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def anyio_backend() -> str:
    """The SDK's transports run on asyncio here (uvicorn is asyncio-only)."""
    return "asyncio"


@pytest.fixture
def repo_root() -> Path:
    """The checkout root (rules/, policy/, grammar/ live here)."""
    return REPO_ROOT


@pytest.fixture
def test_data() -> Path:
    """``tests/data``."""
    return TEST_DATA


_SESSION_STARTED = pytest.StashKey[float]()
_FIGURES = pytest.StashKey[list[str]]()


def stress_selected(config: pytest.Config) -> bool:
    """True when this run's ``-m`` expression names the ``stress`` marker (``make stress``)."""
    return "stress" in (config.getoption("markexpr", "") or "")


class Figures:
    """Lines of figures a stress test reports; ``make stress`` prints them in its summary."""

    def __init__(self, sink: list[str]) -> None:
        self._sink = sink

    def add(self, line: str) -> None:
        """Report one line (shown in the terminal summary under "stress figures")."""
        self._sink.append(line)


@pytest.fixture(scope="session")
def stress_figures(request: pytest.FixtureRequest) -> Figures:
    """Where a stress test puts the figures ``make stress`` prints (a fixture, not an
    import: pytest may load this file under another module name than ``tests.conftest``)."""
    return Figures(request.config.stash.setdefault(_FIGURES, []))


def pytest_sessionstart(session: pytest.Session) -> None:
    """Remember when the run began, to tell this run's reports from older ones."""
    session.config.stash[_SESSION_STARTED] = time.time()


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """Print the stress figures this run reported, and the full conformance matrix
    when this run produced one (``make test`` does)."""
    lines = config.stash.get(_FIGURES, [])
    if lines:
        terminalreporter.section("stress figures")
        for line in lines:
            terminalreporter.write_line(line)
    started = config.stash.get(_SESSION_STARTED, time.time())
    reports = sorted((REPO_ROOT / "reports" / "full-matrix").glob("*.txt"))
    fresh = [p for p in reports if p.stat().st_mtime >= started]
    if not fresh:
        return
    terminalreporter.section("conformance matrix (reports/full-matrix)")
    terminalreporter.write(fresh[-1].read_text())
