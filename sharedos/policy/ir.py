"""The typed runtime form of a compiled policy (what the evaluators walk).

The compiled *program* (``compiler.compile_program``) is JSON-ready data:
that is what bundles store and what ``bundle_hash`` is computed over. This
module decodes it into slotted objects the evaluator, the partial evaluator
and the explainer share:

* ``RuleRecord`` — one permit/forbid: where it lives, its condition compiled
  to a closure, and a *matcher* (``MatchKind`` plus the data that kind needs)
  that tests a resource without a regex in the common cases;
* ``Matcher`` — the same test for a pattern that interpolates the context,
  built per context (``matcher_for``);
* ``ToolPlan`` — one requirement ready to decide: resolver, resource shape and
  the decision-walk index of its (namespace, action).

The index structures (``TrieNode``, ``WalkNode``) live in ``index``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Literal

from sharedos.errors import SharedOSError
from sharedos.policy.conditions import Env, compile_applies
from sharedos.policy.decision import Requirement, RuleRef
from sharedos.policy.patterns import (
    Resolved,
    is_context_dependent,
    literal_prefix,
    parse_pattern,
    resolve,
    to_regex,
)
from sharedos.policy.resolvers import Resolver

if TYPE_CHECKING:
    from sharedos.policy.index import WalkNode

#: Positions of a rule record in the program's JSON form (``encode_rule``/``decode_rule``).
_ID, _EFFECT, _FILE, _LINE, _COL, _NS, _PATTERN, _PENC, _COND, _KIND, _CTXONLY, _DESC = range(12)
_RULE_FIELDS = 12

Applies = Callable[[Env], bool]
RegexMatch = Callable[[str], "re.Match[str] | None"]


class MatchKind(IntEnum):
    """How a rule tests a resource once the index has matched its literal prefix."""

    #: ``**`` after the literal prefix: every resource the index reaches matches
    ANY = 0
    #: exactly ``depth`` segments (the pattern ends at its prefix, or with one ``*``)
    DEPTH = 1
    #: exactly ``depth`` segments, the last one ``head*tail`` (e.g. ``*.md``)
    AFFIX = 2
    #: anything else: a backtracking-safe regex over the match key
    REGEX = 3
    #: the pattern interpolates the context: a ``Matcher`` is built per context
    CONTEXT = 4


@dataclass(slots=True, eq=False)
class Matcher:
    """A resource test for one resolved pattern (see ``matcher_for``).

    Segments before ``start`` are already known to match (the index walked
    them); ``lits`` are further literal segments from ``start`` on (values
    interpolated from the context). ``regex`` is set for ``MatchKind.REGEX``.
    """

    kind: MatchKind
    start: int
    lits: list[str]
    depth: int
    head: str
    tail: str
    least: int
    regex: RegexMatch | None

    def matches(self, segs: list[str], key: str) -> bool:
        """True when the canonical resource (``segs``, match key ``key``) matches."""
        kind = self.kind
        if kind is MatchKind.REGEX:
            return self.regex is not None and self.regex(key) is not None
        lits = self.lits
        if lits and segs[self.start : self.start + len(lits)] != lits:
            return False
        if kind is MatchKind.ANY:
            return True
        if len(segs) != self.depth:
            return False
        if kind is MatchKind.DEPTH:
            return True
        last = segs[-1]
        return len(last) >= self.least and last.startswith(self.head) and last.endswith(self.tail)


def _single_wildcard(pieces: Sequence[Sequence[Any]]) -> tuple[str, str] | None:
    """(head, tail) of glob pieces ``head*tail`` with one wildcard and no hole, else None."""
    kinds = [p[0] for p in pieces]
    if kinds.count("w") != 1 or "c" in kinds:
        return None
    star = kinds.index("w")
    return (
        "".join(p[1] for p in pieces[:star]),
        "".join(p[1] for p in pieces[star + 1 :]),
    )


def _shape_matcher(
    segs: Sequence[Sequence[Any]], start: int, glob_pieces: int
) -> tuple[MatchKind, list[str], int, str, str] | None:
    """Kind, literals, depth, head, tail of a segment list (encoded or resolved); None: needs a regex.

    ``glob_pieces`` is the position of a glob segment's pieces (1 encoded, 2 resolved).
    """
    prefix = 0
    while prefix < len(segs) and segs[prefix][0] == "L":
        prefix += 1
    lits = [s[1] for s in segs[start:prefix]]
    rest = segs[prefix:]
    if not rest:
        return MatchKind.DEPTH, lits, prefix, "", ""
    if len(rest) != 1:
        return None
    kind = rest[0][0]
    if kind == "D":
        return MatchKind.ANY, lits, prefix, "", ""
    if kind == "S":
        return MatchKind.DEPTH, lits, prefix + 1, "", ""
    affix = _single_wildcard(rest[0][glob_pieces]) if kind == "G" else None
    if affix is None:
        return None
    return MatchKind.AFFIX, lits, prefix + 1, affix[0], affix[1]


def matcher_for(resolved: Resolved, start: int) -> Matcher:
    """The cheapest exact test for a safe resolved pattern whose first ``start`` segments the index matched."""
    shape = _shape_matcher(resolved.segs, start, 2)
    if shape is None:
        regex = re.compile(to_regex(resolved)).fullmatch
        return Matcher(MatchKind.REGEX, start, [], 0, "", "", 0, regex)
    kind, lits, depth, head, tail = shape
    return Matcher(kind, start, lits, depth, head, tail, len(head) + len(tail), None)


def static_matcher(
    pattern_enc: Mapping[str, Any],
) -> tuple[MatchKind, int, str, str, RegexMatch | None]:
    """Kind, depth, head, tail and regex of an encoded pattern that does not interpolate
    the context, for a resource whose literal prefix the index matched."""
    segs = pattern_enc["segs"]
    start = 0
    while start < len(segs) and segs[start][0] == "L":
        start += 1
    shape = _shape_matcher(segs, start, 1)
    if shape is None:
        return (
            MatchKind.REGEX,
            0,
            "",
            "",
            re.compile(to_regex(resolve(pattern_enc, None))).fullmatch,
        )
    kind, _lits, depth, head, tail = shape
    return kind, depth, head, tail, None


@dataclass(slots=True, eq=False)
class RuleRecord:
    """One compiled permit/forbid, decoded from the program and ready to evaluate.

    ``index`` is the rule's position in the program (per-context verdict
    caches are indexed by it). ``applies`` is ``None`` for an unconditional
    rule; ``context_only`` says the condition reads nothing but the context
    (its verdict is cached per context). The matcher fields (``match`` and,
    per kind, ``depth``/``head``/``tail``/``least``/``regex``) are those of
    ``Matcher`` with the index's prefix already matched; a ``CONTEXT`` rule
    keeps its encoded pattern (``pattern_enc``) to resolve per context.
    ``description`` is the rule's ``@description``, for explanations.
    """

    index: int
    id: str
    effect: Literal["permit", "forbid"]
    forbid: bool
    namespace: str
    pattern: str
    pattern_enc: dict[str, Any]
    condition: list[Any] | None
    condition_kind: Literal["when", "unless", "when unless"] | None
    context_only: bool
    applies: Applies | None
    match: MatchKind
    depth: int
    head: str
    tail: str
    least: int
    regex: RegexMatch | None
    ref: RuleRef
    description: str | None

    def resolve(self, context: Any) -> Resolved:
        """The pattern with ``{context.x}`` filled in (unsafe values fail closed in a forbid)."""
        return resolve(self.pattern_enc, context, forbid=self.forbid)

    def context_matcher(self, context: Any) -> Matcher | None:
        """A ``CONTEXT`` rule's matcher for one context; None: it matches nothing there."""
        resolved = self.resolve(context)
        if not resolved.safe:
            return None  # a permit interpolating a missing or unsafe value matches nothing
        return matcher_for(resolved, len(literal_prefix(self.pattern_enc)))


class MalformedProgram(SharedOSError, ValueError):
    """A program (usually from a bundle) whose structure is not what the compiler writes."""


def decode_rule(raw: Sequence[Any], index: int) -> RuleRecord:
    """Decode one rule of the program's JSON form; raise ``MalformedProgram`` if it is not one."""
    if not isinstance(raw, list | tuple) or len(raw) != _RULE_FIELDS:
        raise MalformedProgram(f"rule #{index} is not a rule record")
    rid, effect, file, line, col = raw[_ID], raw[_EFFECT], raw[_FILE], raw[_LINE], raw[_COL]
    kind = raw[_KIND]
    if (
        type(rid) is not str
        or effect not in ("permit", "forbid")
        or type(file) is not str
        or type(line) is not int
        or type(col) is not int
        or type(raw[_PATTERN]) is not str
        or kind not in ("when", "unless", "when unless", None)
        or (raw[_COND] is not None and not isinstance(raw[_COND], list))
        or (raw[_DESC] is not None and type(raw[_DESC]) is not str)
    ):
        raise MalformedProgram(f"rule #{index} has a malformed field")
    penc = raw[_PENC]
    if penc is None:
        penc = parse_pattern(raw[_PATTERN])
    forbid = effect == "forbid"
    cond = raw[_COND]
    ref = RuleRef(rid, file, line, col, effect)
    applies = compile_applies(cond, kind, forbid) if cond is not None else None
    if is_context_dependent(penc):
        kind_, depth, head, tail, regex = MatchKind.CONTEXT, 0, "", "", None
    else:
        kind_, depth, head, tail, regex = static_matcher(penc)
    return RuleRecord(
        index,
        rid,
        effect,
        forbid,
        str(raw[_NS]),
        raw[_PATTERN],
        penc,
        cond,
        kind,
        bool(raw[_CTXONLY]),
        applies,
        kind_,
        depth,
        head,
        tail,
        len(head) + len(tail),
        regex,
        ref,
        raw[_DESC],
    )


def encode_rule(
    rule_id: str,
    effect: str,
    file: str,
    line: int,
    col: int,
    namespace: str,
    pattern: str,
    condition: list[Any] | None,
    condition_kind: str | None,
    context_only: bool,
    description: str | None,
) -> list[Any]:
    """A rule record in the program's JSON form (the parsed pattern is recomputed on load)."""
    return [
        rule_id,
        effect,
        file,
        line,
        col,
        namespace,
        pattern,
        None,
        condition,
        condition_kind,
        context_only,
        description,
    ]


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """A requirement ready to decide: how to resolve its resource and which index to walk.

    ``walk`` is the decision walk of its (namespace, action) for its
    resource kind (absolute or relative); ``forbids``/``permits`` are every
    rule of that walk, in program order.
    """

    name: str
    namespace: str
    action: str
    resolve: Resolver
    absolute: bool
    shape: tuple[Any, ...]
    requirement: Requirement
    walk: WalkNode
    forbids: tuple[RuleRecord, ...]
    permits: tuple[RuleRecord, ...]
