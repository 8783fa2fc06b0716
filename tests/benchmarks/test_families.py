"""``benchmarks/bench_families.py``: SharedOS and the language reference agree on every shape.

The script's figures are only worth printing if both engines decide every
request alike; a disagreement stops it. Small sizes here, so the suite stays
quick; the shapes are the same.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.bench_families import SHAPES, run_shape  # noqa: E402


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_is_decided_alike_by_both_engines(shape: str) -> None:
    row = run_shape(shape, 300)
    assert 0 < row["allowed"] < 1000  # the requests reach both answers
