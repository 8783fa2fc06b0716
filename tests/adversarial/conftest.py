"""The adversarial suite: quick mode runs in ``make test``; ``@pytest.mark.stress`` is long mode.

A stress test runs only when the marker expression selects it (``pytest -m
stress``, which ``make stress`` runs); otherwise it is skipped with the
reason, so a plain ``pytest`` stays quick whatever ``addopts`` says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import stress_selected


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip stress tests unless ``-m`` names the ``stress`` marker."""
    if stress_selected(config):
        return
    skip = pytest.mark.skip(
        reason="long adversarial mode: run with `make stress` (pytest -m stress)"
    )
    here = Path(__file__).parent
    for item in items:
        # this hook sees the whole session's items: touch only this directory's
        # (tests elsewhere, e.g. the SIGKILL test, run a quick mode under the marker)
        if here in Path(str(item.fspath)).parents and item.get_closest_marker("stress"):
            item.add_marker(skip)
