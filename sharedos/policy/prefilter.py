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
  not held; no bucket then), else ``GENERAL``.
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


def _conjuncts(enc: Any) -> list[Any]:
    """The terms of a top-level ``and`` chain in evaluation order (nested ``and`` flattened)."""
    out: list[Any] = []
    stack = [enc]
    while stack:
        node = stack.pop()
        if type(node) is list and node and node[0] == "and":
            stack.extend(reversed(node[1:]))
        else:
            out.append(node)
    return out


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
