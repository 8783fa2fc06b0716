"""What a decision can know about a rule without evaluating its condition (compile time).

Most rules of a large policy are guarded by a role: ``permit read on
"/data/d3/**" when "r12" in context.roles`` (perhaps with more terms after
an ``and``), ``forbid * on "/private/**" unless "admin" in context.roles``.
The compiler records, per rule, the role such a condition needs and, per
rule group, the rules by that role, so that a decision (``evaluator``) looks
up the roles the caller holds instead of testing every rule of a group one
by one, and decides a condition that *is* a role test with one set lookup.

* ``role_form(enc, kind, forbid)`` -> ``(role, form)``: ``role`` is R when
  the rule can apply only to a caller holding R; ``form`` is ``ROLE_IS`` when
  the whole condition is ``when "R" in context.roles`` (it applies iff R is
  held), ``ROLE_NOT`` when it is ``unless "R" in context.roles`` (iff R is
  not held; no bucket then), else ``GENERAL``. The negated tests (``"R" not
  in context.roles``, ``not ("R" in context.roles)``) swap the two.
* ``group_buckets(groups, roles, forms, sigs)``: per group, ``0`` or ``[plain,
  {R: [...]}]`` or ``[plain, {R: [...]}, twins]``: rules that are copies of
  one another (same pattern, condition and effect: generated or merged
  policies repeat rules) are tested once, through the first of them, and
  ``twins`` (``[[first, copy, ...], ...]``) names the copies that apply with it.
* ``context_plan(penc)``: the matcher of a pattern that interpolates the
  context (``/home/{context.principal}/**``), worked out once, so that a
  decision compares segments with the caller's values instead of building a
  matcher per context.

**Why the role key is exact.** It is used only when the context's ``roles``
is a list (or tuple) of strings, where ``"R" in context.roles`` is set
membership; for any other context every rule is evaluated as written. A
permit applies only when its whole ``when`` is true, so any term of its
top-level ``and`` chain that is ``"R" in context.roles`` is a key: without R
that term is false (or an earlier term is false or errs, and a permit whose
condition errs does not apply). For a forbid an error makes it apply, so only
the *first* term evaluated is a key: without R it is false and ``and`` stops
there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: ``rform`` column values.
GENERAL, ROLE_IS, ROLE_NOT = 0, 1, 2
#: A group gets role buckets when at least this many of its rules have a role key
#: (fewer are as quickly tested one by one, with one set lookup each).
BUCKET_MIN = 6
#: ``context_plan`` check kinds: a literal, ``*``, a whole-segment hole, a last ``head*tail``,
#: a segment of text, wildcards and holes (``{context.principal}-*``).
PLAN_TEXT, PLAN_STAR, PLAN_HOLE, PLAN_AFFIX, PLAN_GLOB = 0, 1, 2, 3, 4


def role_term(enc: Any) -> str | None:
    """R when ``enc`` is exactly ``"R" in context.roles`` (a string literal R), else None."""
    if (
        type(enc) is list
        and len(enc) == 4
        and enc[0] == "cmp"
        and enc[1] == "in"
        and type(enc[2]) is list
        and len(enc[2]) == 2
        and enc[2][0] == "lit"
        and type(enc[2][1]) is str
        and enc[3] == ["ref", "context", ["roles"]]
    ):
        return enc[2][1]
    return None


def negated_role_term(enc: Any) -> str | None:
    """R when ``enc`` is exactly ``"R" not in context.roles`` or ``not ("R" in
    context.roles)`` (a string literal R), else None."""
    if type(enc) is not list:
        return None
    if len(enc) == 2 and enc[0] == "not":
        return role_term(enc[1])
    if len(enc) == 4 and enc[1] == "not in":
        return role_term(["cmp", "in", enc[2], enc[3]])
    return None


def _terms(enc: Any, op: str) -> list[Any]:
    """The terms of a top-level ``op`` (``and`` / ``or``) chain in evaluation order (nested
    chains of the same ``op`` flattened); ``[enc]`` when it is not one."""
    out: list[Any] = []
    stack = [enc]
    while stack:
        node = stack.pop()
        if type(node) is list and node and node[0] == op:
            stack.extend(reversed(node[1:]))
        else:
            out.append(node)
    return out


def _conjuncts(enc: Any) -> list[Any]:
    """The terms of a top-level ``and`` chain in evaluation order (nested ``and`` flattened)."""
    return _terms(enc, "and")


def role_form(enc: Any, kind: str | None, forbid: bool) -> tuple[str | None, int]:
    """The role a rule needs (None: none) and its ``rform`` (see the module docstring).

    ``enc`` is the rule's compiled condition and ``kind`` its kind (``when``,
    ``unless`` or ``when unless``, compiled as ``A and not B``)."""
    if enc is None:
        return None, GENERAL
    whole = role_term(enc)
    if whole is not None and kind == "when":
        return whole, ROLE_IS
    if whole is not None and kind == "unless":
        return whole, ROLE_NOT
    # the same tests negated: `when "R" not in context.roles` is `unless "R" in ...`
    # (each errs where the other does: roles not a list), and the other way round
    negated = negated_role_term(enc)
    if negated is not None and kind == "when":
        return negated, ROLE_NOT
    if negated is not None and kind == "unless":
        return negated, ROLE_IS
    if kind not in ("when", "when unless"):
        return None, GENERAL
    terms = _conjuncts(enc)
    for term in terms[:1] if forbid else terms:
        role = role_term(term)
        if role is not None:
            return role, GENERAL
    return None, GENERAL


def group_buckets(
    groups: Sequence[Sequence[int]],
    roles: Sequence[str | None],
    forms: Sequence[int],
    sigs: Sequence[Any],
) -> list[Any]:
    """Per group, ``0`` or ``[plain, {role: [rule positions]}]`` (positions in group order),
    with a third entry ``twins`` when some rules of the group are copies of another.

    ``sigs[i]`` is what decides whether rule i applies (its pattern, condition
    and effect): a rule whose signature an earlier rule of the group has is a
    copy, listed only in ``twins`` under that first rule. A rule goes in the
    bucket of its role when it has one (``roles``) and its form is not
    ``ROLE_NOT``; a group gets role buckets when ``BUCKET_MIN`` of its rules
    would."""
    out: list[Any] = []
    for group in groups:
        first: dict[Any, int] = {}
        twins: dict[int, list[int]] = {}
        reps: list[int] = []
        for i in group:
            rep = first.setdefault(sigs[i], i)
            if rep == i:
                reps.append(i)
            else:
                twins.setdefault(rep, []).append(i)
        keyed = [i for i in reps if roles[i] is not None and forms[i] != ROLE_NOT]
        bucketed = len(keyed) >= BUCKET_MIN
        if not bucketed and not twins:
            out.append(0)
            continue
        buckets: dict[str, list[int]] = {}
        taken: set[int] = set()
        if bucketed:
            for i in keyed:
                buckets.setdefault(roles[i], []).append(i)  # type: ignore[arg-type]
            taken = set(keyed)
        entry: list[Any] = [[i for i in reps if i not in taken], buckets]
        if twins:
            entry.append([[rep, *copies] for rep, copies in twins.items()])
        out.append(entry)
    return out


def context_plan(penc: Mapping[str, Any]) -> list[Any] | None:
    """``[start, any_tail, depth, checks]`` for a pattern that interpolates the context, or
    None when its shape needs the general per-context matcher.

    ``start`` is the length of the literal prefix (the index walked it);
    ``checks`` are ``[position, kind, value]`` from there on: a literal
    (``PLAN_TEXT``, the text), ``*`` (``PLAN_STAR``), a whole-segment hole
    (``PLAN_HOLE``, the context path), a last ``head*tail`` segment
    (``PLAN_AFFIX``, ``[head, tail]``) and any other segment of text, ``*``
    and holes (``PLAN_GLOB``, its pieces as the pattern has them: ``["t",
    text]``, ``["w"]``, ``["c", path]``); ``any_tail`` is 1 when the pattern
    ends in ``**`` (then ``depth`` is the least number of segments, else the
    exact number)."""
    segs = penc["segs"]
    start = 0
    while start < len(segs) and segs[start][0] == "L":
        start += 1
    rest = list(segs[start:])
    any_tail = 1 if rest and rest[-1][0] == "D" else 0
    if any_tail:
        rest.pop()
    checks: list[list[Any]] = []
    for pos, seg in enumerate(rest, start=start):
        kind = seg[0]
        if kind == "L":
            checks.append([pos, PLAN_TEXT, seg[1]])
        elif kind == "S":
            checks.append([pos, PLAN_STAR, None])
        elif kind == "G" and len(seg[1]) == 1 and seg[1][0][0] == "c":
            checks.append([pos, PLAN_HOLE, list(seg[1][0][1])])
        elif (
            kind == "G"
            and not any_tail
            and pos == start + len(rest) - 1
            and [p[0] for p in seg[1]] in (["t", "w", "t"], ["w", "t"], ["t", "w"])
        ):
            head = seg[1][0][1] if seg[1][0][0] == "t" else ""
            tail = seg[1][-1][1] if seg[1][-1][0] == "t" else ""
            checks.append([pos, PLAN_AFFIX, [head, tail]])
        elif kind == "G" and seg[1] and all(_plain_piece(p) for p in seg[1]):
            checks.append([pos, PLAN_GLOB, [list(p) for p in seg[1]]])
        else:
            return None
    return [start, any_tail, start + len(rest), checks]


def _plain_piece(piece: Any) -> bool:
    """A glob segment's piece a plan can resolve: text, a wildcard or a context path."""
    kind = piece[0]
    return (
        (kind == "t" and len(piece) == 2)
        or (kind == "w" and len(piece) == 1)
        or (kind == "c" and len(piece) == 2 and bool(piece[1]))
    )


# ------------------------------------------------------------ value keys (at load)
#
# The same idea for the other common guards: rules on one prefix that differ only
# by a value the caller or the call carries (``when context.tenant == "t3"``,
# ``when args.mode in ["append", "create"]``, ``when args.level == 2``, ``when
# "g1" in context.attributes.groups``, ``when lower(args.mode) == "append"``,
# ``when startswith(path(args.path), "/t3/")``, ``when args.size <= 4096``).
# Worked out by the evaluator at load from the packed conditions (not stored in
# the program, so bundles are unchanged): a group with ``BUCKET_MIN`` such rules
# on one reference keeps them by value, and a decision reads the reference once
# and tests only the rules of the value(s) it holds.
#
# **Why a value key is exact.** The *read* of a key is a reference, or up to
# three of ``lower(X)``, ``path(X)`` and ``segment(X, N)`` around one
# (``segment(path(args.path), 1)``): pure functions of one string, so the same
# read gives the same value the rule's own condition computes. A key term is ``READ == L`` (either side) or ``READ
# in [L, ...]``, each L a string or a finite number (not a boolean): an
# *equality key*; ``"s" in REF`` and ``any_in(REF, ["s", ...])`` (either
# order): a *membership key*; ``startswith(READ, "s")``
# / ``endswith(READ, "s")``: a *prefix* / *suffix key*; ``REF < N``, ``REF <=
# N``, ``REF > N``, ``REF >= N`` (either side, N a finite number literal): an
# *order key*. Policy equality (``functions.values_equal``) makes ``v == L``
# true, for a string v, iff v is the same string; for an int or finite float v,
# iff v is the same number (Python's dict lookup agrees: ``2 == 2.0``, ``"2" !=
# 2``); and false, never an error, for a boolean or null v, and for any value
# against a string L. ``"s" in REF`` on a list of strings is true iff "s" is one
# of them; ``any_in`` of that list and a list of string literals, iff one of the
# literals is one of them (a rule then sits under each of its literals, and a
# decision takes it once however many of them the list holds); an ``or`` of such
# terms on one read (``"a" in REF or "b" in REF``, ``READ == "x" or READ == "y"``)
# is one key with all their values: on a value the key decides no term errs; an
# ``or`` of key terms of any kind below on several reads (``context.tenant == "t1"
# or "r1" in context.roles``, ``REF >= 3 or "r1" in context.roles``) is one key over
# all of them, a rule sitting under the value of each term, and is false iff no
# term holds on the values read (each read decided, so no term errs).
# ``startswith(v, "s")`` on a string v is true iff "s" is one of v's prefixes
# (``endswith``: suffixes). An order term on an int or finite float v
# is Python's own comparison, which a sorted list of the bounds answers exactly
# (``bisect``). So the rules a bucket leaves out have a key term that is false:
# a permit needs every term of its top-level ``and`` true, and a forbid's
# *first* term false ends its ``and`` (false, not an error). Whenever that
# reasoning does not cover the value read -- the read fails (a missing name, a
# step that is not an object, ``lower`` of a number, a ``path`` that does not
# resolve, a ``segment`` out of range), a non-finite float, a list holding
# anything but strings, a value of another type against a number, anything but
# a string for a prefix, anything but a finite number for an order key -- the
# decision tests every rule of the group as written, which is what decides the
# fail-closed cases (a forbid whose condition errs applies). The rules a bucket
# yields are still evaluated as written (but for an order key's rules whose whole
# condition is the bound: the slice decides them): a key only skips rules.

#: value-key modes: ``READ == L`` / ``READ in [L, ...]``, and ``"s" in REF`` or
#: ``any_in(REF, ["s", ...])`` (2 is the evaluator's: an equality key read as a number too)
EQUALS, HOLDS = 0, 1
#: ``startswith(READ, "s")`` / ``endswith(READ, "s")``
PREFIX, SUFFIX = 3, 4
#: an ``or`` of key terms on several reads (``_any_of_term``)
ANY_OF = -2
#: a forbid's key term after other key terms (``value_keys``)
GUARDED = -3
#: ``REF <= N``, ``REF < N``, ``REF >= N``, ``REF > N`` (a literal on the left: flipped)
AT_MOST, BELOW, AT_LEAST, ABOVE = 5, 6, 7, 8
#: the order keys, by the operator with the reference on the left
ORDER_MODES = {"<=": AT_MOST, "<": BELOW, ">=": AT_LEAST, ">": ABOVE}
_FLIPPED = {"<=": ">=", "<": ">", ">=": "<=", ">": "<"}
#: the functions a key's read may apply to its reference: pure functions of one string
#: (``segment``'s position a literal integer)
READ_FUNCTIONS = ("lower", "path", "segment")
#: at most this many functions around the reference (``segment(path(args.path), 1)``)
MAX_READ_STEPS = 3

#: ``(mode, root, path, steps)``: what a key reads (``steps``: the functions applied to
#: the reference, innermost first, each ``(name, *literal arguments)``) and how it is
#: compared
KeyRead = tuple[int, str, tuple[str, ...], tuple[tuple[Any, ...], ...]]
ValueKey = tuple[KeyRead, tuple[Any, ...]]


def value_term(enc: Any) -> ValueKey | None:
    """``((mode, root, path, steps), values)`` when ``enc`` is a key term (see above),
    else None."""
    if type(enc) is not list:
        return None
    if len(enc) == 3 and enc[0] == "call":
        if enc[1] == "any_in":
            return _any_in_term(enc[2])
        return _affix_term(enc)
    if enc and enc[0] == "or":
        return _any_of_term(enc)
    if len(enc) != 4 or enc[0] != "cmp":
        return None
    op, left, right = enc[1], enc[2], enc[3]
    if op == "==":
        read = _read(left)
        if read is not None and _is_key_lit(right):
            return (EQUALS, *read), (right[1],)
        read = _read(right)
        if read is not None and _is_key_lit(left):
            return (EQUALS, *read), (left[1],)
        return None
    mode = ORDER_MODES.get(op) if type(op) is str else None
    if mode is not None:
        ref = _ref(left)
        if ref is not None and _is_bound(right):
            return (mode, *ref, ()), (right[1],)
        ref = _ref(right)
        if ref is not None and _is_bound(left):
            return (ORDER_MODES[_FLIPPED[op]], *ref, ()), (left[1],)
        return None
    if op != "in":
        return None
    ref = _ref(right)
    if ref is not None and _is_lit(left) and type(left[1]) is str:
        return (HOLDS, *ref, ()), (left[1],)
    read = _read(left)
    items = _list_items(right)
    if read is not None and items and all(_is_key_lit(item) for item in items):
        return (EQUALS, *read), tuple(item[1] for item in items)
    return None


def _any_of_term(enc: list[Any]) -> ValueKey | None:
    """``A or B or ...`` where every term is a key term. On one read (and mode), every
    term an equality or a membership key (``"a" in context.roles or "b" in
    context.roles``, ``context.tenant == "t1" or context.tenant == "t2"``): one key
    holding every term's values. On several (``context.tenant == "t1" or "r1" in
    context.roles``, ``context.attributes.clearance >= 3 or "r1" in context.roles``,
    ``startswith(args.mode, "q") or ...``), an ``ANY_OF`` key whose read is ``(ANY_OF,
    "", (), ((mode, root, path, steps), ...))`` and whose values are ``(k, value)``
    pairs, k the position of the value's read. No term can err on a value the key
    decides (a list of strings, a string or a number; a string for an affix, a finite
    number for a bound), so the ``or`` is false exactly when no term's value is held
    (on every read, for ``ANY_OF``)."""
    reads: list[KeyRead] = []
    values: list[Any] = []
    for term in _terms(enc, "or"):
        key = value_term(term)
        if key is None or key[0][0] == ANY_OF:
            return None
        if key[0] not in reads:
            reads.append(key[0])
        values.extend((reads.index(key[0]), v) for v in key[1])
    if not reads:
        return None
    if len(reads) == 1:  # a value listed twice is kept once by ``value_buckets``
        if reads[0][0] not in (EQUALS, HOLDS):
            return None  # (``startswith(m, "a") or startswith(m, "ab")``: no key of one read)
        return reads[0], tuple(v for _, v in values)
    return (ANY_OF, "", (), tuple(reads)), tuple(values)


def _any_in_term(args: Any) -> ValueKey | None:
    """``any_in(REF, ["a", "b"])`` (or the literals first) as a membership key: true
    exactly when the list at REF holds one of the strings, so the rule sits under each."""
    if type(args) is not list or len(args) != 2:
        return None
    for listed, other in (args, args[::-1]):
        ref = _ref(other)
        items = _list_items(listed)
        if ref is not None and items and all(_is_lit(x) and type(x[1]) is str for x in items):
            return (HOLDS, *ref, ()), tuple(x[1] for x in items)
    return None


def _list_items(enc: Any) -> list[Any] | None:
    """The item encodings of a list literal (``["a", 1]``), else None."""
    if type(enc) is list and len(enc) == 2 and enc[0] == "list" and type(enc[1]) is list:
        return enc[1]
    return None


def _affix_term(enc: list[Any]) -> ValueKey | None:
    """``startswith(READ, "s")`` / ``endswith(READ, "s")`` as a prefix / suffix key."""
    fn, args = enc[1], enc[2]
    if fn not in ("startswith", "endswith") or type(args) is not list or len(args) != 2:
        return None
    read = _read(args[0])
    if read is None or not _is_lit(args[1]) or type(args[1][1]) is not str:
        return None
    return (PREFIX if fn == "startswith" else SUFFIX, *read), (args[1][1],)


def _read(enc: Any) -> tuple[str, tuple[str, ...], tuple[tuple[Any, ...], ...]] | None:
    """``(root, path, steps)`` of a reference, or of ``READ_FUNCTIONS`` around one
    (``lower(args.mode)``, ``segment(path(args.path), 1)``), else None."""
    steps: list[tuple[Any, ...]] = []
    while len(steps) <= MAX_READ_STEPS:
        ref = _ref(enc)
        if ref is not None:
            return (*ref, tuple(reversed(steps)))
        if type(enc) is not list or len(enc) != 3 or enc[0] != "call":
            return None
        fn, args = enc[1], enc[2]
        if fn not in READ_FUNCTIONS or type(args) is not list:
            return None
        if fn == "segment":
            if len(args) != 2 or not _is_lit(args[1]) or type(args[1][1]) is not int:
                return None
            steps.append((fn, args[1][1]))
        elif len(args) == 1:
            steps.append((fn,))
        else:
            return None
        enc = args[0]
    return None


def read_expr(root: str, path: tuple[str, ...], steps: tuple[tuple[Any, ...], ...]) -> list[Any]:
    """The condition encoding of a key's read (``_read``'s inverse), for ``compile_expr``."""
    enc: list[Any] = ["ref", root, list(path)]
    for name, *literals in steps:
        enc = ["call", name, [enc, *(["lit", value] for value in literals)]]
    return enc


def _is_bound(enc: Any) -> bool:
    """An int or a finite float literal (never a boolean): an order key's bound."""
    return _is_key_lit(enc) and type(enc[1]) is not str


def _ref(enc: Any) -> tuple[str, tuple[str, ...]] | None:
    """``(root, path)`` of a reference, else None."""
    if type(enc) is not list or len(enc) != 3 or enc[0] != "ref":
        return None
    root, path = enc[1], enc[2]
    if root not in ("context", "args", "resource", "action") or type(path) is not list:
        return None
    names = tuple(path)
    return (root, names) if all(type(name) is str for name in names) else None


def _is_lit(enc: Any) -> bool:
    return type(enc) is list and len(enc) == 2 and enc[0] == "lit"


def _is_key_lit(enc: Any) -> bool:
    """A string, an int or a finite float literal (never a boolean: ``True == 1`` in a dict)."""
    if not _is_lit(enc):
        return False
    value = enc[1]
    kind = type(value)
    return kind is str or kind is int or (kind is float and value - value == 0)


def value_keys(enc: Any, kind: str | None, forbid: bool) -> list[ValueKey]:
    """Every key term a rule with this condition can be bucketed by (see above): any
    term of a permit's top-level ``and``; the first of a forbid's, and a later one
    behind key terms only, guarded by their reads (below); none for an ``unless`` (it
    applies when the term is false)."""
    if enc is None or kind not in ("when", "when unless") or type(enc) is not list:
        return []
    if enc[0] == "cmp":  # the commonest: one comparison
        key = value_term(enc)
        return [] if key is None else [key]
    terms = _conjuncts(enc)
    out = []
    if not forbid:
        for term in terms:
            key = value_term(term)
            if key is not None:
                out.append(key)
        return out
    # A forbid: its first term; and a later term whose every earlier term is a key term
    # on one read, as a ``GUARDED`` key ``(GUARDED, "", (), (key's read, earlier reads,
    # ...))``: a decision uses it only when each earlier read is one its term cannot err
    # on (then the ``and`` reaches the key term, or stops, false), else it tests every
    # rule of the group as written.
    guards: list[KeyRead] = []
    for term in terms:
        key = value_term(term)
        if key is None or key[0][0] == ANY_OF:
            if key is not None and not guards:
                out.append(key)
            break
        out.append(key if not guards else ((GUARDED, "", (), (key[0], *guards)), key[1]))
        guards.append(key[0])
    return out


def value_buckets(
    rules: Sequence[int], keys: Mapping[int, list[ValueKey]]
) -> tuple[KeyRead, dict[Any, list[int]], set[int]] | None:
    """The key (read and mode) that narrows ``rules`` most (``keys[i]``, from
    ``value_keys``), among those at least ``BUCKET_MIN`` of them have: ``(key, {value:
    rules}, the rules kept by value)`` (each list in the order of ``rules``), else None.

    "Most" is the most distinct values, then the most rules: a key every rule shares
    with one value (``"staff" in context.roles and context.attributes.dept == "d3"``
    keyed by the role) would keep them all in one bucket. The choice depends on the
    rules alone, never on the order a set happens to iterate in.
    """
    counts: dict[KeyRead, int] = {}
    distinct: dict[KeyRead, set[Any]] = {}
    for found in keys.values():
        seen_here: set[KeyRead] = set()
        for read, listed in found:
            if read not in seen_here:
                seen_here.add(read)
                counts[read] = counts.get(read, 0) + 1
            distinct.setdefault(read, set()).update(listed)
    eligible = [read for read, count in counts.items() if count >= BUCKET_MIN]
    if not eligible:
        return None
    ref = max(eligible, key=lambda read: (len(distinct[read]), counts[read], repr(read)))
    by_value: dict[Any, list[int]] = {}
    taken: set[int] = set()
    for i in rules:
        held = keys.get(i)
        if held is None:
            continue
        values = next((k[1] for k in held if k[0] == ref), None)
        if values is None:
            continue
        taken.add(i)
        if len(values) == 1:
            by_value.setdefault(values[0], []).append(i)
        else:
            for v in dict.fromkeys(values):  # a value listed twice (or 1 and 1.0): the rule once
                by_value.setdefault(v, []).append(i)
    return ref, by_value, taken
