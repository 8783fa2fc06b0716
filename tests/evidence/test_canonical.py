"""The arguments digest: the C-encoder fast path yields exactly RFC 8785 bytes (``canonical.total``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from sharedos.canonical import total as canonical_arguments
from sharedos.evidence.record import arguments_digest

# keys and strings across the planes where UTF-16 and code-point order differ
TEXT = st.text(
    alphabet=st.characters(codec="utf-8") | st.sampled_from(["\ue000", "\uffff", "\U0001f600"]),
    max_size=8,
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(JSON)
def test_canonical_bytes_equal_rfc8785(value: Any) -> None:
    assert canonical_arguments(value) == rfc8785.dumps(value)


def test_key_order_is_utf16_not_code_point() -> None:
    value = {"\ue000": 1, "\U0001f600": 2, "a": 3}
    assert canonical_arguments(value) == rfc8785.dumps(value)
    assert canonical_arguments(value).index("\U0001f600".encode()) < canonical_arguments(
        value
    ).index("\ue000".encode())


def test_values_outside_jcs_still_digest_deterministically() -> None:
    big = {"n": 2**60}
    assert canonical_arguments(big) == json.dumps(big, sort_keys=True).encode()
    assert arguments_digest({"s": "\ud800"}) == arguments_digest({"s": "\ud800"})
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert arguments_digest(deep).startswith("sha256:")  # no RecursionError escapes
    assert arguments_digest({"a": 1}) == "sha256:" + hashlib.sha256(b'{"a":1}').hexdigest()


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from(["open", "attempt", "outcome", "seal"]), TEXT, st.data())
def test_a_link_is_encoded_exactly_as_rfc8785(kind: str, prev: str, data: Any) -> None:
    """The chain's own encoder (one format string per kind) against the rfc8785 package."""
    from sharedos.evidence.chain import FIELDS_OF, LATE_FIELDS, canonical_object

    fields = FIELDS_OF[kind]
    values = data.draw(st.tuples(*[SCALARS for _ in fields]))
    obj = {"kind": kind, "prev": prev, **dict(zip(fields, values, strict=True))}
    for late in LATE_FIELDS.get(kind, ()):
        if obj[late] is None:
            del obj[late]  # a null late field is not part of the object
    assert canonical_object(kind, prev, values) == rfc8785.dumps(obj)
