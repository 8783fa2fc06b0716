"""The typed IR's resource matchers agree exactly with the pattern's regex (the reference)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from sharedos.policy.ir import MatchKind, matcher_for, static_matcher
from sharedos.policy.patterns import literal_prefix, parse_pattern, resolve, to_regex

_NAMES = st.sampled_from(["a", "b", "ab", "a.md", "b.md", "x.txt", ".md", "md"])
_SEGMENT = st.one_of(
    _NAMES,
    st.just("*"),
    st.just("**"),
    st.sampled_from(["*.md", "a*", "*b", "a*b", "*a*", "x*.t*"]),
)


@settings(max_examples=400, deadline=None)
@given(
    pattern=st.lists(_SEGMENT, min_size=0, max_size=5),
    resource=st.lists(_NAMES, min_size=0, max_size=6),
)
def test_static_matchers_agree_with_the_regex(pattern: list[str], resource: list[str]) -> None:
    raw = "/" + "/".join(pattern)
    penc = parse_pattern(raw)
    key = "".join("/" + s for s in resource)
    expected = re.fullmatch(to_regex(resolve(penc, None)), key) is not None
    prefix = literal_prefix(penc)
    reached = resource[: len(prefix)] == prefix  # what the index checks before the matcher
    kind, depth, head, tail, regex = static_matcher(penc)
    if kind is MatchKind.REGEX:
        assert regex is not None
        got = reached and regex(key) is not None
    elif kind is MatchKind.ANY:
        got = reached
    elif kind is MatchKind.DEPTH:
        got = reached and len(resource) == depth
    else:
        last = resource[-1] if resource else ""
        got = (
            reached
            and len(resource) == depth
            and len(last) >= len(head) + len(tail)
            and last.startswith(head)
            and last.endswith(tail)
        )
    assert got is expected, (raw, key, kind)


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.lists(st.one_of(_SEGMENT, st.just("{context.p}")), min_size=1, max_size=5),
    resource=st.lists(_NAMES, min_size=0, max_size=6),
    value=_NAMES,
)
def test_context_matchers_agree_with_the_regex(
    pattern: list[str], resource: list[str], value: str
) -> None:
    raw = "/" + "/".join(pattern)
    penc = parse_pattern(raw)
    resolved = resolve(penc, {"p": value})
    key = "".join("/" + s for s in resource)
    expected = re.fullmatch(to_regex(resolved), key) is not None
    start = len(literal_prefix(penc))
    reached = resource[:start] == literal_prefix(penc)
    matcher = matcher_for(resolved, start)
    assert (reached and matcher.matches(resource, key)) is expected, (raw, key)
