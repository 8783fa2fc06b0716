"""How many examples a property test tries, scaled by the run's Hypothesis profile.

tests/conftest.py registers two profiles: ``sharedos`` (a plain run, ``make test``:
100 examples by default) and ``stress`` (``make stress``: 1,000). A test that sets its
own ``max_examples`` leaves the profile, so ``make stress`` tried it no harder than
``make test``; ``examples(n)`` keeps it in: ``n`` in a plain run, ten times ``n`` under
the stress profile (read when the test module is imported, after the profile is loaded).
"""

from __future__ import annotations

from hypothesis import settings

#: what the plain profile gives a test that names no budget of its own
_PLAIN = 100


def examples(n: int) -> int:
    """``n`` examples under the plain profile, scaled as the loaded profile is."""
    return max(1, n * settings.default.max_examples // _PLAIN)
