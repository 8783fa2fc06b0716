"""The adversarial suite: quick mode runs in ``make test``; ``@pytest.mark.stress`` is long mode.

A stress test runs only when the marker expression selects it (``pytest -m
stress``, which ``make stress`` runs); otherwise it is skipped with the
reason, so a plain ``pytest`` stays quick whatever ``addopts`` says.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip stress tests unless ``-m`` names the ``stress`` marker."""
    if "stress" in (config.getoption("markexpr", "") or ""):
        return
    skip = pytest.mark.skip(
        reason="long adversarial mode: run with `make stress` (pytest -m stress)"
    )
    for item in items:
        if item.get_closest_marker("stress") is not None:
            item.add_marker(skip)
