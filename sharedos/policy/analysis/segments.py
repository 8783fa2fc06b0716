"""Witness resources: one resource per combination of patterns a resource can match.

The patterns of a set of rules (as resolved for one context: ``{context.x}``
filled in) split the resources a requirement can produce into regions: two
resources that every pattern treats alike decide alike. ``witnesses`` finds
one resource in every non-empty region, so deciding those resources decides
every resource there is.

It works in two steps, both exact:

1. the *segment classes*: every literal segment and glob segment any pattern
   holds is a predicate on one segment; ``strings.representatives`` gives one
   segment text per combination of those predicates a segment can satisfy;
2. the *resources*: each pattern is an automaton over segments (``**`` loops,
   ``*`` takes one segment); a breadth-first walk of the product of those
   automata over the segment classes reaches every combination of "matches /
   does not match" some resource achieves, and keeps the first (shortest)
   resource for each.

A template resource (``"{args.owner}/{args.repo}"``) has a fixed number of
segments: its literal segments are fixed and its holes range over the segment
classes; the witnesses carry the hole values that spell them.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sharedos.policy.analysis.strings import Glob, representatives
from sharedos.policy.patterns import Resolved

#: One segment test: ("L", text) | ("S",) | ("D",) | ("G", Glob).
SegTest = tuple[Any, ...]

_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True, slots=True)
class SegPattern:
    """A resolved pattern as segment tests (``absolute``: it starts with ``/``)."""

    absolute: bool
    segs: tuple[SegTest, ...]

    @classmethod
    def of(cls, resolved: Resolved) -> SegPattern | None:
        """From a resolved pattern; None for a permit whose interpolation was unsafe
        (it matches nothing)."""
        if not resolved.safe:
            return None
        out: list[SegTest] = []
        for seg in resolved.segs:
            if seg[0] == "G":
                out.append(("G", Glob.of_pieces(seg[2])))
            else:
                out.append(tuple(seg))
        return cls(resolved.absolute, tuple(out))

    def matches(self, segs: Sequence[str]) -> bool:
        """Does the resource with these segments match? (For tests and overlap checks.)"""
        states = _start(self.segs)
        for text in segs:
            states = _advance(self.segs, states, text, {})
            if not states:
                return False
        return len(self.segs) in states


def valid_segment(text: str) -> bool:
    """A segment a canonical resource can hold: non-empty, not ``.``/``..``, no control character."""
    return text not in ("", ".", "..") and _CONTROL_RE.search(text) is None


def _start(segs: tuple[SegTest, ...]) -> frozenset[int]:
    return _closure(segs, {0})


def _closure(segs: tuple[SegTest, ...], states: Iterable[int]) -> frozenset[int]:
    out = set(states)
    todo = list(out)
    n = len(segs)
    while todo:
        i = todo.pop()
        if i < n and segs[i][0] == "D" and i + 1 not in out:
            out.add(i + 1)
            todo.append(i + 1)
    return frozenset(out)


def _seg_matches(test: SegTest, text: str) -> bool:
    kind = test[0]
    if kind == "L":
        return bool(test[1] == text)
    if kind == "S":
        return True
    glob: Glob = test[1]
    return glob.matches(text)


def _advance(
    segs: tuple[SegTest, ...],
    states: frozenset[int],
    text: str,
    cache: dict[tuple[int, str], bool],
) -> frozenset[int]:
    out: set[int] = set()
    n = len(segs)
    for i in states:
        if i >= n:
            continue
        test = segs[i]
        if test[0] == "D":
            out.add(i)
            continue
        key = (i, text)
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = _seg_matches(test, text)
        if hit:
            out.add(i + 1)
    return _closure(segs, out) if out else frozenset()


# ------------------------------------------------------------------- shapes


@dataclass(frozen=True, slots=True)
class Shape:
    """What a requirement's resource expression can produce.

    ``template`` None: ``path(args.x)``, any canonical absolute path. Else the
    encoded template's segments (``compiler.encode_resource``): each a list of
    ``["t", text]`` and ``["h", [arg path]]`` pieces."""

    absolute: bool
    template: tuple[tuple[tuple[Any, ...], ...], ...] | None = None

    @classmethod
    def of(cls, resource: Mapping[str, Any]) -> Shape:
        """From a requirement's encoded resource expression."""
        if resource.get("kind") == "path":
            return cls(True, None)
        segs = tuple(
            tuple(("t", p[1]) if p[0] == "t" else ("h", tuple(p[1])) for p in seg)
            for seg in resource.get("segs", [])
        )
        return cls(bool(resource.get("abs")), segs)


@dataclass(frozen=True, slots=True)
class Witness:
    """One resource: its segments, its text, which patterns match it, and for a
    template the hole values that spell it (arg path -> value)."""

    segs: tuple[str, ...]
    text: str
    #: the indices of the patterns that match it
    accepted: frozenset[int]
    holes: tuple[tuple[tuple[str, ...], str], ...] = ()
    #: how many patterns were weighed
    size: int = 0

    @property
    def vector(self) -> tuple[bool, ...]:
        """Pattern by pattern, whether it matches."""
        return tuple(i in self.accepted for i in range(self.size))


@dataclass(slots=True)
class Witnesses:
    """What ``witnesses`` found, and whether it is everything (``notes`` say what is not)."""

    found: list[Witness] = field(default_factory=list)
    complete: bool = True
    notes: list[str] = field(default_factory=list)


def globs_of(patterns: Sequence[SegPattern]) -> list[Glob]:
    """Every segment predicate of the patterns: their literal segments and glob segments."""
    globs: dict[Glob, None] = {}
    for pat in patterns:
        for test in pat.segs:
            if test[0] == "L":
                globs.setdefault(Glob.literal(test[1]), None)
            elif test[0] == "G":
                globs.setdefault(test[1], None)
    return list(globs)


def _skeleton(pieces: tuple[tuple[Any, ...], ...]) -> tuple[Glob, re.Pattern[str]]:
    """A template segment with holes as a glob, and a regex that splits out the holes."""
    glob = Glob.of_pieces(pieces)
    holes = [i for i, p in enumerate(pieces) if p[0] == "h"]
    regex = "".join(
        re.escape(p[1]) if p[0] == "t" else ("(.+)" if i == holes[-1] else "(.+?)")
        for i, p in enumerate(pieces)
    )
    return glob, re.compile(regex, re.DOTALL)


def safe_hole(value: str) -> bool:
    """A value a template hole accepts: one non-empty segment, not ``.``/``..``."""
    return value not in ("", ".", "..") and "/" not in value and _CONTROL_RE.search(value) is None


def witnesses(
    patterns: Sequence[SegPattern], shape: Shape, *, max_states: int = 20000
) -> Witnesses:
    """One resource of ``shape`` per combination of ``patterns`` (match or not) that some
    resource achieves, shortest first. See the module docstring."""
    out = Witnesses()
    globs = globs_of(patterns)
    template = shape.template
    skeletons: list[tuple[Glob, re.Pattern[str]] | None] = []
    if template is not None:
        for pieces in template:
            skeletons.append(None if all(p[0] == "t" for p in pieces) else _skeleton(pieces))
        globs += [s[0] for s in skeletons if s is not None]
        if any(sum(p[0] == "h" for p in pieces) > 1 for pieces in template):
            out.complete = False
            out.notes.append("a template segment with several holes is split one way only")
    classes = representatives(globs, valid=valid_segment, max_states=max_states)
    if not classes.complete:
        out.complete = False
        out.notes.append("segment classes cut short at the state bound")
    alphabet = classes.strings
    # per template position: the segment texts allowed there, with their hole values
    per_position: list[list[tuple[str, tuple[tuple[tuple[str, ...], str], ...]]]] = []
    if template is not None:
        for pieces, skel in zip(template, skeletons, strict=True):
            if skel is None:
                per_position.append([("".join(p[1] for p in pieces), ())])
                continue
            names = [p[1] for p in pieces if p[0] == "h"]
            allowed = []
            for text in alphabet:
                m = skel[1].fullmatch(text)
                if m is None or not all(safe_hole(v) for v in m.groups()):
                    continue
                allowed.append((text, tuple(zip(names, m.groups(), strict=True))))
            per_position.append(allowed)
    # A product state lists only the patterns still alive, as (pattern, positions):
    # most patterns die at their first literal. Each state indexes its live literal
    # tests by text, so a step costs what the segment meets, not how many patterns live.
    start: State = tuple(
        (i, st)
        for i, p in enumerate(patterns)
        if p.absolute == shape.absolute and (st := _start(p.segs))
    )
    finals = [len(p.segs) for p in patterns]
    rank = {text: k for k, text in enumerate(alphabet)}
    glob_hits: dict[Glob, list[str]] = {}
    cache: dict[tuple[int, int, str], bool] = {}
    seen: set[tuple[int, State]] = {(0, start)}
    vectors: set[frozenset[int]] = set()
    Item = tuple[State, tuple[str, ...], tuple[Any, ...]]
    queue: deque[Item] = deque([(start, (), ())])
    n = len(patterns)
    while queue:
        state, segs, holes = queue.popleft()
        depth = len(segs)
        if template is None or depth == len(template):
            accepted = frozenset(i for i, st in state if finals[i] in st)
            if accepted not in vectors:
                vectors.add(accepted)
                body = "/".join(segs)
                text = ("/" + body) if shape.absolute else body
                out.found.append(Witness(segs, text, accepted, holes, n))
        if template is not None and depth == len(template):
            continue
        literal, rest = _index(patterns, state)
        if template is not None:
            choices = per_position[depth]
        else:
            choices = [(text, ()) for text in _distinct(alphabet, rank, literal, rest, glob_hits)]
        for text, spelled in choices:
            nxt = _step_state(patterns, literal, rest, text, cache)
            # a path's witnesses depend only on the product state; a template's also on depth
            key = (depth + 1 if template is not None else 0, nxt)
            if key in seen:
                continue
            if len(seen) >= max_states:
                if out.complete:
                    out.complete = False
                    out.notes.append("resource witnesses cut short at the state bound")
                continue
            seen.add(key)
            queue.append((nxt, (*segs, text), (*holes, *spelled)))
    return out


#: A product state: (pattern index, its automaton's positions) for each live pattern,
#: in pattern order.
State = tuple[tuple[int, frozenset[int]], ...]
#: A state's live tests: literal text -> (pattern, position); the others with their test.
Literals = dict[str, list[tuple[int, int]]]
Rest = list[tuple[int, int, SegTest]]


def _index(patterns: Sequence[SegPattern], state: State) -> tuple[Literals, Rest]:
    literal: Literals = {}
    rest: Rest = []
    for i, positions in state:
        segs = patterns[i].segs
        for pos in positions:
            if pos < len(segs):
                test = segs[pos]
                if test[0] == "L":
                    literal.setdefault(test[1], []).append((i, pos))
                else:
                    rest.append((i, pos, test))
    return literal, rest


def _step_state(
    patterns: Sequence[SegPattern],
    literal: Literals,
    rest: Rest,
    text: str,
    cache: dict[tuple[int, int, str], bool],
) -> State:
    moved: dict[int, set[int]] = {}
    for i, pos in literal.get(text, ()):
        moved.setdefault(i, set()).add(pos + 1)
    for i, pos, test in rest:
        kind = test[0]
        if kind == "D":
            moved.setdefault(i, set()).add(pos)
        elif kind == "S":
            moved.setdefault(i, set()).add(pos + 1)
        else:
            key = (i, pos, text)
            hit = cache.get(key)
            if hit is None:
                hit = cache[key] = _seg_matches(test, text)
            if hit:
                moved.setdefault(i, set()).add(pos + 1)
    return tuple((i, _closure(patterns[i].segs, moved[i])) for i in sorted(moved))


def _distinct(
    alphabet: Sequence[str],
    rank: Mapping[str, int],
    literal: Literals,
    rest: Rest,
    glob_hits: dict[Glob, list[str]],
) -> list[str]:
    """The segment texts that can lead somewhere different from this state: every text a
    live literal or glob test singles out, and one text none of them does (all such
    texts only ever meet ``*`` and ``**`` here, so they all lead to the same state)."""
    wanted = {text for text in literal if text in rank}
    for _i, _pos, test in rest:
        if test[0] == "G":
            hits = glob_hits.get(test[1])
            if hits is None:
                hits = glob_hits[test[1]] = [t for t in alphabet if test[1].matches(t)]
            wanted.update(hits)
    plain = next((t for t in alphabet if t not in wanted), None)
    if plain is not None:
        wanted.add(plain)
    return sorted(wanted, key=rank.__getitem__)


def overlap(a: SegPattern, b: SegPattern, shape: Shape) -> Witness | None:
    """A resource of ``shape`` both patterns match, or None when they are disjoint there."""
    for w in witnesses([a, b], shape).found:
        if w.accepted == {0, 1}:
            return w
    return None
