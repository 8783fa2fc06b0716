"""The adversarial suite: quick mode runs in ``make test``; ``@pytest.mark.stress`` is long mode.

A stress test runs only when the marker expression selects it (``pytest -m
stress``, which ``make stress`` runs); otherwise ``tests/conftest.py`` skips it
with the reason, as everywhere in the suite.
"""

from __future__ import annotations
