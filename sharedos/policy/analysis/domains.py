"""The values worth trying for one variable, from what the conditions tell apart (``atoms``).

A variable's *domain* holds one value per class of values its uses treat
alike: one string per combination of its globs (``strings.representatives``),
the numbers at and between its bounds, both booleans when it is a boolean,
the subsets of the elements tested for membership in it when it is a list,
and the values that make every use an error (missing, ``null``).

The context follows the kernel's schema (``AccessContext.policy_input``):
``principal``, ``tenant`` and ``turn_id`` are always present identifiers (1 to
256 characters, no control character), ``roles`` is always a list of strings,
``attributes`` always an object whose keys may hold any JSON value or be
missing. Any other key (one a newer kernel passes, or a hand-written
context's) is tried missing and with the values its uses suggest, like an
argument. Arguments may hold any JSON value or be missing.

``context.now`` (the time of the call, ``sharedos.policy.clock``) is always
the complete object the host gives, never missing: its members take their
valid values only, chosen jointly (``clock_values``), so every witness is a
time there is.

A variable interpolated into a pattern (``{context.principal}``) also gets
a value equal to every literal segment of the patterns and values that are
*unsafe* in a segment (containing ``/`` or ``*``, ``.``, ``..``), since those
decide whether the pattern matches.

A variable read through ``path()`` (``startswith(path(args.dst), "/a/")``)
takes the canonical paths that tell its tests apart (one witness path per
combination, ``segments.witnesses``, exactly as resources are found) and one
value that is no path at all. A variable tested with ``has`` is tried
missing and present.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sharedos.policy.analysis.atoms import Atoms, ResourceAtom, Uses, Var
from sharedos.policy.analysis.segments import SegPattern, Shape, witnesses
from sharedos.policy.analysis.strings import STAR, Glob, representatives


class _Missing:
    """The value of a variable that is not there (an argument not passed)."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()

#: Two distinct values shared by variables compared with each other (so they can be
#: equal, and different, even when no constant distinguishes them).
_SHARED = ("v1", "v2")

#: Values tried in place of a one-character representative, so examples read naturally.
_READABLE = ("user", "alice", "bob", "carol", "dave")

#: The kernel's context keys (``AccessContext.policy_input``).
IDENTIFIERS = ("principal", "tenant", "turn_id")


#: The context key of the time of the call (``sharedos.policy.clock``).
CLOCK = "now"


def context_kind(path: tuple[str, ...]) -> str:
    """What the kernel can put at ``context.<path>``: ``identifier``, ``roles``,
    ``attributes`` (the object), ``now`` (the time object) or ``now.<member>`` (one
    of its members), ``absent`` (below an identifier, the roles or a member of the
    time, or a member the time does not have) or ``any`` (an attribute, or a key this
    schema does not know, such as one a newer kernel passes: any JSON value, or
    missing)."""
    from sharedos.policy.clock import FIELDS

    head = path[0]
    if head in IDENTIFIERS:
        return "identifier" if len(path) == 1 else "absent"
    if head == "roles":
        return "roles" if len(path) == 1 else "absent"
    if head == "attributes":
        return "attributes" if len(path) == 1 else "any"
    if head == CLOCK:
        if len(path) == 1:
            return "now"
        return f"now.{path[1]}" if len(path) == 2 and path[1] in FIELDS else "absent"
    return "any"


def _valid_identifier(text: str) -> bool:
    return 1 <= len(text) <= 256 and all(not (c < " " or "\x7f" <= c <= "\x9f") for c in text)


def _any_string(text: str) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Domain:
    """The values to try for one variable; ``complete`` False when some class was cut
    (``note``: why, when it is not a bound)."""

    values: tuple[Any, ...]
    complete: bool = True
    note: str | None = None


class Domains:
    """Domains of every variable the ``atoms`` mention (built on first use, then kept)."""

    def __init__(
        self,
        atoms: Atoms,
        *,
        interpolated: Iterable[Var] = (),
        segment_globs: Iterable[Glob] = (),
        max_members: int = 6,
        max_states: int = 4096,
    ) -> None:
        self._atoms = atoms
        self._interpolated = set(interpolated)
        self._segment_globs = list(segment_globs)
        self._max_members = max_members
        self._max_states = max_states
        self._cache: dict[Var, Domain] = {}
        self._merged = self._merge()

    def _merge(self) -> dict[Var, Uses]:
        """Each variable's uses plus what relations to other variables add."""
        uses = self._atoms.uses
        merged: dict[Var, Uses] = {}
        for var, own in uses.items():
            m = Uses(
                dict(own.strings),
                list(own.values),
                list(own.bounds),
                list(own.members),
                own.fresh_member,
                own.boolean,
                own.as_path,
                elements=list(own.elements),
                path_atoms=dict(own.path_atoms),
                presence=own.presence,
            )
            merged[var] = m
        # equality: a connected component shares its constants
        seen: set[Var] = set()
        for var in uses:
            if var in seen or not uses[var].equal_to:
                continue
            component: set[Var] = set()
            todo = [var]
            while todo:
                v = todo.pop()
                if v in component:
                    continue
                component.add(v)
                todo.extend(uses[v].equal_to if v in uses else ())
            seen |= component
            for v in component:
                target = merged.setdefault(v, Uses())
                for other in component:
                    src = uses.get(other)
                    if src is None:
                        continue
                    for g in src.strings:
                        if g.text is not None:
                            target.strings.setdefault(g, None)
                    for value in src.values:
                        target.add_value(value)
                for shared in _SHARED:
                    target.add_value(shared)
        # membership of one variable's value in another (list) variable
        for var, own in uses.items():
            for target_var in own.member_of:
                lst = merged.setdefault(target_var, Uses())
                item = merged[var]
                for g in list(item.strings):
                    if g.text is not None:
                        lst.add_member(g.text)
                for value in item.values:
                    lst.add_member(value)
                for member in list(lst.members):
                    item.add_value(member)
                lst.add_member(_SHARED[0])
                item.add_value(_SHARED[0])
                item.add_value(_SHARED[1])
        return merged

    def domain(self, var: Var) -> Domain:
        """The values to try for ``var``."""
        found = self._cache.get(var)
        if found is None:
            found = self._cache[var] = self._build(var)
        return found

    def _build(self, var: Var) -> Domain:
        root, path = var
        uses = self._merged.get(var) or Uses()
        kind = context_kind(path) if root == "context" else "any"
        if kind == "absent":
            return Domain((MISSING,))
        if kind == "identifier":
            strings = self._strings(var, uses, _valid_identifier)
            return Domain(tuple(strings.values), strings.complete)
        if kind == "roles":
            lists = self._lists(uses, strings_only=True)
            extra = [[e] for e in uses.elements if type(e) is str]
            return Domain(tuple(_dedupe([*lists.values, *extra])), lists.complete)
        if kind == "attributes":
            return Domain(({},))
        if kind.startswith("now"):
            # the time is joined into one object per witness (``clock_values``): here,
            # only whether its member is read at all
            return Domain((MISSING,))
        # any JSON value, or missing
        values: list[Any] = [MISSING, None]
        complete = True
        note: str | None = None
        used = uses.presence  # missing and present (null): what `has` tells apart
        raw = bool(uses.strings) or var in self._interpolated
        if raw:
            strings = self._strings(var, uses, _any_string)
            values += strings.values
            complete = complete and strings.complete
            note = strings.note
            used = True
        if uses.as_path:
            paths = self._paths(uses)
            # a string that is no path (path() is an error) and the canonical paths
            values += ["x", *paths.values]
            complete = complete and paths.complete
            if raw:
                complete = False
                note = (
                    "read both through path() and as written: the values tried are "
                    "canonical paths and the written forms apart, not every mix"
                )
            used = True
        if uses.bounds:
            values += _numbers(uses.bounds)
            used = True
        if uses.boolean or any(type(v) is bool for v in uses.values):
            values += [True, False]
            used = True
        if uses.members or uses.fresh_member or any(isinstance(v, list) for v in uses.values):
            lists = self._lists(uses, strings_only=False)
            values += lists.values
            complete = complete and lists.complete
            used = True
        if uses.elements:
            values += [[], *([e] for e in uses.elements)]
            used = True
        for value in uses.values:
            if type(value) is not str and not _has(values, value):
                values.append(value)
        if not used:
            # read only where the analysis has a gap: one value of every JSON type
            values += ["x", 0, True, [], {}]
        return Domain(tuple(_dedupe(values)), complete, note)

    def _paths(self, uses: Uses) -> Domain:
        """One canonical path per combination of the tests on a variable's ``path()``
        (a witness, as for resources)."""
        from sharedos.policy.analysis.resource_atoms import translate

        patterns: list[SegPattern] = []
        for test, position, text in uses.path_atoms:
            atom = ResourceAtom(test, position, _lit(text), False, frozenset())
            patterns += [p for p in translate(atom, {}) if p.absolute]
        found = witnesses(patterns, Shape(True, None), max_states=self._max_states)
        texts = [w.text for w in found.found]
        if len(texts) == 1:
            texts.append("/x")  # no test on it: a path under the root too
        return Domain(tuple(texts), found.complete)

    def _strings(self, var: Var, uses: Uses, valid: Any) -> Domain:
        globs = list(uses.strings)
        if var in self._interpolated:
            # what decides a pattern match: equal to a literal segment, matched by a
            # glob segment, or unsafe in a segment
            globs += self._segment_globs
            globs += [Glob.infix("/"), Glob.infix("*"), Glob.literal("."), Glob.literal("..")]
        if uses.as_path:
            globs.append(Glob.prefix("/"))
        globs = _dedupe(globs)
        note = None
        if any(g.fold for g in globs) and any(not g.fold and STAR in g.tokens for g in globs):
            note = (
                "read both through lower() and with a wildcard test as written: a value "
                "whose case folding depends on neighbouring characters (a combining "
                "mark) is not tried"
            )
        classes = representatives(globs, valid=valid, max_states=self._max_states)
        # a readable value in place of a shortest one that no glob singles out, when it
        # is treated exactly alike ("user" rather than "x"). Each readable value's
        # vector is computed once, not once per class: with one class per literal,
        # a condition of n literals would otherwise cost n * n glob matches.
        readable: dict[tuple[bool, ...], list[str]] = {}
        for nicer in _READABLE:
            if valid(nicer):
                readable.setdefault(tuple(g.matches(nicer) for g in globs), []).append(nicer)
        strings: list[str] = []
        for text, vector in classes.found:
            for nicer in readable.get(tuple(vector), ()):
                if nicer not in strings:
                    text = nicer
                    break
            strings.append(text)
        # ordinary values first: examples read better, and a sample keeps them
        ordered = sorted(strings, key=lambda s: (not _ordinary(s), s not in _READABLE, len(s)))
        return Domain(tuple(ordered), classes.complete and note is None, note)

    def _lists(self, uses: Uses, *, strings_only: bool) -> Domain:
        members = [m for m in uses.members if not strings_only or type(m) is str]
        complete = True
        if len(members) <= self._max_members:
            subsets = [
                list(c) for n in range(len(members) + 1) for c in itertools.combinations(members, n)
            ]
        else:
            complete = False
            subsets = [[], list(members)]
            subsets += [[m] for m in members]
            subsets += [[x for x in members if x != m] for m in members]
        if uses.fresh_member:
            fresh = _fresh_member(members)
            subsets += [[fresh], [*members, fresh]]
        for value in uses.values:
            if isinstance(value, list) and (not strings_only or all(type(v) is str for v in value)):
                subsets.append(list(value))
        return Domain(tuple(_dedupe(subsets)), complete)


def _ordinary(text: str) -> bool:
    """A value that is also safe in a pattern segment (no ``/``, ``*``, not ``.``/``..``)."""
    return text not in ("", ".", "..") and "/" not in text and "*" not in text


def _fresh_member(members: list[Any]) -> str:
    n = 0
    while f"x{n}" in members:
        n += 1
    return f"x{n}"


def _numbers(bounds: list[int | float]) -> list[int | float]:
    """A number below, at, between and above the bounds (every ordering class)."""
    points = sorted(set(bounds))
    out: list[int | float] = [_step(points[0], -1)]
    for a, b in itertools.pairwise(points):
        out.append(a)
        mid = a / 2 + b / 2  # never past the largest float, as (a + b) / 2 can be
        out.append(int(mid) if mid == int(mid) and mid not in (a, b) else mid)
    out.append(points[-1])
    out.append(_step(points[-1], 1))
    # a number is finite (JSON has no infinity): none lies beyond the largest float
    return [n for n in out if n - n == 0]


def _step(point: int | float, way: int) -> int | float:
    """A number just below (``way`` -1) or above (1) ``point``: ``point ± 1`` where that is
    another number (1e300 + 1 is 1e300), else the next float that way."""
    moved = point + way
    if moved != point:
        return moved
    return math.nextafter(point, way * math.inf)


def _lit(value: Any) -> str:
    import json

    return json.dumps(["lit", value], separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _strict(value: Any) -> Any:
    """A key that tells apart what the language's equality tells apart at any depth
    (``true`` and ``1``, ``[true]`` and ``[1]``, ``{"a": true}`` and ``{"a": 1}``),
    which Python's ``==`` does not."""
    if value is MISSING:
        return ("missing",)
    if isinstance(value, bool) or value is None:
        return (type(value).__name__, value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list | tuple):
        return ("list", tuple(_strict(v) for v in value))
    if isinstance(value, dict):
        return ("object", tuple(sorted((str(k), _strict(v)) for k, v in value.items())))
    try:
        hash(value)
    except TypeError:
        return ("other", repr(value))
    return ("other", value)


def _has(values: list[Any], value: Any) -> bool:
    key = _strict(value)
    return any(_strict(v) == key for v in values)


def _dedupe(values: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    seen: set[Any] = set()
    for value in values:
        key = _strict(value)
        if key not in seen:
            seen.add(key)
            out.append(value)
    return out
