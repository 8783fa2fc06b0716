"""Shared fixtures for the whole suite."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.fleet.fixtures import pg_url, postgres_cluster  # noqa: F401  (PostgreSQL fixtures)
from tests.full_matrix import FullMatrix, full_matrix_document, full_matrix_of
from tests.mounts import tmpfs  # noqa: F401  (small filesystems that fill up)
from tests.once import once

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


# Hypothesis: no deadline and no "too slow" health check in any profile (both are
# wall-clock assertions, which fail on a busy machine); "sharedos" is the plain run,
# "stress" (``make stress``, or HYPOTHESIS_PROFILE=stress) tries ten times as much.
settings.register_profile(
    "sharedos", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=100
)
settings.register_profile(
    "stress", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=1000
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "sharedos"))

_SESSION_STARTED = pytest.StashKey[float]()
_FIGURES = pytest.StashKey[list[str]]()


def stress_selected(config: pytest.Config) -> bool:
    """True when this run's ``-m`` expression names the ``stress`` marker (``make stress``)."""
    return "stress" in (config.getoption("markexpr", "") or "")


def pytest_configure(config: pytest.Config) -> None:
    """``make stress`` runs Hypothesis under its stress profile (unless one was named)."""
    if stress_selected(config) and "HYPOTHESIS_PROFILE" not in os.environ:
        settings.load_profile("stress")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The markers mean one thing everywhere: a ``stress`` test runs only when ``-m``
    names the marker (``make stress``); otherwise it is skipped with the reason, so a
    plain ``pytest`` and ``make test`` never run one. (``slow`` tests run by default;
    ``-m "not slow"`` leaves them out for a quick round.) A ``harness`` test (its
    marker may name the CLIs it drives: ``harness("claude-code")``; none named: all)
    is skipped with the reason when one of them is not installed."""
    stress = stress_selected(config)
    skip = pytest.mark.skip(reason="stress mode: run with `make stress` (pytest -m stress)")
    missing: dict[tuple[str, ...], str | None] = {}
    for item in items:
        if not stress and item.get_closest_marker("stress"):
            item.add_marker(skip)
        marker = item.get_closest_marker("harness")
        if marker is not None:
            kinds = tuple(marker.args)
            if kinds not in missing:
                missing[kinds] = _missing_harness(kinds)
            why = missing[kinds]
            if why is not None:
                item.add_marker(pytest.mark.skip(reason=why))


def _missing_harness(kinds: tuple[str, ...]) -> str | None:
    """Why a test of the harness CLIs ``kinds`` (every kind when empty) cannot run here,
    or None: a test that drives a CLI this machine lacks is skipped with the reason,
    never left to error."""
    from sharedos.harness.adapters import HARNESS_KINDS, get_adapter
    from sharedos.harness.adapters.base import HarnessUnavailable

    for kind in kinds or HARNESS_KINDS:
        adapter = get_adapter(kind)
        try:
            adapter.check_command(adapter.default_command())
        except HarnessUnavailable as exc:
            return f"harness CLI not installed here: {exc}"
    return None


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


@pytest.fixture(scope="session")
def full_matrix(tmp_path_factory: pytest.TempPathFactory) -> FullMatrix:
    """The full conformance matrix (tests/full_matrix.py), run once for every test reading
    it, whichever pytest-xdist worker runs the test (``make test`` runs several)."""
    return full_matrix_of(once(tmp_path_factory, "full-matrix", full_matrix_document))


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
