"""``sharedos.canonical``: the C-encoder fast path and the scalar encoder agree with ``rfc8785``."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from sharedos import canonical

TEXT = st.text(
    alphabet=st.characters(codec="utf-8")
    | st.sampled_from(["\ue000", "\uffff", "\U0001f600", "\x00", "\x1f", "\x7f", '"', "\\"]),
    max_size=8,
)
FLOATS = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.0, -0.0, 1e-4, 9.999999999999999e-5, 1e16, 9999999999999998.0, 1e21, 5e-324, 0.1, 1 / 3]
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | FLOATS
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=24,
)


@settings(max_examples=1500, deadline=None)
@given(JSON)
def test_dumps_and_the_fast_path_equal_rfc8785(value: Any) -> None:
    expected = rfc8785.dumps(value)
    assert canonical.dumps(value) == expected
    made = canonical.fast(value)
    assert made is None or made == expected


@settings(max_examples=3000, deadline=None)
@given(FLOATS | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1) | TEXT | st.booleans())
def test_a_scalar_is_its_rfc8785_text(value: Any) -> None:
    assert canonical.scalar(value) == rfc8785.dumps(value).decode("utf-8")


@settings(max_examples=3000, deadline=None)
@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_any_finite_double_bit_pattern(bits: int) -> None:
    (value,) = struct.unpack("<d", bits.to_bytes(8, "little"))
    if not math.isfinite(value):
        return
    assert canonical.scalar(value) == rfc8785.dumps(value).decode("ascii")
    assert canonical.dumps([value]) == rfc8785.dumps([value])


def test_the_fast_path_takes_the_common_values() -> None:
    # what a tool call carries: it must not fall back to the pure-Python encoder
    assert canonical.fast({"path": "/home/alice/x", "limit": 10, "ratio": 0.25, "ok": True})
    for slow in ({"x": 3.0}, {"x": 1e-7}, {"\U0001f600": 1, "\ue000": 2}):
        assert canonical.fast(slow) is None
        assert canonical.dumps(slow) == rfc8785.dumps(slow)
    assert canonical.fast({"x": 2**60}) is None  # outside JCS: rfc8785 refuses it


def test_what_jcs_cannot_encode_is_refused_like_rfc8785() -> None:
    for bad in ({"x": float("nan")}, {1: 2}, {"x": object()}):
        with pytest.raises(Exception):  # noqa: B017  (rfc8785's own error types)
            rfc8785.dumps(bad)
        with pytest.raises(Exception):  # noqa: B017
            canonical.dumps(bad)
