"""``patterns.covers_within`` (could_permit's "this forbid hides that permit") keeps
one answer whatever path computes it.

The commonest forbid, literal segments then ``**``, is decided by a prefix test
(it is weighed against every permit below it when a policy is prepared); the
general matcher of segment sequences decides everything else. On every pair
of generated patterns the two agree.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sharedos.policy.patterns import _seq_covers, _seq_covers_general
from tests.budget import examples

LITERALS = ("a", "b", "c")
SEGMENT = st.one_of(
    st.sampled_from(LITERALS).map(lambda t: ("L", t)),
    st.just(("S",)),
    st.just(("D",)),
    st.just(("G", "a*", (("t", "a"), ("w", "")))),
)


@st.composite
def forbid_segments(draw: Any) -> list[tuple[Any, ...]]:
    if draw(st.booleans()):  # the prefix form, most of the time in real policies
        lits = draw(st.lists(st.sampled_from(LITERALS), max_size=4))
        return [("L", t) for t in lits] + [("D",)]
    return draw(st.lists(SEGMENT, max_size=5))


@settings(max_examples=examples(1000), deadline=None)
@given(forbid_segments(), st.lists(SEGMENT, max_size=6))
def test_the_prefix_test_agrees_with_the_general_matcher(f: Any, p: Any) -> None:
    assert _seq_covers(f, p) == _seq_covers_general(f, p)


def test_a_prefix_forbid_covers_what_lies_below_it_only() -> None:
    a_star = [("L", "a"), ("D",)]
    assert _seq_covers(a_star, [("L", "a")])
    assert _seq_covers(a_star, [("L", "a"), ("S",), ("D",)])
    assert not _seq_covers(a_star, [("S",), ("D",)])  # '*' reaches beyond /a
    assert not _seq_covers(a_star, [])  # '/' is not under /a
    assert _seq_covers([("D",)], [("S",), ("L", "x")])
