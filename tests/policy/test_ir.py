"""The regex-free resource matchers agree exactly with the pattern's regex (the reference)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from sharedos.policy.matchers import (
    MatchKind,
    compile_tests,
    context_matcher,
    match_general,
    matcher_plan,
    static_spec,
)
from sharedos.policy.patterns import literal_prefix, parse_pattern, resolve, to_regex

_NAMES = st.sampled_from(["a", "b", "ab", "aab", "a.md", "b.md", "x.txt", ".md", "md", "aXbXa"])
_SEGMENT = st.one_of(
    _NAMES,
    st.just("*"),
    st.just("**"),
    st.sampled_from(["*.md", "a*", "*b", "a*b", "*a*", "x*.t*", "a*a*b", "*X*X*", "a*b*a"]),
)


def _key(resource: list[str]) -> str:
    return "".join("/" + s for s in resource)


def _static_matches(raw: str, resource: list[str]) -> bool:
    penc = parse_pattern(raw)
    prefix = literal_prefix(penc)
    if resource[: len(prefix)] != prefix:  # what the index checks before the matcher
        return False
    kind, depth, head, tail, tests = static_spec(penc)
    if kind == MatchKind.GENERAL:
        assert tests is not None
        return match_general(compile_tests(tests), resource, depth)
    if kind == MatchKind.ANY:
        return True
    if kind == MatchKind.DEPTH:
        return len(resource) == depth
    last = resource[-1] if resource else ""
    return (
        len(resource) == depth
        and len(last) >= len(head) + len(tail)
        and last.startswith(head)
        and last.endswith(tail)
    )


@settings(max_examples=600, deadline=None)
@given(
    pattern=st.lists(_SEGMENT, min_size=0, max_size=6),
    resource=st.lists(_NAMES, min_size=0, max_size=7),
)
def test_static_matchers_agree_with_the_regex(pattern: list[str], resource: list[str]) -> None:
    raw = "/" + "/".join(pattern)
    expected = re.fullmatch(to_regex(resolve(parse_pattern(raw), None)), _key(resource))
    assert _static_matches(raw, resource) is (expected is not None), (raw, resource)


def test_the_general_matcher_is_linear_on_hostile_resources() -> None:
    # A naive backtracking translation took minutes on these (see patterns.to_regex).
    raw = "/**/a/**/b/**/c/**/d"
    resource = ["a", "b", "c"] * 1300
    assert not _static_matches(raw, resource)
    assert _static_matches(raw, [*resource, "d"])
    glob = "/*a*a*a*a*a*b"
    assert not _static_matches(glob, ["a" * 4000])
    assert _static_matches(glob, ["a" * 4000 + "b"])


@settings(max_examples=400, deadline=None)
@given(
    pattern=st.lists(
        st.one_of(_SEGMENT, st.just("{context.p}"), st.just("x{context.p}*")),
        min_size=1,
        max_size=5,
    ),
    resource=st.lists(_NAMES, min_size=0, max_size=6),
    value=st.one_of(_NAMES, st.sampled_from(["", "..", "a/b", "a*", None])),
    forbid=st.booleans(),
)
def test_context_matchers_agree_with_the_regex(
    pattern: list[str], resource: list[str], value: str | None, forbid: bool
) -> None:
    raw = "/" + "/".join(pattern)
    penc = parse_pattern(raw)
    context = {} if value is None else {"p": value}
    resolved = resolve(penc, context, forbid=forbid)
    expected = resolved.safe and re.fullmatch(to_regex(resolved), _key(resource)) is not None
    start = len(literal_prefix(penc))
    reached = resource[:start] == literal_prefix(penc)
    matcher = context_matcher(penc, context, start, forbid=forbid)
    got = reached and matcher is not None and matcher.matches(resource)
    assert got is expected, (raw, resource, value, forbid)


@settings(max_examples=400, deadline=None)
@given(
    pattern=st.lists(
        st.one_of(_NAMES, st.just("*"), st.just("{context.p}"), st.just("{context.q.r}")),
        min_size=1,
        max_size=5,
    ),
    tail=st.sampled_from(["", "/**"]),
    resource=st.lists(st.one_of(_NAMES, st.just("u1")), min_size=0, max_size=6),
    value=st.one_of(_NAMES, st.just("u1"), st.sampled_from(["", "..", "a/b", "a*", 7, None])),
    forbid=st.booleans(),
)
def test_matcher_plans_build_the_matchers_context_matcher_builds(
    pattern: list[str], tail: str, resource: list[str], value: object, forbid: bool
) -> None:
    # The per-rule plan (the common shapes: literals, '*', whole-segment holes,
    # an optional '**') must decide exactly what the general builder decides.
    penc = parse_pattern("/" + "/".join(pattern) + tail)
    start = len(literal_prefix(penc))
    plan = matcher_plan(penc, start)
    assert plan is not None
    context = {} if value is None else {"p": value, "q": {"r": value}}
    want = context_matcher(penc, context, start, forbid=forbid)
    got = plan.matcher(context, forbid=forbid)
    assert (got is None) is (want is None)
    if got is not None and want is not None and resource[:start] == literal_prefix(penc):
        assert got.matches(resource) is want.matches(resource), (pattern, tail, resource, value)
