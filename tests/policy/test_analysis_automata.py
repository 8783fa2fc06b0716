"""The automata behind ``diff``'s witnesses are exact: checked against brute force.

* ``strings.representatives``: every combination of glob answers that some
  short string achieves has a representative, with the right answers;
* ``segments.witnesses``: every combination of pattern matches that some
  resource achieves has a witness, and a pattern matches a witness exactly
  when the evaluator's own matcher (``patterns.to_regex``) says so.
"""

from __future__ import annotations

import itertools
import random
import re

from sharedos.policy.analysis.segments import SegPattern, Shape, overlap, witnesses
from sharedos.policy.analysis.strings import Glob, representatives
from sharedos.policy.patterns import match_key, parse_pattern, resolve, to_regex

TEXTS = ["a", "ab", "b", ".md", "x-", "A"]


def _glob(rng: random.Random) -> Glob:
    text = rng.choice(TEXTS)
    kind = rng.choice(["literal", "prefix", "suffix", "infix", "fold", "shift"])
    if kind == "literal":
        return Glob.literal(text)
    if kind == "prefix":
        return Glob.prefix(text)
    if kind == "suffix":
        return Glob.suffix(text)
    if kind == "infix":
        return Glob.infix(text)
    if kind == "fold":
        return Glob.literal(text.lower(), fold=True)
    return Glob.infix(text).shift(rng.choice(["", "x-"]), rng.choice(["", "b"]))


def _answers(globs: list[Glob], text: str) -> tuple[bool, ...]:
    return tuple(g.matches(text) for g in globs)


def _reference(glob: Glob, text: str) -> bool:
    """The glob's meaning, by regular expression (independent of the automaton)."""
    if glob.start is not None:
        return True  # shifted globs are checked through their own definition below
    body = "".join(".*" if t is None else re.escape(t) for t in glob.tokens)
    flags = re.IGNORECASE if glob.fold else 0
    subject = text.lower() if glob.fold else text
    return re.fullmatch(body, subject, flags | re.DOTALL) is not None


def test_representatives_cover_every_combination_short_strings_reach() -> None:
    rng = random.Random(11)
    alphabet = "abAx.-mdz"
    strings = [""] + [
        "".join(p) for n in range(1, 5) for p in itertools.product(alphabet, repeat=n)
    ]
    for _ in range(60):
        globs = [_glob(rng) for _ in range(rng.randint(1, 4))]
        found = representatives(globs)
        assert found.complete
        vectors = dict(found.found)
        for text, vector in found.found:
            assert _answers(globs, text) == vector
        for text in strings:
            if text:
                assert _answers(globs, text) in vectors.values(), (globs, text)


def test_globs_mean_what_their_text_says() -> None:
    rng = random.Random(5)
    for _ in range(200):
        glob = _glob(rng)
        for text in ("", "a", "ab", "xab", "a.md", "x-ab", "AB", "b", "x-.mdb"):
            if glob.start is None:
                assert glob.matches(text) == _reference(glob, text), (glob, text)
    shifted = Glob.infix("ab").shift("x-", "b")
    for text in ("a", "ab", "c", "xa", "-a"):
        assert shifted.matches(text) == ("ab" in f"x-{text}b")


PATTERNS = [
    "/**",
    "/a/**",
    "/a/*",
    "/a/b",
    "/a/*/c",
    "/*/b/**",
    "/**/c",
    "/a/*.md",
    "/a/x*",
    "/",
    "/b",
    "/{context.p}/**",
    "/a/pre-{context.p}",
]
SEGS = ["a", "b", "c", "x.md", "xy", "zz", "q", "pre-q"]


def _regex_matches(resolved: object, resource: str) -> bool:
    return re.fullmatch(to_regex(resolved), match_key(resource)) is not None  # type: ignore[arg-type]


def test_witnesses_reach_every_combination_of_matches() -> None:
    rng = random.Random(3)
    paths = ["/"] + [
        "/" + "/".join(p) for n in (1, 2, 3) for p in itertools.product(SEGS, repeat=n)
    ]
    context = {"p": "q"}
    for _ in range(40):
        raw = rng.sample(PATTERNS, rng.randint(1, 5))
        resolved = [resolve(parse_pattern(r), context) for r in raw]
        pats = [SegPattern.of(r) for r in resolved]
        assert all(p is not None for p in pats)
        found = witnesses([p for p in pats if p is not None], Shape(True))
        assert found.complete
        vectors = {w.vector for w in found.found}
        for w in found.found:
            assert tuple(_regex_matches(r, w.text) for r in resolved) == w.vector, (raw, w)
        for path in paths:
            vector = tuple(_regex_matches(r, path) for r in resolved)
            assert vector in vectors, (raw, path)


def test_template_witnesses_carry_the_hole_values() -> None:
    shape = Shape.of(
        {
            "kind": "template",
            "abs": False,
            "segs": [[["h", ["owner"]]], [["t", "v-"], ["h", ["repo"]]]],
        }
    )
    pats = [
        SegPattern.of(resolve(parse_pattern(r), None))
        for r in ("acme/*", "*/v-web", "acme/v-web", "*/x")
    ]
    found = witnesses([p for p in pats if p is not None], shape)
    texts = {w.text for w in found.found}
    assert {"acme/v-web"} <= texts
    for w in found.found:
        holes = dict(w.holes)
        assert w.text == f"{holes[('owner',)]}/v-{holes[('repo',)]}"
        assert holes[("repo",)]  # a hole is never empty
        assert not w.vector[3]  # "*/x" can never match "owner/v-..."
    vectors = {w.vector[:3] for w in found.found}
    assert vectors == {
        (False, False, False),
        (True, False, False),
        (False, True, False),
        (True, True, True),
    }


def test_overlap_is_exact() -> None:
    def pat(text: str) -> SegPattern:
        p = SegPattern.of(resolve(parse_pattern(text), None))
        assert p is not None
        return p

    assert overlap(pat("/a/**"), pat("/*/b"), Shape(True)) is not None
    assert overlap(pat("/a/**"), pat("/b/**"), Shape(True)) is None
    assert overlap(pat("/a/*.md"), pat("/a/x*"), Shape(True)) is not None
    assert overlap(pat("/a/*.md"), pat("/a/*.txt"), Shape(True)) is None
    assert overlap(pat("/**/c"), pat("/a/*"), Shape(True)) is not None


def test_resource_conditions_become_patterns_that_match_exactly_the_same_resources() -> None:
    from sharedos.policy.analysis.resource_atoms import atom_pattern
    from sharedos.policy.functions import FUNCTIONS

    segs = ["a", "b", "ab", "x.md", "ba"]
    resources = ["/"] + [
        "/" + "/".join(p) for n in (1, 2, 3) for p in itertools.product(segs, repeat=n)
    ]
    relative = ["/".join(p) for n in (1, 2) for p in itertools.product(segs, repeat=n)]
    texts = ["/", "/a", "/a/", "/a/b", "a", "b", "a/b", ".md", "/ab", "b/", "x.md", "", "a//b"]

    def holds(test: str, resource: str, text: str) -> bool:
        return resource == text if test == "eq" else bool(FUNCTIONS[test].impl(resource, text))

    for test in ("eq", "startswith", "endswith", "contains"):
        for text in texts:
            for absolute, pool in ((True, resources), (False, relative)):
                pat = atom_pattern(test, None, text, absolute)
                if pat is None:
                    # no pattern: the test answers the same for every resource of this kind
                    assert len({holds(test, r, text) for r in pool}) == 1, (test, text, absolute)
                    continue
                for resource in pool:
                    parts = resource.strip("/").split("/") if resource.strip("/") else []
                    assert pat.matches(parts) == holds(test, resource, text), (test, text, resource)
    for position in (1, 2, -1, -2):
        for text in ("a", "b"):
            pat = atom_pattern("eq", position, text, True)
            assert pat is not None
            for resource in resources:
                parts = resource.strip("/").split("/") if resource.strip("/") else []
                try:
                    want = FUNCTIONS["segment"].impl(resource, position) == text
                except Exception:
                    want = False
                assert pat.matches(parts) == want, (position, text, resource)


def test_the_quick_meet_check_never_misses_an_overlap() -> None:
    """``space._meet`` may only over-estimate (it decides which rules can be left out)."""
    from sharedos.policy.analysis.space import _meet

    rng = random.Random(17)
    for _ in range(300):
        a, b = (
            SegPattern.of(resolve(parse_pattern(rng.choice(PATTERNS[:11])), None)) for _ in range(2)
        )
        assert a is not None and b is not None
        if overlap(a, b, Shape(True)) is not None:
            assert _meet(a.segs, b.segs), (a, b)
        elif all(t[0] != "G" for t in (*a.segs, *b.segs)):
            assert not _meet(a.segs, b.segs), (a, b)
