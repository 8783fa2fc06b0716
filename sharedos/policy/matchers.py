"""Resource matchers without regular expressions: what a rule checks once the index matched its prefix.

The index (``index``) walks a resource's leading segments down the literal
prefix of every pattern; what is left of a pattern after that prefix is
tested here. The compiler classifies every pattern that does not interpolate
the context into one of four kinds and stores the data that kind needs in the
program (so a bundle loads without compiling anything):

* ``ANY``: ``**`` right after the prefix -- every resource the index reaches;
* ``DEPTH``: exactly ``depth`` segments (the pattern ends at its prefix, or
  with one ``*``);
* ``AFFIX``: exactly ``depth`` segments, the last one ``head*tail``;
* ``GENERAL``: anything else, as a list of *segment tests* (below) matched by
  ``match_general``.

A pattern that interpolates the context (``CONTEXT``) is resolved per context
by ``context_matcher`` into the same kinds.

Segment tests, in the program's JSON form: ``["L", text]`` one literal
segment, ``["S"]`` one segment, ``["D"]`` any number of segments (zero
included), ``["G", head, [mid, ...], tail]`` one segment made of text and
``*`` wildcards (``head*mid*...*tail``). ``match_general`` decides them in
time linear in the resource for every pattern: each glob segment is matched
greedily (the head and tail anchored, each middle text at its leftmost
place), and between ``**`` the runs of fixed-length tests are placed
leftmost (the next ``**`` absorbs whatever a later placement would skip, so
nothing is lost). This is the same decision as the anchored, backtracking-safe
regex ``patterns.to_regex`` builds, which the explainer uses and the tests
compare against.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import Any

from sharedos.policy.patterns import lookup_context, safe_value


class MatchKind(IntEnum):
    """How a rule tests a resource once the index has matched its literal prefix."""

    #: ``**`` after the literal prefix: every resource the index reaches matches
    ANY = 0
    #: exactly ``depth`` segments (the pattern ends at its prefix, or with one ``*``)
    DEPTH = 1
    #: exactly ``depth`` segments, the last one ``head*tail`` (e.g. ``*.md``)
    AFFIX = 2
    #: anything else: segment tests matched by ``match_general``
    GENERAL = 3
    #: the pattern interpolates the context: a ``Matcher`` is built per context
    CONTEXT = 4


#: Runtime segment tests (tuples, built from the JSON form by ``compile_tests``):
#: ``(LIT_TEST, text)``, ``(ONE_TEST,)``, ``(GLOB_TEST, head, middles, tail, least length)``.
LIT_TEST, ONE_TEST, GLOB_TEST = 0, 1, 2
_LIT, _ONE, _GLOB = LIT_TEST, ONE_TEST, GLOB_TEST

#: A compiled GENERAL matcher: (first run, middle runs, last run); the middle and
#: last runs are None when the tests hold no ``**`` (then the first run is all).
Program = tuple[tuple[tuple[Any, ...], ...], Any, Any]

#: A static matcher as the program stores it: kind, depth, head, tail, tests.
Spec = tuple[int, int, str, str, list[list[Any]] | None]


# ----------------------------------------------------------------- compile time


def _glob_test(pieces: Sequence[Sequence[Any]]) -> list[Any]:
    """``["G", head, mids, tail]`` for glob pieces of text and wildcards (no holes)."""
    texts: list[str] = [""]
    for piece in pieces:
        if piece[0] == "w":
            texts.append("")
        else:
            texts[-1] += piece[1]
    return ["G", texts[0], texts[1:-1], texts[-1]]


def segment_tests(segs: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """Segment tests for encoded pattern segments without holes (``L``/``S``/``D``/``G``)."""
    out: list[list[Any]] = []
    for seg in segs:
        kind = seg[0]
        if kind == "L":
            out.append(["L", seg[1]])
        elif kind == "S":
            out.append(["S"])
        elif kind == "D":
            out.append(["D"])
        else:
            out.append(_glob_test(seg[1]))
    return out


def classify(tests: Sequence[Sequence[Any]], start: int) -> Spec:
    """The cheapest exact matcher for ``tests`` (a pattern's segments from index ``start``,
    the first ``start`` segments known to match). Leading literals of ``tests`` make
    the matcher GENERAL unless ``start`` already counts them (see ``static_spec``)."""
    if not tests:
        return MatchKind.DEPTH, start, "", "", None
    if len(tests) == 1:
        only = tests[0]
        if only[0] == "D":
            return MatchKind.ANY, start, "", "", None
        if only[0] == "S":
            return MatchKind.DEPTH, start + 1, "", "", None
        if only[0] == "G" and not only[2]:
            return MatchKind.AFFIX, start + 1, only[1], only[3], None
    return MatchKind.GENERAL, start, "", "", [list(t) for t in tests]


def static_spec(penc: Mapping[str, Any]) -> Spec:
    """Kind, depth, head, tail and tests of an encoded pattern that does not interpolate
    the context, for a resource whose literal prefix the index matched."""
    segs = penc["segs"]
    start = 0
    while start < len(segs) and segs[start][0] == "L":
        start += 1
    return classify(segment_tests(segs[start:]), start)


# ------------------------------------------------------------------ run time


def compile_tests(tests: Sequence[Sequence[Any]]) -> Program:
    """The runtime form of JSON segment tests (raise ``ValueError`` on a malformed one)."""
    runs: list[list[tuple[Any, ...]]] = [[]]
    for t in tests:
        kind = t[0]
        if kind == "D" and len(t) == 1:
            runs.append([])
        elif kind == "L" and len(t) == 2 and type(t[1]) is str:
            runs[-1].append((_LIT, t[1]))
        elif kind == "S" and len(t) == 1:
            runs[-1].append((_ONE,))
        elif (
            kind == "G"
            and len(t) == 4
            and type(t[1]) is str
            and type(t[3]) is str
            and type(t[2]) is list
            and all(type(m) is str for m in t[2])
        ):
            head, mids, tail = t[1], tuple(t[2]), t[3]
            runs[-1].append((_GLOB, head, mids, tail, len(head) + len(tail) + sum(map(len, mids))))
        else:
            raise ValueError("malformed segment test")
    first = tuple(runs[0])
    if len(runs) == 1:
        return first, None, None
    return first, tuple(tuple(r) for r in runs[1:-1]), tuple(runs[-1])


def _segment_ok(t: tuple[Any, ...], s: str) -> bool:
    kind = t[0]
    if kind == _LIT:
        return s == t[1]  # type: ignore[no-any-return]
    if kind == _ONE:
        return s != ""
    head, mids, tail, least = t[1], t[2], t[3], t[4]
    if len(s) < least or not s.startswith(head) or not s.endswith(tail):
        return False
    pos = len(head)
    end = len(s) - len(tail)
    for mid in mids:
        found = s.find(mid, pos, end)
        if found < 0:
            return False
        pos = found + len(mid)
    return True


def _run_at(run: tuple[tuple[Any, ...], ...], segs: Sequence[str], at: int) -> bool:
    for t in run:
        if not _segment_ok(t, segs[at]):
            return False
        at += 1
    return True


def match_general(prog: Program, segs: Sequence[str], start: int) -> bool:
    """Do the segments of a resource from ``start`` on match the compiled tests?"""
    first, middles, last = prog
    n = len(segs)
    if middles is None:
        return n - start == len(first) and _run_at(first, segs, start)
    end = n - len(last)
    if end - start < len(first) or not _run_at(first, segs, start) or not _run_at(last, segs, end):
        return False
    pos = start + len(first)
    for run in middles:
        size = len(run)
        while pos + size <= end and not _run_at(run, segs, pos):
            pos += 1
        if pos + size > end:
            return False
        pos += size
    return True


_ANY_KIND = MatchKind.ANY
_DEPTH_KIND = MatchKind.DEPTH
_AFFIX_KIND = MatchKind.AFFIX
_GENERAL_KIND = MatchKind.GENERAL
#: ``Matcher.qpos`` of a matcher without a literal check (no resource is that deep).
_NO_QUICK_REJECT = 1 << 40


class Matcher:
    """A resource test for one pattern resolved for one context (see ``context_matcher``).

    Segments before ``start`` are known to match (the index walked them).
    ``checks`` are the fixed-position tests from ``start`` on, before any
    ``**`` or glob: ``(position, text)`` for a literal segment (often a value
    the context filled in) and ``(position, None)`` for a ``*``. ``depth`` is
    the exact segment count (``DEPTH``, ``AFFIX``) or the least (``ANY``);
    ``prog`` is set for ``MatchKind.GENERAL`` (its tests start at ``start``).
    """

    __slots__ = (
        "checks",
        "depth",
        "head",
        "kind",
        "least",
        "prog",
        "qpos",
        "qtext",
        "start",
        "tail",
    )

    def __init__(
        self,
        kind: MatchKind,
        start: int,
        checks: tuple[tuple[int, str | None], ...],
        depth: int,
        head: str,
        tail: str,
        prog: Program | None,
    ) -> None:
        self.kind = kind
        self.start = start
        self.checks = checks
        self.depth = depth
        self.head = head
        self.tail = tail
        self.least = len(head) + len(tail)
        self.prog = prog
        # A quick reject for the evaluator's loop, before it calls ``matches``:
        # a resource with more than ``qpos`` segments whose segment ``qpos`` is
        # not ``qtext`` does not match (the last literal check; most of the
        # context rules a decision meets are another caller's, and fail it).
        literal = [(pos, text) for pos, text in checks if text is not None]
        self.qpos, self.qtext = literal[-1] if literal else (_NO_QUICK_REJECT, "")

    def matches(self, segs: list[str]) -> bool:
        """True when the canonical resource (its segments ``segs``) matches."""
        kind = self.kind
        if kind is _GENERAL_KIND:
            return match_general(self.prog, segs, self.start)  # type: ignore[arg-type]
        if kind is _ANY_KIND:
            if len(segs) < self.depth:
                return False
        elif len(segs) != self.depth:
            return False
        for pos, text in self.checks:
            if text is None:
                if not segs[pos]:
                    return False
            elif segs[pos] != text:
                return False
        if kind is _AFFIX_KIND:
            last = segs[-1]
            return (
                len(last) >= self.least and last.startswith(self.head) and last.endswith(self.tail)
            )
        return True


#: A fixed-position test of a ``MatcherPlan``: a literal, a ``*`` or a whole-segment hole.
_PLAN_TEXT, _PLAN_STAR, _PLAN_HOLE = 0, 1, 2


class MatcherPlan:
    """What a common ``CONTEXT`` pattern needs per context, worked out once per rule.

    Covers a pattern whose segments after the literal prefix are literals,
    ``*`` and whole-segment holes (``{context.principal}``), optionally ending
    in ``**``: resolving it for a context is then a lookup per hole, with the
    same safe-value rule as ``context_matcher`` (which handles every other
    shape)."""

    __slots__ = ("any_tail", "depth", "start", "template")

    def __init__(
        self, start: int, template: tuple[tuple[int, int, Any], ...], any_tail: bool, depth: int
    ) -> None:
        self.start = start
        self.template = template
        self.any_tail = any_tail
        self.depth = depth

    def matcher(self, context: Any, *, forbid: bool) -> Matcher | None:
        """The matcher for one context (None: a permit that matches nothing there)."""
        checks: list[tuple[int, str | None]] = []
        for pos, kind, value in self.template:
            if kind == _PLAN_HOLE:
                found, v = lookup_context(context, value)
                text = safe_value(v) if found else None
                if text is None and not forbid:
                    return None  # a forbid's unsafe hole matches any one segment (None)
                checks.append((pos, text))
            else:
                checks.append((pos, value))
        kind_ = _ANY_KIND if self.any_tail else _DEPTH_KIND
        return Matcher(kind_, self.start, tuple(checks), self.depth, "", "", None)


def matcher_plan(penc: Mapping[str, Any], start: int) -> MatcherPlan | None:
    """The ``MatcherPlan`` of a context-interpolating pattern, or None when its shape
    needs the general ``context_matcher``."""
    segs = penc["segs"][start:]
    any_tail = bool(segs) and segs[-1][0] == "D"
    if any_tail:
        segs = segs[:-1]
    template: list[tuple[int, int, Any]] = []
    for i, seg in enumerate(segs, start=start):
        kind = seg[0]
        if kind == "L":
            template.append((i, _PLAN_TEXT, seg[1]))
        elif kind == "S":
            template.append((i, _PLAN_STAR, None))
        elif kind == "G" and len(seg[1]) == 1 and seg[1][0][0] not in ("t", "w"):
            template.append((i, _PLAN_HOLE, tuple(seg[1][0][1])))
        else:
            return None
    return MatcherPlan(start, tuple(template), any_tail, start + len(template))


def context_matcher(
    penc: Mapping[str, Any], context: Any, start: int, *, forbid: bool
) -> Matcher | None:
    """The matcher of a pattern that interpolates the context, for one context.

    ``start`` is the length of the pattern's static literal prefix (what the
    index walked). A missing or unsafe interpolated value never widens a
    match: a permit then matches nothing (None); in a forbid the segment
    holding it matches any one segment (fails closed).
    """
    tests: list[list[Any]] = []
    for seg in penc["segs"][start:]:
        kind = seg[0]
        if kind != "G":
            tests.append(list(seg))
            continue
        texts: list[str] = [""]
        unsafe = False
        for piece in seg[1]:
            pk = piece[0]
            if pk == "t":
                texts[-1] += piece[1]
            elif pk == "w":
                texts.append("")
            else:
                found, value = lookup_context(context, piece[1])
                text = safe_value(value) if found else None
                if text is None:
                    unsafe = True
                    break
                texts[-1] += text
        if unsafe:
            if not forbid:
                return None
            tests.append(["S"])
        elif len(texts) == 1:
            tests.append(["L", texts[0]])
        else:
            tests.append(["G", texts[0], texts[1:-1], texts[-1]])
    # the fixed-position run (literals and single-segment stars), then the rest
    fixed = 0
    while fixed < len(tests) and tests[fixed][0] in ("L", "S"):
        fixed += 1
    checks = tuple((start + i, t[1] if t[0] == "L" else None) for i, t in enumerate(tests[:fixed]))
    kind_, depth, head, tail, general = classify(tests[fixed:], start + fixed)
    if general is not None:
        return Matcher(MatchKind.GENERAL, start, (), 0, "", "", compile_tests(tests))
    return Matcher(MatchKind(kind_), start, checks, depth, head, tail, None)
