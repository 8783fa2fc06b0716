"""The evaluator: one call in, one ``Decision`` out (forbid overrides permit, default deny).

``Evaluator`` owns the program and everything a decision reads: the tool
plans, the rule records (``ir``), the decision walks (``index``), and the
per-context caches. The partial evaluator (``partial_eval``) and the
explainer (``explainer``) read the same state; ``PolicySet`` is the public
face of all three.

Hot path notes: ``decide`` touches dicts, lists, tuples and slotted records
only. The walks a decision descends are the program's, rebuilt at load as
one trie of tuples per namespace whose groups hold the rules' rows directly
(``index.merged_walk``): at thousands of rules every indirection is a cache
miss. The load also
compiles every condition a decision evaluates as written, every general
matcher and every context plan (one compile per distinct condition), so the
first decision of a request costs what later ones do, less building its
``Decision`` (the rule references it cites are built by the load too, one
per rule, and copies of a rule cited together share one tuple of them);
the rule records explanations read are decoded on first use
(``PolicySet.prepare`` decodes all of them, if a host wants that). A context
rule's matcher is tested inline against its quick reject
(``Matcher.qpos``/``qtext``) before it is called. A ``path(args.x)``
resource that is already canonical is recognised inline with the same
C-level string tests ``paths.canonical_path`` starts with; anything else goes
through ``canonical_path``. Context-only conditions and context-interpolated
patterns are evaluated once per ``context_key`` and kept in a bounded map;
decisions, which are values, are kept by tool, cited rule and resource
(bounded too) and shared.
"""

from __future__ import annotations

import gc
import threading
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from itertools import filterfalse
from typing import TYPE_CHECKING, Any

from sharedos.outcomes import Effect, ReasonCode
from sharedos.policy.columns import (
    ALWAYS,
    NEVER,
    NO_PLAN,
    RuleColumns,
    checked_prefilter,
    glob_ok,
    glob_texts,
    held_roles,
    hole_value,
    twin_maps,
    validate_buckets,
)
from sharedos.policy.conditions import Env, compile_expr
from sharedos.policy.decision import Decision, Requirement, RuleRef, SourceSpan, new_decision
from sharedos.policy.index import (
    Node,
    empty_walk,
    merged_walk,
    validate_groups,
    validate_walk,
    walk_groups,
)
from sharedos.policy.ir import (
    CONDITION_KINDS,
    MalformedProgram,
    Matcher,
    MatchKind,
    RuleRecord,
    RuleTable,
    ToolPlan,
    decode_packed,
)
from sharedos.policy.matchers import GLOB_TEST, LIT_TEST, match_general
from sharedos.policy.paths import MAX_PATH_CHARS
from sharedos.policy.patterns import Shape
from sharedos.policy.prefilter import (
    ABOVE,
    ANY_OF,
    AT_LEAST,
    AT_MOST,
    BELOW,
    BUCKET_MIN,
    EQUALS,
    GUARDED,
    HOLDS,
    PREFIX,
    ROLE_IS,
    ROLE_NOT,
    SUFFIX,
    read_expr,
    value_buckets,
    value_keys,
)
from sharedos.policy.resolvers import (
    Resolver,
    Unresolvable,
    path_resolver,
    resource_shape,
    template_resolver,
)

if TYPE_CHECKING:
    from sharedos.policy.approvals import ApprovalRules
    from sharedos.toolpolicy import ToolPolicy

#: How many distinct contexts keep cached condition results.
CONTEXT_CACHE_SIZE = 256
#: How many contexts seen once are remembered (keys only), so the second sight caches.
CONTEXT_SEEN_SIZE = 4 * CONTEXT_CACHE_SIZE
#: How many distinct decisions are kept for reuse (cleared when full).
DECISION_CACHE_SIZE = 65536

_ALLOW = Effect.ALLOW
_DENY = Effect.DENY
_ALLOWED = ReasonCode.ALLOWED
_FORBIDDEN = ReasonCode.FORBIDDEN
_NO_PERMIT = ReasonCode.NO_MATCHING_PERMIT
_DEPTH = MatchKind.DEPTH
_AFFIX = MatchKind.AFFIX
_GENERAL = MatchKind.GENERAL
_MISSING: Any = object()
#: ``held`` not computed yet (None means: not a list of strings, evaluate as written)
_UNSET: Any = object()
_NEVER, _ALWAYS, _NO_PLAN = NEVER, ALWAYS, NO_PLAN
_is_normalized = unicodedata.is_normalized
#: value-key modes a decision reads besides ``EQUALS`` (strings only): numbers too, membership,
#: prefixes, suffixes and the order keys (``prefilter``)
_NUMBERS, _HOLDS, _PREFIX, _SUFFIX = 2, HOLDS, PREFIX, SUFFIX
#: a membership key some rule sits under twice or more (``any_in``): taken once each
_HOLDS_ANY = -1
#: an ``or`` of equality and membership keys on several reads (``_by_reads``)
_ANY_OF = ANY_OF
_STRINGS = object()  # a context entry's values: a membership key's strings, by path
_AT_MOST, _BELOW, _AT_LEAST, _ABOVE = AT_MOST, BELOW, AT_LEAST, ABOVE
#: a group kept by the resource's segment at one position, by the head or the tail of the
#: segment at one position, or by any of its segments (``_segment_buckets``)
_SEGMENT, _SEGMENT_HEAD, _SEGMENT_TAIL, _SEGMENT_ANY = 9, 10, 11, 12


#: a group keeps the rules its walk decides alone apart when it has at least this
#: many (fewer are as quickly tested one by one)
SURE_MIN = 3
#: how many sets of held guard roles a group remembers the applying unless-rules of
UNLESS_MEMO = 64


def _split_sure(
    rest: list[int],
    roles_kept: dict[str, list[int]],
    rows: list[tuple[Any, ...]],
    copies: dict[int, tuple[int, ...]] | None,
) -> tuple[Any, list[int], dict[str, list[int]]]:
    """Take out of a group the rules whose applying the walk and the roles held decide
    alone: ``prefix/**`` (nothing to match once the walk is there) with no condition,
    with exactly ``unless "R" in context.roles`` (it applies unless R is held), or with
    exactly ``when "R" in context.roles`` in R's bucket (it is read only when R is
    held). A decision cites them in bulk instead of testing them one by one: a deep
    path under forbids ``unless`` a role on overlapping prefixes meets dozens.

    Returns ``(sure, the other plain rules, the other role buckets)``; ``sure`` is
    ``(always, {R: unless-R rules}, every unless rule, {R: when-R rules}, memo)``
    (each a tuple of rule positions, copies included; ``memo``: the unless rules that
    apply, by the set of their roles held, filled by decisions), or None when the
    group has fewer than ``SURE_MIN`` such rules (then nothing is taken out). Only
    trusted role forms are used (``columns.checked_prefilter``), and only when the
    caller's roles are a list of strings (``held`` not None); otherwise the group is
    read row by row."""
    always: list[int] = []
    unless: dict[str, list[int]] = {}
    others: list[int] = []
    for i in rest:
        row = rows[i]
        if row[1] == 0 and not row[5]:
            always.append(i)
        elif row[1] == 0 and row[6] == ROLE_NOT and type(row[7]) is str:
            unless.setdefault(row[7], []).append(i)
        else:
            others.append(i)
    by_held: dict[str, list[int]] = {}
    roles: dict[str, list[int]] = {}
    for r, ids in roles_kept.items():
        for i in ids:
            row = rows[i]
            if row[1] == 0 and row[6] == ROLE_IS and row[7] == r:
                by_held.setdefault(r, []).append(i)
            else:
                roles.setdefault(r, []).append(i)
    found = len(always) + sum(map(len, unless.values())) + sum(map(len, by_held.values()))
    if found < SURE_MIN:
        return None, rest, roles_kept
    twins = copies or {}

    def cited(ids: list[int]) -> tuple[int, ...]:
        return tuple(j for i in ids for j in (i, *twins.get(i, ())))

    sure: tuple[Any, ...] = (
        cited(always),
        {r: cited(ids) for r, ids in unless.items()},
        cited([i for ids in unless.values() for i in ids]),
        {r: cited(ids) for r, ids in by_held.items()},
        {},  # the unless rules that apply, by the set of their roles held (UNLESS_MEMO)
    )
    return sure, others, roles


def _value_table(
    mode: int,
    by_value: dict[Any, list[int]],
    rows: list[tuple[Any, ...]],
    whole: set[int],
    copies: dict[int, tuple[int, ...]] | None,
) -> Any:
    """How a decision reads one value-keyed group (``prefilter``, "Why a value key is
    exact"): ``{value: rows}`` for an equality or membership key; ``({affix: rows},
    the affix lengths, longest first)`` for a prefix or suffix key.

    For an order key, ``(the bounds ascending, rows, starts, cited, cited starts)``,
    so that what a number keeps is a slice: ``rows`` are the rules to test, in the
    order of their bounds, and ``starts[k]`` where bound k's begin (the last is the
    number of rows); ``cited`` are the rules the key decides alone — ``prefix/**``
    (nothing left to match) whose whole condition is the key term — with their
    copies, cited without a test (a family of thresholds applies by the hundred).
    """
    if mode < _PREFIX:
        return {v: tuple(rows[i] for i in ids) for v, ids in by_value.items()}
    if mode <= _SUFFIX:
        return _affix_table({v: tuple(rows[i] for i in ids) for v, ids in by_value.items()})
    twins = copies or {}
    bounds = sorted(by_value)
    tested: list[Any] = []
    cited: list[int] = []
    starts: list[int] = []
    cited_starts: list[int] = []
    for bound in bounds:
        starts.append(len(tested))
        cited_starts.append(len(cited))
        for i in by_value[bound]:
            row = rows[i]
            if i in whole and row[1] == 0:
                cited.append(i)
                cited.extend(twins.get(i, ()))
            else:
                tested.append(row)
    starts.append(len(tested))
    cited_starts.append(len(cited))
    return bounds, tuple(tested), tuple(starts), tuple(cited), tuple(cited_starts)


def _affix_table(by_affix: dict[str, tuple[Any, ...]]) -> tuple[Any, tuple[int, ...]]:
    """``(by_affix, the affix lengths, longest first)``: what ``_by_affix`` reads."""
    return by_affix, tuple(sorted({len(a) for a in by_affix}, reverse=True))


def _by_affix(v: Any, tv: type, table: Any, mode: int) -> tuple[Any, ...] | None:
    """The rows a prefix or suffix key (``_PREFIX`` / ``_SUFFIX``) keeps for the string
    read, through each affix length of ``table`` (``_affix_table``): a value key's, or
    the head or tail of a resource's segment (``_segment_buckets``). None when
    the key cannot decide that value (every rule is then tested as written)."""
    if tv is not str:
        return None
    by_affix, lengths = table
    n = len(v)
    got: tuple[Any, ...] = ()
    for k in lengths:
        if k <= n:
            rows = by_affix.get(v[:k] if mode == _PREFIX else v[n - k :])
            if rows is not None:
                got += rows
    return got


def _strings_of(v: Any, tv: type) -> frozenset[str] | None:
    """The strings a membership key's read holds, as a set; None when it is not a list
    (or tuple) of strings (the key cannot decide it: every rule is tested as written)."""
    if tv is not list and tv is not tuple:
        return None
    for e in v:
        if type(e) is not str:
            return None
    return frozenset(v)


def _held_once(held: frozenset[str], table: dict[str, tuple[Any, ...]]) -> tuple[Any, ...]:
    """The rows a membership key (``_HOLDS``, ``_HOLDS_ANY``) keeps for the strings
    ``held`` the read holds: each row once, however many of its values are held.
    Walks the smaller of the two, so a caller holding thousands of roles or groups
    costs what the group's values do, not what the caller holds."""
    if len(held) <= len(table):
        found = [got for got in map(table.get, held) if got is not None]
    else:
        found = [got for e, got in table.items() if e in held]
    if len(found) < 2:
        return found[0] if found else ()
    # each rule's row is one object in every bucket it sits in: first seen, kept
    return tuple({id(row): row for rows in found for row in rows}.values())


def _any_of_table(
    reads: tuple[Any, ...], by_value: dict[Any, list[int]], rows: list[tuple[Any, ...]]
) -> tuple[tuple[Any, int, dict[Any, tuple[Any, ...]]], ...]:
    """How a decision reads a group keyed by an ``or`` on several reads
    (``prefilter.ANY_OF``): per read, ``(the read compiled, its mode, its table)``, the
    table as ``_value_table`` makes it for a key on that read alone (no rule cited
    without a test); ``by_value`` is keyed by ``(position of the read, value)``."""
    ids_by_read: list[dict[Any, list[int]]] = [{} for _ in reads]
    for (k, v), ids in by_value.items():
        ids_by_read[k][v] = ids
    out = []
    for (mode, root, path, steps), by_v in zip(reads, ids_by_read, strict=True):
        if mode == EQUALS and not all(type(v) is str for v in by_v):
            mode = _NUMBERS
        table = _value_table(mode if mode != _NUMBERS else EQUALS, by_v, rows, set(), None)
        out.append((compile_expr(read_expr(root, path, steps)), mode, table))
    return tuple(out)


def _guard_reads(guards: list[Any]) -> tuple[tuple[Any, int], ...]:
    """A ``GUARDED`` key's guards: per earlier term, ``(its read compiled, its mode)``."""
    return tuple(
        (compile_expr(read_expr(root, path, steps)), mode) for mode, root, path, steps in guards
    )


def _decided(v: Any, tv: type, mode: int) -> bool:
    """Can a key term of ``mode`` not err on the value ``v`` it reads? (Equality: a
    string, a boolean, null or a finite number (strings never err, numbers only when
    not finite); membership: a list of strings; an affix: a string; a bound: a finite
    number.)"""
    if mode == HOLDS:
        return _strings_of(v, tv) is not None
    if mode >= _PREFIX:
        if mode <= _SUFFIX:
            return tv is str
        return tv is int or (tv is float and v - v == 0)
    return tv is str or tv is bool or v is None or tv is int or (tv is float and v - v == 0)


def _by_reads(env: Env, keyed: Any) -> tuple[Any, ...] | None:
    """The rows an ``_ANY_OF`` or ``GUARDED`` key keeps (``keyed``: its guards, see
    ``_guard_reads``, and ``_any_of_table``): when every guard's read is decided
    (``_decided``), those under a value one of its reads holds (a prefix or suffix of it, a bound it meets), each once; None when
    a read cannot be decided (it fails, a list holding anything but strings, a number
    that is not finite, anything but a string for an affix or but a finite number for
    a bound: every rule is then tested as written), as for a key on one read."""
    guards, reads = keyed
    for guard, gmode in guards:  # a GUARDED key: no earlier term may err
        try:
            g = guard(env)
        except Exception:
            return None
        if not _decided(g, type(g), gmode):
            return None
    found: list[tuple[Any, ...]] = []
    many = False  # a rule may be under several values of one read (an affix, a bound)
    for read, mode, table in reads:
        try:
            v = read(env)
        except Exception:  # unreadable: the key term errs
            return None
        tv = type(v)
        if mode == _HOLDS:
            strs = _strings_of(v, tv)
            if strs is None:
                return None
            got = _held_once(strs, table)
        elif mode >= _AT_MOST:
            kept = _by_order(v, tv, table, mode)
            if kept is None:
                return None
            got, many = kept[0], True
        elif mode >= _PREFIX:
            found_ = _by_affix(v, tv, table, mode)
            if found_ is None:
                return None
            got, many = found_, True
        elif tv is str:
            got = table.get(v, ())
        elif mode == _NUMBERS and tv is not bool and v is not None:
            if not (tv is int or (tv is float and v - v == 0)):
                return None  # NaN, inf, or a foreign number type
            got = table.get(v, ())
        else:
            continue
        if got:
            found.append(got)
    if len(found) < 2 and not many:
        return found[0] if found else ()
    # a rule sits under a value of each of its terms: first seen, kept
    return tuple({id(row): row for rows in found for row in rows}.values())


def _by_order(v: Any, tv: type, table: Any, mode: int) -> tuple[Any, Any] | None:
    """``(rows to test, rules cited)`` an order key keeps for the number read
    (``_value_table``); None when it cannot decide that value (a boolean, a string,
    null, NaN or an infinity: the key term errs, so every rule is tested as written)."""
    if not (tv is int or (tv is float and v - v == 0)):
        return None
    bounds, tested, starts, cited, cited_starts = table
    # REF <= N / REF > N: split before v's bound; REF < N / REF >= N: after it
    k = bisect_left(bounds, v) if mode in (_AT_MOST, _ABOVE) else bisect_right(bounds, v)
    if mode in (_AT_MOST, _BELOW):  # the bounds above the split
        return tested[starts[k] :], cited[cited_starts[k] :]
    return tested[: starts[k]], cited[: cited_starts[k]]  # the bounds below it


def _segment_buckets(
    ids: list[int], rows: list[tuple[Any, ...]]
) -> tuple[int, int, dict[str, list[int]], set[int]] | None:
    """Rules of one group kept by what their pattern fixes past a wildcard: ``(mode,
    position, {text: rules}, the rules kept)``, or None.

    A group's rules share their literal prefix; ``/data/p1/*/v7/**`` has ``*`` right
    after it, so the index cannot tell ``v7`` from ``v8`` and 500 such rules on one
    prefix were matched one by one. What each kind of matcher fixes:

    * ``GENERAL``: its first run of tests sits at fixed positions from the prefix on
      (nothing before it can absorb segments), so a literal L there at position p
      matches only a resource whose segment p is L (and that has more than p
      segments). Past a ``**``, its last run sits at fixed positions from the end: a
      literal L there k segments from the end (``/data/**/v7``) needs segment -k to
      be L (and at least k segments).
    * ``CONTEXT`` (``/home/{context.principal}/p7/**``): its plan's quick literal
      (``columns.plan``: checked before the holes, at a position below its depth).
    * ``AFFIX`` (``/data/*.e7``): the last segment, its depth exactly, must begin with
      the head and end with the tail: a key by the tail (``_SEGMENT_TAIL``) or by the
      head (``_SEGMENT_HEAD``) of segment -1, read through each distinct length.
    * ``GENERAL`` with a literal only between two ``**`` (``/data/**/v7/**``): the
      resource must hold a segment L somewhere (``_SEGMENT_ANY``: each distinct
      segment of the resource looked up once).
    * ``GENERAL`` with no literal where a literal would be keyed, but a glob there
      with a literal head or tail (``/data/p1/v7*/**``, ``/data/p1/**/*.v7``): the
      segment at that fixed position must begin with the head (``_SEGMENT_HEAD``) or
      end with the tail (``_SEGMENT_TAIL``), read through each distinct length.

    ``position`` is p, or -k from the end (unused by ``_SEGMENT_ANY``). A decision
    reads the resource's segment once and tests only the rules kept under what it
    holds (still with their whole matcher and condition). Each rule is kept by one text per key; the key with the most distinct
    texts is used (a fixed position wins a tie: it narrows more), when it keeps at
    least ``BUCKET_MIN`` rules under two texts or more.
    """
    if len(ids) < BUCKET_MIN:
        return None
    by_key: dict[tuple[int, int], dict[str, list[int]]] = {}

    def keep(mode: int, position: int, text: Any, i: int) -> None:
        if type(text) is str:
            by_key.setdefault((mode, position), {}).setdefault(text, []).append(i)

    def keep_glob(run: tuple[Any, ...], position: int, i: int) -> None:
        """The first glob of ``run`` with a literal head (else tail), at ``position`` + j."""
        for j, t in enumerate(run):
            if t[0] == GLOB_TEST and (t[1] or t[3]):
                where = position + j
                if t[1]:
                    keep(_SEGMENT_HEAD, where, t[1], i)
                else:
                    keep(_SEGMENT_TAIL, where, t[3], i)
                return

    for i in ids:
        row = rows[i]
        kind = row[1]
        if kind == 2:  # AFFIX: (.., depth, head, tail, ..)
            keep(_SEGMENT_TAIL, -1, row[4], i)
            keep(_SEGMENT_HEAD, -1, row[3], i)
            continue
        prog = row[10]  # _ALWAYS, _NEVER and _NO_PLAN are 1-tuples: the lengths below skip them
        if type(prog) is not tuple:
            continue
        if kind == 3 and len(prog) == 3 and type(prog[0]) is tuple:  # GENERAL
            first, middles, last = prog
            found = next((j for j, t in enumerate(first) if t[0] == LIT_TEST), None)
            if found is not None:
                keep(_SEGMENT, row[2] + found, first[found][1], i)
            elif middles is not None and type(last) is tuple:
                found = next((j for j, t in enumerate(last) if t[0] == LIT_TEST), None)
                if found is not None:
                    keep(_SEGMENT, found - len(last), last[found][1], i)
                else:  # a literal between two ``**``: somewhere in the resource
                    text = next((t[1] for run in middles for t in run if t[0] == LIT_TEST), None)
                    if text is not None:
                        keep(_SEGMENT_ANY, 0, text, i)
                    else:  # a glob's head or tail fixed from the end (``**/*.v7``)
                        keep_glob(first, row[2], i)
                        keep_glob(last, -len(last), i)
            else:
                keep_glob(first, row[2], i)
        elif kind == 4 and len(prog) == 5 and type(prog[3]) is int and prog[3] >= 0:
            keep(_SEGMENT, prog[3], prog[4], i)  # CONTEXT: (.., qpos, qtext)
    if not by_key:
        return None
    (mode, position), by_text = max(
        by_key.items(),
        key=lambda item: (
            len(item[1]),
            sum(map(len, item[1].values())),
            item[0][0] != _SEGMENT_ANY,
            item[0],
        ),
    )
    kept = {i for found in by_text.values() for i in found}
    if len(kept) < BUCKET_MIN or len(by_text) < 2:
        return None
    return mode, position, by_text, kept


#: what the packed text of a condition holding a key term must contain (one of)
_KEY_MARKS = (
    '"=="',
    '"in"',
    '"<"',
    '"<="',
    '">"',
    '">="',
    '"startswith"',
    '"endswith"',
    '"any_in"',
)


class _ValueKeys:
    """Which rules of a group can be kept by a value (``prefilter.value_buckets``), from
    the program's packed conditions; each distinct condition is decoded once, and only
    for groups large enough to be bucketed (the load stays linear and small)."""

    __slots__ = ("_conds", "_effects", "_kinds", "_memo", "_seen", "whole")

    def __init__(self, table: RuleTable) -> None:
        columns = table.columns
        self._conds = columns["cond"]
        self._kinds = columns["ckind"]
        self._effects = columns["effect"]
        self._memo = table.memo  # the load compiled these conditions: decoded already
        self._seen: dict[tuple[Any, Any, Any], tuple[list[Any], bool]] = {}
        #: the rules whose whole condition is one key term (``when REF <= 10``)
        self.whole: set[int] = set()

    def buckets(self, rules: list[int]) -> Any:
        """``((mode, root, path), {value: rules}, the rules kept by value)``, or None."""
        if len(rules) < BUCKET_MIN:
            return None
        conds, kinds, effects, seen = self._conds, self._kinds, self._effects, self._seen
        keys: dict[int, list[Any]] = {}
        for i in rules:
            packed = conds[i]
            # only a comparison or an affix test can be a key term: most conditions are
            # decoded never
            if type(packed) is not str or not any(mark in packed for mark in _KEY_MARKS):
                continue
            sig = (packed, kinds[i], effects[i])
            known = seen.get(sig)
            if known is None:
                try:
                    enc = decode_packed(packed, self._memo)
                    kind = CONDITION_KINDS[kinds[i]]
                    found = value_keys(enc, kind, effects[i] == 1)
                    known = (found, kind == "when" and len(found) == 1 and enc[0] != "and")
                except Exception:  # a corrupt condition: no key, evaluated as written
                    known = ([], False)
                seen[sig] = known
            found, whole = known
            if found:
                keys[i] = found
                if whole:
                    self.whole.add(i)
        if len(keys) < BUCKET_MIN:
            return None
        return value_buckets(rules, keys)


class ContextEntry:
    """What one context has cached.

    ``verdicts[rule.index]`` is a context-only condition's verdict (None until one
    is cached, then absent until evaluated: sized by what the context met, not
    by the policy); ``held`` the roles held (``columns.held_roles``; ``_UNSET``
    until a decision needs them); ``values`` the interpolated values by context
    path (None until needed); ``matchers`` maps a ``CONTEXT`` rule's index to its
    resolved matcher (None: it matches nothing for this context), for patterns
    without a plan; ``memo`` is the partial evaluator's. Each map is made when
    first written: most contexts need none of them, and a first-seen context
    then costs one object, not four (objects the first decisions leave behind
    are what the garbage collector's pauses, tens of microseconds each, scale
    with).
    """

    __slots__ = ("_matchers", "_memo", "held", "values", "verdicts")

    def __init__(self) -> None:
        self.verdicts: dict[int, bool] | None = None
        self.held: Any = _UNSET
        self.values: dict[Any, Any] | None = None
        self._matchers: dict[int, Matcher | None] | None = None
        self._memo: dict[Any, Any] | None = None

    @property
    def matchers(self) -> dict[int, Matcher | None]:
        """The resolved matchers of ``CONTEXT`` rules by rule index (made on first use)."""
        found = self._matchers
        if found is None:
            found = self._matchers = {}
        return found

    @property
    def memo(self) -> dict[Any, Any]:
        """The partial evaluator's memo for this context (made on first use)."""
        found = self._memo
        if found is None:
            found = self._memo = {}
        return found


class Evaluator:
    """Decides calls against a compiled program (built by ``PolicySet``).

    Raise ``MalformedProgram`` when the program is not what the compiler
    writes: it is checked here, once, so that a decision never meets a
    malformed structure.
    """

    def __init__(self, program: Mapping[str, Any]) -> None:
        # Thousands of tuples, dicts and closures and no cycle: built with the collector
        # paused (an automatic collection would walk the whole young program again and
        # again), then everything promoted in one pass (see the end of ``_build``).
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._build(program)
        finally:
            if was_enabled:
                gc.enable()
        # Everything built (and a bundle's program, parsed with the collector paused)
        # is in the young generations: promote it now, in one pass at load, instead
        # of in collections the first decisions' allocations would trigger (at
        # 10,000 rules, 30-100 ms on one early decision).
        gc.collect(1)

    def _build(self, program: Mapping[str, Any]) -> None:
        self._table = RuleTable(program.get("rules"))
        n_rules = self._table.n
        groups = program.get("groups")
        validate_groups(groups, n_rules)
        self._raw_groups: list[list[int]] = groups  # type: ignore[assignment]
        # decoded groups (for listing and explanations): a tuple of records, or None
        # until first use; a decision reads the raw groups and the rule columns
        self._groups: list[tuple[RuleRecord, ...] | None] = [None] * len(groups)  # type: ignore[arg-type]
        self._records: list[RuleRecord | None] = [None] * n_rules
        index = program.get("index")
        if type(index) is not dict or not all(type(a) is dict for a in index.values()):
            raise MalformedProgram("index is not a mapping of namespaces to actions")
        # One empty children dict for every leaf, one list per distinct group
        # list: no decision fills either (a walk is read-only once built).
        leaf: dict[str, Any] = {}
        shared: dict[tuple[int, ...], list[int]] = {}
        for actions in index.values():
            for walks in actions.values():
                if type(walks) is not list or len(walks) != 2:
                    raise MalformedProgram("an index entry is not [absolute walk, relative walk]")
                for walk in walks:
                    validate_walk(walk, len(self._groups), leaf, shared)
        self._index: Mapping[str, Mapping[str, list[Node]]] = index
        # What a decision reads of each rule, column by column (``columns``), and the
        # rules of each group by the role they need (``prefilter``).
        buckets = program.get("buckets")
        validate_buckets(buckets, self._raw_groups)
        c = self._table.columns
        rkey, rform, trusted = checked_prefilter(c, buckets)  # type: ignore[arg-type]
        self._cols = RuleColumns(self._table)
        self._compile_matchers_and_conditions(rform)
        cols = self._cols
        # What a decision reads of rule i, as one tuple (one object to reach, not one
        # list per column: at thousands of rules each column is a cache miss):
        # (i, match kind, depth, head, tail, has a condition, role form, role key,
        # context-only, compiled condition or None, general matcher or context plan
        # or None). A role form's condition is compiled on first use (in ``cols``).
        rows: list[tuple[Any, ...]] = list(
            zip(
                range(n_rules),
                c["mkind"],
                c["mdepth"],
                c["mhead"],
                c["mtail"],
                [x is not None for x in c["cond"]],
                rform,
                rkey,
                c["ctx"],
                cols.applies,
                [
                    plan if kind == 4 else prog
                    for kind, plan, prog in zip(c["mkind"], cols.plans, cols.progs, strict=True)
                ],
                strict=True,
            )
        )
        # Each group as a decision reads it: a tuple of rows for a group read whole,
        # or ``[plain rows, {role: rows}, copies, every row, by value, sure]`` for
        # one bucketed by role or by value, or holding rules the walk decides alone
        # (copies: the twins of a rule, or None; every row: for a context whose
        # roles are not a list, or a value key that cannot be read; by value:
        # ``(read, {value: rows}, mode)`` or None, see ``prefilter.value_buckets``;
        # sure: see ``_split_sure``, or None); the walks hold these entries directly.
        twins = twin_maps(trusted)
        keyed = _ValueKeys(self._table)
        entries: list[Any] = []
        for gid, (group, entry) in enumerate(zip(self._raw_groups, trusted, strict=True)):
            plain: list[int] = group if entry == 0 else entry[0]
            by_role: dict[str, list[int]] = {} if entry == 0 else entry[1]
            # Candidates for value keys: the plain rules, and the rules of a role bucket
            # too large to narrow much on its own (``"staff" in context.roles and
            # context.tenant == "t3"`` on every rule of a group: the tenant narrows it).
            candidates = plain + [
                i for ids in by_role.values() if len(ids) >= BUCKET_MIN for i in ids
            ]
            by_value = keyed.buckets(candidates)
            # (read, table, mode): the read a function of the call; for a segment key the
            # segment's position instead (``_segment_buckets``)
            value_entry: tuple[Any, Any, int, Any] | None = None
            taken: set[int] = set()
            if by_value is not None and by_value[0][0] == ANY_OF:
                (mode, _root, _path, reads), values, taken = by_value
                value_entry = (None, ((), _any_of_table(reads, values, rows)), _ANY_OF, None)
            elif by_value is not None and by_value[0][0] == GUARDED:
                # a forbid's later key term: the one read, behind its guards' reads
                (mode, _root, _path, (read, *guards)), values, taken = by_value
                one = _any_of_table((read,), {(0, v): ids for v, ids in values.items()}, rows)
                value_entry = (None, (_guard_reads(guards), one), _ANY_OF, None)
            elif by_value is not None:
                (mode, root, path, steps), values, taken = by_value
                if mode == EQUALS and not all(type(v) is str for v in values):
                    mode = _NUMBERS  # read a number too (strings only: nothing else matches)
                elif mode == _HOLDS and sum(map(len, values.values())) > len(taken):
                    mode = _HOLDS_ANY  # a rule under several values: a call may hold two
                value_entry = (
                    compile_expr(read_expr(root, path, steps)),
                    _value_table(
                        mode, values, rows, keyed.whole, None if entry == 0 else twins[gid]
                    ),
                    mode,
                    # a membership key's strings are kept per context when it reads
                    # the context alone (``now`` is no part of the context's key)
                    (_STRINGS, path)
                    if mode in (_HOLDS, _HOLDS_ANY)
                    and root == "context"
                    and not steps
                    and path[:1] != ("now",)
                    else None,
                )
            else:
                by_segment = _segment_buckets(candidates, rows)
                if by_segment is not None:
                    mode, position, by_text, taken = by_segment
                    table: Any = {
                        text: tuple(rows[i] for i in ids) for text, ids in by_text.items()
                    }
                    if mode in (_SEGMENT_HEAD, _SEGMENT_TAIL):
                        table = _affix_table(table)  # a segment's head or tail, by each length
                    value_entry = (position, table, mode, None)
            rest, roles_kept = plain, by_role
            if value_entry is not None:
                rest = [i for i in plain if i not in taken]
                roles_kept = {}
                for r, ids in by_role.items():
                    kept = [i for i in ids if i not in taken]
                    if kept:
                        roles_kept[r] = kept
            group_twins = None if entry == 0 else twins[gid]
            sure, rest, roles_kept = _split_sure(rest, roles_kept, rows, group_twins)
            if entry == 0 and value_entry is None and sure is None:
                entries.append(tuple(rows[i] for i in group))
                continue
            entries.append(
                [
                    tuple(rows[i] for i in rest),
                    {r: tuple(rows[i] for i in ids) for r, ids in roles_kept.items()},
                    group_twins,
                    tuple(rows[i] for i in plain)
                    + tuple(rows[i] for ids in by_role.values() for i in ids),
                    value_entry,
                    sure,
                ]
            )
        # Copies of a rule apply together, so a decision citing one cites them all
        # (dozens in a generated policy): the tuple of their references, and the
        # ids a detail lists, are made now, once per family of copies, and shared
        # by every decision citing exactly that family (``decide`` cites in program
        # order, which is how the family is keyed).
        self._cited: dict[tuple[int, ...], tuple[tuple[RuleRef, ...], str]] = {}
        for tw in twins:
            if tw is not None:
                for rep, copies in tw.items():
                    members = sorted((rep, *copies))
                    key = tuple(members)
                    if key not in self._cited:
                        self._cited[key] = cols.cite(members)
        # One decision trie per (namespace, resource kind), every action's groups in
        # its slots (``index.merged_walk``): (trie, slot) per (namespace, action, kind).
        memo: dict[int, Any] = {}
        self._decision_walks: dict[tuple[str, str, bool], tuple[tuple[Any, ...], int]] = {}
        for ns, actions in index.items():
            names = list(actions)
            for kind, absolute in ((0, True), (1, False)):
                trie = merged_walk([actions[a][kind] for a in names], entries, leaf, memo)
                for k, action in enumerate(names):
                    self._decision_walks[(ns, action, absolute)] = (trie, 1 + 2 * k)
        # bounded, oldest first out (see context_entry); reads take no lock
        self._contexts: dict[str, ContextEntry] = {}
        # contexts seen once, not cached yet (see context_entry): str keys and None
        # values, so the dict is no object the garbage collector looks at
        self._seen_once: dict[str, None] = {}
        self._decisions: dict[tuple[Any, ...], Decision] = {}
        self._n_decided = 0  # decisions kept (here and by the tools), see ``_decision``
        # context_key excludes the turn id; a policy reading it is never cached
        self._cacheable = not program.get("reads_turn_id", True)
        self._lock = threading.Lock()
        self._tools: dict[str, ToolPlan] = {}
        self._walk_rules: dict[
            tuple[str, str, bool], tuple[tuple[RuleRecord, ...], tuple[RuleRecord, ...]]
        ] = {}
        self._raw_tool_policies: Mapping[str, Any] = program["tool_policies"]
        self._tool_policies: Mapping[str, ToolPolicy] | None = None
        self._reqs: Mapping[str, Any] = program["requirements"]
        self.requirements: Mapping[str, Requirement] = {
            tool: Requirement(
                tool,
                req["ns"],
                req["action"],
                req["resource_text"],
                SourceSpan(req["file"], req["line"], req["col"]),
            )
            for tool, req in self._reqs.items()
        }
        # Approval rules (sharedos.policy.approvals): read only after an allow, and
        # only by a policy that has them; without them ``decide`` is untouched.
        self.approvals: ApprovalRules | None = None
        section = program.get("approvals")
        if section is not None:
            from sharedos.policy.approvals import ApprovalRules

            self.approvals = ApprovalRules(section)
            self.decide = self._decide_with_approvals  # type: ignore[method-assign]
        # Resolvers are built now (cheap, one per tool), so a malformed
        # requirement fails the load, never a decision.
        self._resolvers: dict[str, tuple[Resolver, bool, Shape, str | None]] = {}
        for tool, req in self._reqs.items():
            renc = req["resource"]
            is_path = renc["kind"] == "path"
            arg = tuple(renc["arg"]) if is_path else ()
            if is_path and not (arg and all(type(a) is str for a in arg)):
                raise MalformedProgram(f"the resource of {tool} is malformed")
            self._resolvers[tool] = (
                path_resolver(arg) if is_path else template_resolver(renc),
                is_path or bool(renc["abs"]),
                resource_shape(renc),
                arg[0] if is_path and len(arg) == 1 else None,
            )

    def _compile_matchers_and_conditions(self, rform: list[int]) -> None:
        """Compile, at load, what a decision would otherwise build the first time it
        meets a rule: every condition it evaluates as written (a role form is one set
        lookup and needs none, unless a context's roles are not a list), every
        general matcher and every context plan.

        Rules with the same condition share one closure (the table's memo), so this
        is one compile per distinct condition: a few ms for 10,000 role-gated rules,
        about 0.1 s when every rule has a condition of its own. Done here, the
        first decision of each request costs what every later one does (less the
        decision it builds once); ``prepare`` adds the rule records explanations
        read. (Called by ``_build``, with the collector paused.)"""
        cols = self._cols
        c = self._table.columns
        applies, conds = cols.applies, c["cond"]
        for i, cond in enumerate(conds):
            if cond is not None and not rform[i] and applies[i] is None:
                cols.compile(i)
        for i, kind in enumerate(c["mkind"]):
            if kind == 3:
                cols.prog(i)
            elif kind == 4:
                cols.plan(i)

    # ------------------------------------------------------------ the program

    @property
    def tool_policies(self) -> Mapping[str, ToolPolicy]:
        """The compiled toolpolicies by name (validated ``ToolPolicy`` objects, built on first use)."""
        policies = self._tool_policies
        if policies is None:
            from sharedos.toolpolicy import ToolPolicy

            policies = self._tool_policies = {
                name: ToolPolicy(**fields) for name, fields in self._raw_tool_policies.items()
            }
        return policies

    @property
    def rule_count(self) -> int:
        """How many rules the program has."""
        return self._table.n

    def rule(self, index: int) -> RuleRecord:
        """Rule record ``index``, decoded on first use.

        The program itself is never modified, so ``bundle_hash`` does not
        depend on which rules have been used.
        """
        record = self._records[index]
        if record is None:
            record = self._records[index] = self._table.record(index, self._cols.refs[index])
        return record

    def group(self, gid: int) -> tuple[RuleRecord, ...]:
        """The rules of group ``gid``, in program order (decoded on first use)."""
        rules = self._groups[gid]
        if rules is None:
            rules = self._groups[gid] = tuple(
                self._records[i] or self.rule(i) for i in self._raw_groups[gid]
            )
        return rules

    def node_rules(self, node: Node, forbid: bool) -> tuple[RuleRecord, ...]:
        """The forbids (or permits) a resource reaching ``node`` can meet, root first."""
        gids = node[1 if forbid else 2]
        return tuple(r for gid in gids for r in self.group(gid)) if gids else ()

    def _all_rules(self, walk: Node) -> tuple[tuple[RuleRecord, ...], tuple[RuleRecord, ...]]:
        forbids, permits = walk_groups(walk)

        def rules(gids: set[int]) -> tuple[RuleRecord, ...]:
            found = {r.index: r for gid in gids for r in self.group(gid)}
            return tuple(found[i] for i in sorted(found))

        return rules(forbids), rules(permits)

    def tool(self, tool: object) -> ToolPlan | None:
        """The plan of ``tool``'s requirement, built on first use (None: no requirement)."""
        t = self._tools.get(tool) if type(tool) is str else None
        if t is not None or type(tool) is not str:
            return t
        parts = self._resolvers.get(tool)
        if parts is None:
            return None
        resolver, absolute, shape, path_arg = parts
        req = self._reqs[tool]
        ns, action = req["ns"], req["action"]
        walks = self._index.get(ns, {}).get(action)
        walk = walks[0 if absolute else 1] if walks is not None else empty_walk()
        dwalk, slot = self._decision_walks.get((ns, action, absolute), (({}, (), ()), 1))
        key = (ns, action, absolute)

        def rules() -> tuple[tuple[RuleRecord, ...], tuple[RuleRecord, ...]]:
            found = self._walk_rules.get(key)
            if found is None:
                found = self._walk_rules[key] = self._all_rules(walk)
            return found

        t = ToolPlan(
            tool,
            ns,
            action,
            resolver,
            absolute,
            shape,
            self.requirements[tool],
            walk,
            path_arg,
            rules,
            dwalk,
            slot,
        )
        self._tools[tool] = t
        return t

    # ---------------------------------------------------------- context cache

    def context_entry(self, key: str) -> ContextEntry | None:
        """The cache of one context: None the first time the context is seen, made the
        second time (at most ``CONTEXT_CACHE_SIZE`` contexts are kept, the oldest dropped
        first).

        Why not on first use: a context seen once (most are, in a host that serves many
        people) would leave behind an entry, its maps and its roles' set, and what first
        decisions leave behind is what the garbage collector's pauses (tens of
        microseconds each) come from. A context seen once is remembered by its key
        alone, which the collector never looks at."""
        entry = self._contexts.get(key)  # a dict read needs no lock
        if entry is not None:
            return entry
        with self._lock:
            contexts = self._contexts
            entry = contexts.get(key)
            if entry is None:
                seen = self._seen_once
                if seen.pop(key, _MISSING) is _MISSING:
                    if len(seen) >= CONTEXT_SEEN_SIZE:
                        seen.clear()
                    seen[key] = None
                    return None
                entry = ContextEntry()
                if len(contexts) >= CONTEXT_CACHE_SIZE:
                    del contexts[next(iter(contexts))]
                contexts[key] = entry
        return entry

    def cache_for(self, context_key: object) -> ContextEntry | None:
        """The context cache for ``context_key``; None when it cannot be cached."""
        if type(context_key) is str and self._cacheable:
            return self._contexts.get(context_key) or self.context_entry(context_key)
        return None

    @staticmethod
    def context_holds(rule: RuleRecord, env: Env, cache: ContextEntry | None) -> bool:
        """A context-only rule's verdict for this context (cached when there is a cache)."""
        applies = rule.applies
        if applies is None:
            return True
        if cache is None:
            return bool(applies(env))
        verdicts = cache.verdicts
        if verdicts is None:
            verdicts = cache.verdicts = {}
        ok = verdicts.get(rule.index)
        if ok is None:
            ok = verdicts[rule.index] = bool(applies(env))
        return ok

    @staticmethod
    def context_matcher(
        rule: RuleRecord, context: Any, cache: ContextEntry | None
    ) -> Matcher | None:
        """A ``CONTEXT`` rule's matcher for this context (cached when there is a cache)."""
        if cache is None:
            return rule.context_matcher(context)
        m = cache.matchers.get(rule.index, _MISSING)
        if m is _MISSING:
            m = cache.matchers[rule.index] = rule.context_matcher(context)
        return m  # type: ignore[no-any-return]

    # ----------------------------------------------------------------- decide

    def decide(
        self,
        tool: str,
        args: Mapping[str, Any],
        context: Mapping[str, Any],
        *,
        context_key: str | None = None,
    ) -> Decision:
        """Decide one call. Never raises: bad input is a deny with a reason code.

        Forbid overrides permit; default deny. ``context_key`` (e.g.
        ``AccessContext.cache_key``) must identify ``context``: context-only
        conditions, the roles held and interpolated values are cached under it.
        """
        t = self._tools.get(tool) if type(tool) is str else None
        if t is None:
            t = self.tool(tool)
            if t is None:
                return self._unavailable(tool)
        # The common resource, path(args.x) already canonical, inline: the same
        # tests canonical_path starts with (anything else takes its careful path).
        name = t.path_arg
        value = args.get(name) if name is not None and type(args) is dict else None
        if (
            type(value) is str
            and value[:1] == "/"
            and value.isprintable()
            and "//" not in value
            and "/." not in value
            and (value[-1] != "/" or len(value) == 1)
            and len(value) <= MAX_PATH_CHARS
            and (value.isascii() or _is_normalized("NFC", value))
        ):
            resource = value
            segs = value[1:].split("/") if len(value) > 1 else []
        else:
            try:
                resource, segs = t.resolve(args)
            except Unresolvable as exc:
                return self._unresolvable(t, str(exc))
            except Exception as exc:  # hostile args object: fail closed, never raise
                return self._unresolvable(t, type(exc).__name__)
        # Descend to the deepest walk node along the resource: its groups hold
        # every rule whose literal prefix the resource starts with.
        node = t.decision_walk
        for seg in segs:
            child = node[0].get(seg)
            if child is None:
                break
            node = child
        slot = t.walk_slot
        forbids = node[slot]
        permits = node[slot + 1]
        if not forbids and not permits:  # no rule can apply: default deny
            per = t.decided.get(-1)
            if per is not None:
                found = per.get(resource)
                if found is not None:
                    return found
            return self._decision(t, resource, False, None)
        cache: ContextEntry | None = None
        if type(context_key) is str and self._cacheable:
            cache = self._contexts.get(context_key)
            if cache is None:
                cache = self.context_entry(context_key)
        if cache is not None:
            verdicts = cache.verdicts
            held = cache.held
            values = cache.values
        else:  # no key, or a context seen for the first time: evaluate, do not cache
            verdicts = None
            held = _UNSET
            values = None
        n = len(segs)
        env: Env | None = None
        hits: list[int] | None = None
        strs_of: Any = _MISSING  # the last list a membership key read, and its strings
        strs_set: frozenset[str] | None = None
        # Forbids first: one that applies denies, whatever the permits say.
        forbid = True
        for groups in (forbids, permits):
            if groups:
                for rules in groups:
                    if type(rules) is tuple:  # the group's rows, read whole
                        tw = None
                    else:  # [plain rows, {role: rows}, copies, every row, by value, sure]
                        bk = rules
                        tw = bk[2]
                        rules = bk[0]
                        by_role = bk[1]
                        sure = bk[5]
                        if by_role or sure is not None:
                            # the rules of the roles the caller holds, not all of them
                            if held is _UNSET:
                                held = held_roles(context)
                                if cache is not None:
                                    cache.held = held
                            if held is None:
                                rules = bk[3]
                            elif not by_role:
                                pass
                            elif len(held) <= len(by_role):
                                for r in held:
                                    got = by_role.get(r)
                                    if got is not None:
                                        rules += got
                            else:
                                for r, got in by_role.items():
                                    if r in held:
                                        rules += got
                        by_value = bk[4]
                        if by_value is None or rules is bk[3]:
                            pass
                        elif by_value[2] == _ANY_OF:
                            # the rules of a value any read of an ``or`` holds
                            if env is None:
                                env = (context, args, resource, t.action)
                            got = _by_reads(env, by_value[1])
                            if got is None:
                                rules = bk[3]
                            elif got:
                                rules += got
                        elif by_value[2] >= _SEGMENT:
                            # the rules whose pattern fixes the resource's segment there
                            # as it is (``_segment_buckets``); none when it is too short
                            mode = by_value[2]
                            if mode == _SEGMENT:
                                p = by_value[0]
                                if n > p if p >= 0 else n >= -p:
                                    got = by_value[1].get(segs[p])
                                    if got is not None:
                                        rules += got
                            elif mode == _SEGMENT_ANY:
                                table = by_value[1]
                                for text in set(segs) if n > 1 else segs:
                                    got = table.get(text)
                                    if got is not None:
                                        rules += got
                            else:  # the head or tail of the segment there
                                p = by_value[0]
                                if n > p if p >= 0 else n >= -p:
                                    got = _by_affix(
                                        segs[p],
                                        str,
                                        by_value[1],
                                        _PREFIX if mode == _SEGMENT_HEAD else _SUFFIX,
                                    )
                                    if got:
                                        rules += got
                        else:
                            # the rules of the value(s) the call holds; anything the
                            # keys' reasoning does not cover: every rule, as written
                            # (prefilter, "Why a value key is exact")
                            if env is None:
                                env = (context, args, resource, t.action)
                            try:
                                v = by_value[0](env)
                            except Exception:  # unreadable: the key term errs
                                rules = bk[3]
                            else:
                                tv = type(v)
                                table = by_value[1]
                                mode = by_value[2]
                                if mode >= _AT_MOST:
                                    kept = _by_order(v, tv, table, mode)
                                    if kept is None:  # not a value the key decides
                                        rules = bk[3]
                                    else:
                                        rules += kept[0]
                                        if kept[1]:  # applies by the key alone
                                            if hits is None:
                                                hits = list(kept[1])
                                            else:
                                                hits.extend(kept[1])
                                elif mode >= _PREFIX:
                                    got = _by_affix(v, tv, table, mode)
                                    if got is None:
                                        rules = bk[3]
                                    elif got:
                                        rules += got
                                elif mode in (_HOLDS, _HOLDS_ANY):
                                    # the strings read, as a set: made once per list
                                    # (a decision meets the same context.roles in
                                    # every group on its walk), and kept with the
                                    # context when the read is of the context alone
                                    if v is strs_of:
                                        strs = strs_set
                                    else:
                                        mk = by_value[3]
                                        if mk is not None and values is not None:
                                            strs = values.get(mk, _MISSING)
                                        else:
                                            strs = _MISSING
                                        if strs is _MISSING:
                                            strs = _strings_of(v, tv)
                                            if mk is not None and cache is not None:
                                                if values is None:
                                                    values = cache.values = {}
                                                values[mk] = strs
                                        strs_of, strs_set = v, strs
                                    if strs is None:
                                        rules = bk[3]
                                    else:
                                        rules += _held_once(strs, table)
                                elif tv is str:
                                    got = table.get(v)
                                    if got is not None:
                                        rules += got
                                elif mode == _NUMBERS and tv is not bool and v is not None:
                                    if tv is int or (tv is float and v - v == 0):
                                        got = table.get(v)
                                        if got is not None:
                                            rules += got
                                    else:  # NaN, inf, or a foreign number type
                                        rules = bk[3]
                        if sure is not None and rules is not bk[3]:
                            # rules that apply by the walk and the roles held alone,
                            # cited in bulk (their copies with them)
                            always, unless, unless_all, by_held, applying = sure
                            got = always
                            if unless_all:
                                # the unless-role rules apply but those whose role is held:
                                # one answer per set of those roles held, kept (a deep path
                                # meets the same few guard roles at every level)
                                guards = held.intersection(unless)
                                if not guards:
                                    got = got + unless_all
                                else:
                                    kept = applying.get(guards)
                                    if kept is None:
                                        out = {i for r in guards for i in unless[r]}
                                        kept = tuple(filterfalse(out.__contains__, unless_all))
                                        if len(applying) < UNLESS_MEMO:
                                            applying[guards] = kept
                                    got = got + kept
                            if by_held:
                                if len(held) <= len(by_held):
                                    for r in held:
                                        ids = by_held.get(r)
                                        if ids is not None:
                                            got = got + ids
                                else:
                                    for r, ids in by_held.items():
                                        if r in held:
                                            got = got + ids
                            if got:
                                if hits is None:
                                    hits = list(got)
                                else:
                                    hits.extend(got)
                    for row in rules:
                        i = row[0]
                        mk = row[1]
                        if mk:  # ANY (0): '**' after the prefix, nothing to check
                            if mk == 1:  # DEPTH
                                if n != row[2]:
                                    continue
                            elif mk == 2:  # AFFIX
                                if n != row[2] or not n:
                                    continue
                                last = segs[-1]
                                head = row[3]
                                tail = row[4]
                                if (
                                    len(last) < len(head) + len(tail)
                                    or not last.startswith(head)
                                    or not last.endswith(tail)
                                ):
                                    continue
                            elif mk == 3:  # GENERAL
                                prog = row[10]  # built at load
                                if prog is _NEVER or (
                                    prog is not _ALWAYS and not match_general(prog, segs, row[2])
                                ):
                                    continue
                            else:  # CONTEXT: the pattern interpolates the context
                                plan = row[10]  # built at load
                                if plan is not _NO_PLAN:
                                    any_tail, depth, checks, qpos, qtext = plan
                                    if n < depth if any_tail else n != depth:
                                        continue
                                    if qpos >= 0 and segs[qpos] != qtext:
                                        continue  # qpos < depth <= n
                                    ok = True
                                    for pos, kind, val in checks:
                                        s = segs[pos]
                                        if kind == 0:  # a literal
                                            if s != val:
                                                ok = False
                                                break
                                        elif kind == 2:  # {context.x}, the whole segment
                                            if values is None:
                                                values = {}
                                                if cache is not None:
                                                    cache.values = values
                                            v = values.get(val, _MISSING)
                                            if v is _MISSING:
                                                v = values[val] = hole_value(context, val)
                                            if v is None:  # unsafe: a forbid's matches
                                                if not forbid:  # any segment, a
                                                    ok = False  # permit's none
                                                    break
                                            elif s != v:
                                                ok = False
                                                break
                                        elif kind == 1:  # '*'
                                            if not s:
                                                ok = False
                                                break
                                        elif kind == 4:  # text, '*' and holes
                                            if values is None:
                                                values = {}
                                                if cache is not None:
                                                    cache.values = values
                                            g = values.get(val, _MISSING)
                                            if g is _MISSING:
                                                g = values[val] = glob_texts(context, val)
                                            if g is None:  # unsafe: as a hole's
                                                if not forbid or not s:
                                                    ok = False
                                                    break
                                            elif not glob_ok(g, s):
                                                ok = False
                                                break
                                        elif (  # a last 'head*tail'
                                            len(s) < len(val[0]) + len(val[1])
                                            or not s.startswith(val[0])
                                            or not s.endswith(val[1])
                                        ):
                                            ok = False
                                            break
                                    if not ok:
                                        continue
                                else:
                                    m = self.context_matcher(self.rule(i), context, cache)
                                    if m is None or not m.matches(segs):
                                        continue
                        if row[5]:  # a condition
                            rf = row[6]
                            if rf and held is _UNSET:
                                held = held_roles(context)
                                if cache is not None:
                                    cache.held = held
                            if rf == 1 and held is not None:
                                if row[7] not in held:
                                    continue
                            elif rf == 2 and held is not None:
                                if row[7] in held:
                                    continue
                            else:
                                applies = row[9]
                                if applies is None:  # a role form, roles not a list
                                    cols = self._cols
                                    applies = cols.applies[i] or cols.compile(i)
                                if env is None:
                                    env = (context, args, resource, t.action)
                                if row[8] and cache is not None:  # context-only: kept
                                    if verdicts is None:
                                        verdicts = cache.verdicts = {}
                                    ok_ = verdicts.get(i)
                                    if ok_ is None:
                                        ok_ = verdicts[i] = applies(env)
                                    if not ok_:
                                        continue
                                elif not applies(env):
                                    continue
                        if hits is None:
                            hits = [i]
                        else:
                            hits.append(i)
                        if tw is not None:
                            copies = tw.get(i)
                            if copies is not None:  # they apply with it
                                hits.extend(copies)
            if hits is not None:
                break
            forbid = False
        # Decisions are immutable values, so identical ones are shared: building
        # a frozen dataclass costs more than the whole walk. Most cite one rule
        # (or none): those are kept by the tool, by that rule, by resource (two
        # dict reads, no key to build). Those citing several rules are kept the
        # same way by the first rule cited (``decided_multi``), checked against
        # the rules cited (another caller may cite others after that first one);
        # one that does not fit there is kept by a tuple key.
        if hits is None or len(hits) == 1:
            per = t.decided.get(-1 if hits is None else hits[0])
            if per is not None:
                found = per.get(resource)
                if found is not None:
                    return found
            return self._decision(t, resource, forbid, hits)
        hits.sort()  # program order, however the buckets were visited
        per = t.decided_multi.get(hits[0])
        if per is not None:
            found = per.get(resource)
            if found is not None:
                if found.rule_ids == tuple(map(self._cols.refs.__getitem__, hits)):
                    return found  # (the same references: compared by identity)
                cached = self._decisions.get((tool, resource, *hits))
                if cached is not None:
                    return cached
        return self._decision(t, resource, forbid, hits)

    def _decide_with_approvals(
        self,
        tool: str,
        args: Mapping[str, Any],
        context: Mapping[str, Any],
        *,
        context_key: str | None = None,
    ) -> Decision:
        """``decide``, then the approval rules of an allowed call (a policy that has them).

        Forbid wins, then default deny, then approval (``approval_required``), then allow.
        """
        decision = Evaluator.decide(self, tool, args, context, context_key=context_key)
        approvals = self.approvals
        if decision.effect is not _ALLOW or approvals is None:
            return decision
        t = self._tools.get(tool)
        if t is None:
            return decision
        return approvals.check(decision, t, args, context)

    def applying_rules(
        self, tool: str, args: Mapping[str, Any], context: Mapping[str, Any]
    ) -> tuple[RuleRecord, ...]:
        """Every rule that applies to this call, forbids and permits alike (for test coverage).

        ``decide`` stops at the forbids when one applies; this also reads the
        permits, through the same index (never the rules that cannot match).
        """
        t = self.tool(tool)
        if t is None:
            return ()
        try:
            resource, segs = t.resolve(args)
        except Exception:
            return ()
        env: Env = (context, args, resource, t.action)
        node = t.walk
        for seg in segs:
            child = node[0].get(seg)
            if child is None:
                break
            node = child
        found = tuple(
            r
            for forbid in (True, False)
            for r in self.node_rules(node, forbid)
            if self.rule_applies(r, segs, env, None)
        )
        if self.approvals is not None:
            found += tuple(self.approvals.applying(t, resource, args, context))
        return found

    def pattern_matches(
        self, rule: RuleRecord, segs: list[str], context: Any, cache: ContextEntry | None = None
    ) -> bool:
        """Does the pattern of ``rule`` (which the index reached) match the resource ``segs``?

        The same test ``decide`` makes inline."""
        mk = rule.match
        n = len(segs)
        if mk is _DEPTH:
            return n == rule.depth
        if mk is _AFFIX:
            last = segs[-1] if segs else ""
            return (
                n == rule.depth
                and len(last) >= rule.least
                and last.startswith(rule.head)
                and last.endswith(rule.tail)
            )
        if mk is _GENERAL:
            return match_general(rule.prog, segs, rule.depth)  # type: ignore[arg-type]
        if mk is MatchKind.CONTEXT:
            m = self.context_matcher(rule, context, cache)
            return m is not None and m.matches(segs)
        return True

    def rule_applies(
        self, rule: RuleRecord, segs: list[str], env: Env, cache: ContextEntry | None
    ) -> bool:
        """Does ``rule`` (which the index reached) apply to the resource ``segs`` in ``env``?"""
        if not self.pattern_matches(rule, segs, env[0], cache):
            return False
        applies = rule.applies
        if applies is None:
            return True
        if rule.context_only and cache is not None:
            return self.context_holds(rule, env, cache)
        return applies(env)

    def _decision(
        self,
        t: ToolPlan,
        resource: str,
        forbid: bool,
        hits: list[int] | None,
    ) -> Decision:
        """Build the decision citing ``hits`` (program order) and keep it for reuse."""
        if hits is None:
            reason: ReasonCode = _NO_PERMIT
            refs: tuple[Any, ...] = ()
            detail = f"no permit allows {t.action} on {resource} (default deny)"
        else:
            reason = _FORBIDDEN if forbid else _ALLOWED
            if len(hits) == 1:
                refs = self._cols.single(hits[0])
                ids = refs[0].id
            else:  # copies of one rule, cited together: made at load
                cited = self._cited.get(tuple(hits))
                refs, ids = cited if cited is not None else self._cols.cite(hits)
            verb = "forbidden" if forbid else "permitted"
            detail = f"{t.action} on {resource} is {verb} by {ids}"
        effect = _ALLOW if reason is _ALLOWED else _DENY
        decision = new_decision(
            effect, reason, t.name, t.namespace, t.action, resource, refs, detail
        )
        # Bounded: when full, every kept decision is dropped (the tools' and the tuple-keyed).
        self._n_decided += 1
        if self._n_decided > DECISION_CACHE_SIZE:
            self._n_decided = 1
            self._decisions.clear()
            for plan in list(self._tools.values()):
                plan.decided.clear()
                plan.decided_multi.clear()
                plan.decided_once.clear()
        # A decision is kept the second time it is made: the first leaves only its rule
        # number (in a set) or its resource (a key, with None) behind, which are nothing
        # for the garbage collector (see ``context_entry``); a rule's map of resources is
        # made the second time the rule decides.
        if hits is None or len(hits) == 1:
            key = -1 if hits is None else hits[0]
            per = t.decided.get(key)
            if per is None:
                if key not in t.decided_once:
                    t.decided_once.add(key)
                    return decision
                per = t.decided[key] = {}
            per[resource] = decision if resource in per else None
        else:
            per = t.decided_multi.get(hits[0])
            if per is None:
                once = -2 - hits[0]
                if once not in t.decided_once:
                    t.decided_once.add(once)
                    return decision
                per = t.decided_multi[hits[0]] = {}
            kept = per.get(resource, _MISSING)
            if kept is _MISSING:
                per[resource] = None  # made once: kept when it is made again
            elif kept is None:
                per[resource] = decision
            else:  # taken by a decision citing other rules: see ``decide``
                self._decisions[(t.name, resource, *hits)] = decision
        return decision

    @staticmethod
    def _unresolvable(t: ToolPlan, why: str) -> Decision:
        return Decision(
            _DENY,
            ReasonCode.UNRESOLVABLE_RESOURCE,
            t.name,
            t.namespace,
            t.action,
            None,
            (),
            f"the resource of {t.name} cannot be resolved: {why}",
        )

    @staticmethod
    def _unavailable(tool: object) -> Decision:
        name = tool if type(tool) is str else repr(tool)
        shown = name if len(name) <= 200 else name[:197] + "..."
        return Decision(
            _DENY,
            ReasonCode.TOOL_UNAVAILABLE,
            shown,
            None,
            None,
            None,
            (),
            f"no requirement declares tool {shown!r}: it is neither listed nor callable",
        )

    def prepare_all(self) -> None:
        """Decode every rule and group and build every tool's plan (see ``PolicySet.prepare``).

        Matchers and conditions were compiled by the load (a role test's
        condition, which a decision reads as one set lookup, is compiled when
        something evaluates it as written)."""
        was_enabled = gc.isenabled()
        gc.disable()  # thousands of small records and closures, no cycles
        try:
            applies = self._cols.applies
            for idx in range(self._table.n):
                record = self.rule(idx)
                # The load compiled every condition a decision evaluates; a role
                # form's (one set lookup in a decision) stays compiled on first use.
                fn = applies[idx]
                if fn is not None and record.has_condition:
                    record.applies = fn
            for gid in range(len(self._groups)):
                self.group(gid)
            for name in self.requirements:
                self.tool(name)
        finally:
            if was_enabled:
                gc.enable()
