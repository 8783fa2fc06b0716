"""Adversarial review of path canonicalization and resource-pattern matching.

Finding (fixed): glob patterns were translated to regexes that backtrack
polynomially. ``/**/a/**/b/**/c/**/d`` against a 4 KiB ``/a/b/c/a/b/c/...``
path, or ``*a*a*a*b`` against one long segment, pinned a CPU for minutes
inside ``decide`` (which runs on the bridge's event loop, outside any handler
timeout): one call could stall every turn of the process. ``to_regex`` now
matches segments atomically; the equivalence test below checks it against a
straightforward reference matcher.

The rest are regression guards for attacks that are refused today.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharedos.outcomes import Effect, ReasonCode
from sharedos.policy import compile_paths, compile_source
from sharedos.policy.paths import MAX_PATH_CHARS, UnresolvablePath, canonical_path
from sharedos.policy.patterns import match_key, parse_pattern, resolve, to_regex
from sharedos.resources import shipped_dir
from tests.timing import cpu_bound

BOB: dict[str, Any] = {"principal": "bob", "roles": []}


@pytest.fixture(scope="module")
def shipped() -> Any:
    return compile_paths([shipped_dir("rules") / "files.sos"])


def _policy(pattern: str) -> Any:
    return compile_source(
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        f'permit read on "{pattern}"\n'
        f'forbid read on "/never/{pattern.lstrip("/")}" unless "x" in context.roles\n'
    )


def _elapsed(fn: Any) -> tuple[Any, float]:
    """``fn()`` and the CPU seconds it took (backtracking is work: waiting for a core on a
    busy machine is not counted)."""
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


# ------------------------------------------------------------------ ReDoS (finding)


def test_many_double_stars_against_a_long_adversarial_path_decide_quickly() -> None:
    # Before the fix: 480 segments took 5 s, 600 about 12 s, a 4 KiB path ~20 min.
    policy = _policy("/**/a/**/b/**/c/**/d")
    path = "/" + "/".join(["a", "b", "c"] * 200)
    decision, seconds = _elapsed(lambda: policy.decide("files.read", {"path": path}, BOB))
    assert decision.reason is ReasonCode.NO_MATCHING_PERMIT
    assert seconds < cpu_bound(3.0), f"decide took {seconds:.1f} s: pattern matching backtracks"
    # and the longest path accepted (4 KiB) is still fast; the match still works
    longest = "/" + "/".join(["a", "b", "c"] * ((MAX_PATH_CHARS - 10) // 6)) + "/d"
    assert len(longest) <= MAX_PATH_CHARS
    decision, seconds = _elapsed(lambda: policy.decide("files.read", {"path": longest}, BOB))
    assert decision.effect is Effect.ALLOW
    assert seconds < cpu_bound(3.0)


def test_in_segment_wildcards_against_a_long_segment_decide_quickly() -> None:
    # Before the fix: 400 characters took 1.8 s, 800 took 22 s, 4,000 hours.
    policy = _policy("/x/*a*a*a*b")
    path = "/x/" + "a" * (MAX_PATH_CHARS - 3)
    decision, seconds = _elapsed(lambda: policy.decide("files.read", {"path": path}, BOB))
    assert decision.reason is ReasonCode.NO_MATCHING_PERMIT
    assert seconds < cpu_bound(3.0), f"decide took {seconds:.1f} s: in-segment glob backtracks"
    assert (
        policy.decide("files.read", {"path": "/x/" + "a" * 500 + "b"}, BOB).effect is Effect.ALLOW
    )


def test_interpolated_patterns_are_also_backtracking_safe() -> None:
    policy = compile_source(
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'permit read on "/**/{context.principal}/**/b/**/c/**/d"\n'
    )
    path = "/" + "/".join(["bob", "b", "c"] * 200)
    decision, seconds = _elapsed(lambda: policy.decide("files.read", {"path": path}, BOB))
    assert decision.reason is ReasonCode.NO_MATCHING_PERMIT
    assert seconds < cpu_bound(3.0)


def test_any_in_and_all_in_of_a_callers_list_cost_its_length_not_a_product() -> None:
    # An agent sends a long list argument against a context list of a few thousand:
    # each element was looked for by a scan of the whole context list, so a 1.2 MiB
    # argument cost 1.3 s of CPU per decision at 1,000 allowed labels, and the product
    # grows with both (100,000 x 5,000 here took ~7 s). The context list's strings are
    # now read into a set once per call: the same answers and errors, in linear time.
    policy = compile_source(
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'permit read on "/data/**" when all_in(args.labels, context.attributes.allowed)\n'
        'forbid read on "/data/**" when any_in(args.labels, context.attributes.banned)\n'
    )
    allowed = [f"label-{i}" for i in range(5000)]
    ctx = {"principal": "bob", "roles": [], "attributes": {"allowed": allowed, "banned": []}}
    ctx["attributes"]["banned"] = [f"ban-{i}" for i in range(5000)] + [1, 2.5, [1]]
    labels = [f"label-{i % 5000}" for i in range(100_000)]
    args = {"path": "/data/x", "labels": labels}
    decision, seconds = _elapsed(lambda: policy.decide("files.read", args, ctx))
    assert decision.effect is Effect.ALLOW
    assert seconds < cpu_bound(1.0), f"decide took {seconds:.1f} s: any_in/all_in is quadratic"
    # the answers are member()'s: a number equals a number (1 == 1.0), a string only a
    # string, a NaN against a number is an error (the forbid applies, fail closed)
    for extra, reason in (
        ("ban-7", ReasonCode.FORBIDDEN),
        (1.0, ReasonCode.FORBIDDEN),
        ("1", ReasonCode.NO_MATCHING_PERMIT),
        (True, ReasonCode.NO_MATCHING_PERMIT),
        (float("nan"), ReasonCode.FORBIDDEN),
    ):
        args = {"path": "/data/x", "labels": [*labels[:50], extra]}
        assert policy.decide("files.read", args, ctx).reason is reason, extra


# reference semantics: '*' one segment, '**' any number (zero included), in-segment '*'
# any characters but '/'. Deliberately naive (memoized recursion), so obviously right.


def _ref_glob(pieces: Sequence[tuple[str, str]], text: str) -> bool:
    @functools.cache
    def go(i: int, j: int) -> bool:
        if i == len(pieces):
            return j == len(text)
        kind, lit = pieces[i]
        if kind == "t":
            return text.startswith(lit, j) and go(i + 1, j + len(lit))
        return go(i + 1, j) or (j < len(text) and go(i, j + 1))

    return go(0, 0)


def _ref_match(segs: Sequence[tuple[Any, ...]], parts: Sequence[str]) -> bool:
    @functools.cache
    def go(i: int, j: int) -> bool:
        if i == len(segs):
            return j == len(parts)
        kind = segs[i][0]
        if kind == "D":
            return go(i + 1, j) or (j < len(parts) and go(i, j + 1))
        if j == len(parts):
            return False
        if kind == "L":
            ok = parts[j] == segs[i][1]
        elif kind == "S":
            ok = True
        else:
            ok = _ref_glob(segs[i][2], parts[j])
        return ok and go(i + 1, j + 1)

    return go(0, 0)


_PATTERN_SEG = st.sampled_from(["a", "b", "ab", "*", "**", "a*", "*b", "*a*", "a*b*", "**", "*.*"])
_PATH_SEG = st.sampled_from(["a", "b", "ab", "ba", "aab", "a.b", "bb", "x"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_PATTERN_SEG, min_size=0, max_size=6), st.lists(_PATH_SEG, max_size=8))
def test_backtracking_safe_regex_matches_the_reference_semantics(
    pattern_segs: list[str], path_segs: list[str]
) -> None:
    pattern = "/" + "/".join(pattern_segs)
    resolved = resolve(parse_pattern(pattern), None)
    resource = "/" + "/".join(path_segs)
    got = re.fullmatch(to_regex(resolved), match_key(resource)) is not None
    assert got == _ref_match(resolved.segs, path_segs), (pattern, resource)


# ------------------------------------------------------- canonicalization (regressions)


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/public/../private/salaries.csv", ReasonCode.FORBIDDEN),
        ("/public/./../private/x", ReasonCode.FORBIDDEN),
        ("//private/x", ReasonCode.FORBIDDEN),
        ("/public//..//private/x", ReasonCode.FORBIDDEN),
        ("/private/", ReasonCode.FORBIDDEN),
        ("/private", ReasonCode.FORBIDDEN),
        ("/public/../../etc/passwd", ReasonCode.UNRESOLVABLE_RESOURCE),
        ("/public/a\x00/../../private/x", ReasonCode.UNRESOLVABLE_RESOURCE),
        ("/public/\x00", ReasonCode.UNRESOLVABLE_RESOURCE),
        ("/public/a\nb", ReasonCode.UNRESOLVABLE_RESOURCE),
        ("/public/a\x85b", ReasonCode.UNRESOLVABLE_RESOURCE),  # C1 NEL
        ("public/a.txt", ReasonCode.UNRESOLVABLE_RESOURCE),
        ("", ReasonCode.UNRESOLVABLE_RESOURCE),
        ("\\private\\x", ReasonCode.UNRESOLVABLE_RESOURCE),
        ("/public/" + "a" * MAX_PATH_CHARS, ReasonCode.UNRESOLVABLE_RESOURCE),
    ],
)
def test_traversal_and_malformed_paths_never_reach_a_permit(
    shipped: Any, path: str, reason: ReasonCode
) -> None:
    decision = shipped.decide("files.read", {"path": path}, BOB)
    assert decision.effect is Effect.DENY
    assert decision.reason is reason


@pytest.mark.parametrize(
    "path",
    [
        "/public/%2e%2e/private/x",  # no percent-decoding: a literal segment under /public
        "/public/%2E%2E%2Fprivate%2Fx",
        "/public/\u2025/private/x",  # TWO DOT LEADER is not '..'
        "/public/\uff0e\uff0e/private/x",  # FULLWIDTH FULL STOP x2 is not '..'
        "/public/\u2215private",  # DIVISION SLASH is not '/'
        "/public/..%2f..%2fprivate",
    ],
)
def test_encoded_and_lookalike_dots_stay_literal_names_under_public(
    shipped: Any, path: str
) -> None:
    decision = shipped.decide("files.read", {"path": path}, BOB)
    assert decision.effect is Effect.ALLOW
    assert decision.resource is not None and decision.resource.startswith("/public/")
    # and the sandbox would act on exactly that literal name (no decoding anywhere)
    assert decision.resource == canonical_path(path)


def test_unicode_normalization_never_merges_two_names(shipped: Any) -> None:
    # NFC vs NFD of the same principal: distinct resources, no match across forms
    ctx = {"principal": "jos\u00e9", "roles": []}
    assert (
        shipped.decide("files.write", {"path": "/home/jos\u00e9/a", "content": ""}, ctx).effect
        is Effect.ALLOW
    )
    nfd = shipped.decide("files.write", {"path": "/home/jose\u0301/a", "content": ""}, ctx)
    assert nfd.effect is Effect.DENY


@pytest.mark.parametrize(
    ("principal", "path"),
    [
        ("alice/..", "/home/alice/x"),
        ("..", "/home/x"),
        (".", "/home/x"),
        ("", "/home//x"),
        ("*", "/home/alice/x"),
        ("a*", "/home/alice/x"),
        ("alice/bob", "/home/alice/bob/x"),
        ("al\x00ice", "/home/al"),
        ("**", "/home/alice/x"),
        (["alice"], "/home/alice/x"),
        (None, "/home/None/x"),
        (True, "/home/True/x"),
    ],
)
def test_unsafe_interpolated_principal_never_widens_a_permit(
    shipped: Any, principal: Any, path: str
) -> None:
    ctx = {"principal": principal, "roles": []}
    decision = shipped.decide("files.write", {"path": path, "content": ""}, ctx)
    assert decision.effect is Effect.DENY


@pytest.mark.parametrize("principal", ["[ab]", "?", "a.b", "{context.roles}", "%2f", "a\\b"])
def test_glob_like_principals_match_only_themselves(shipped: Any, principal: str) -> None:
    ctx = {"principal": principal, "roles": []}
    mine = shipped.decide("files.write", {"path": f"/home/{principal}/x", "content": ""}, ctx)
    assert mine.effect is Effect.ALLOW
    for other in ("a", "ab", "b", "axb", "roles", "x"):
        d = shipped.decide("files.write", {"path": f"/home/{other}/x", "content": ""}, ctx)
        assert d.effect is Effect.DENY, (principal, other)


def test_a_forbid_with_an_unsafe_interpolation_fails_closed() -> None:
    policy = compile_source(
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'permit read on "/**"\n'
        'forbid read on "/blocked/{context.attributes.team}/**"\n'
    )
    for team in ("a/b", "*", "..", "", None):
        ctx = {"principal": "p", "roles": [], "attributes": {"team": team}}
        d = policy.decide("files.read", {"path": "/blocked/anything/x"}, ctx)
        assert d.reason is ReasonCode.FORBIDDEN, team


@pytest.mark.parametrize(
    "value", [None, 1, 1.5, b"/a", ["/a"], {"p": "/a"}, float("nan"), "\udc80"]
)
def test_non_string_or_unencodable_paths_are_unresolvable_or_literal(
    shipped: Any, value: Any
) -> None:
    decision = shipped.decide("files.read", {"path": value}, BOB)
    assert decision.effect is Effect.DENY


def test_canonical_path_refuses_what_it_promises_and_is_idempotent() -> None:
    for bad in ("/a/\x00", "/\x7f", "/" + "x" * MAX_PATH_CHARS, "/..", "a", 5):
        with pytest.raises(UnresolvablePath):
            canonical_path(bad)
    for raw in ("/a//b/", "/./a/../b/.", "/a/b/c/../../..", "/\u00a0/\u2028"):
        once = canonical_path(raw)
        assert canonical_path(once) == once
        assert ("//" not in once and not once.endswith("/")) or once == "/"
