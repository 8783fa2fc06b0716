"""The rule table as a decision reads it: column by column, nothing decoded up front.

``decide`` (``evaluator``) tests a rule from the program's columns directly
(its matcher kind, depth, head and tail, its role key and form), so reaching
a rule costs no decoding; what needs building is built per rule and never
per context: a condition's closure (shared through the table's memo), a
general matcher's program, a context pattern's plan (the evaluator's load
builds these), and the rule's ``RuleRef`` a decision cites (built here, in
bulk, so that no decision builds one).

Per caller, a decision needs the roles held (``held_roles``: a set, or None
when ``context.roles`` is not a list of strings and conditions must be
evaluated as written) and the values its patterns interpolate
(``hole_value``): both are computed once per request, or once per context
when the caller passes a ``context_key``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Literal

from sharedos.policy.conditions import Env
from sharedos.policy.decision import RuleRef, new_rule_refs
from sharedos.policy.ir import CONDITION_KINDS, MalformedProgram, RuleTable, _compile_packed
from sharedos.policy.matchers import Program, compile_tests
from sharedos.policy.patterns import lookup_context, safe_value

Applies = Callable[[Env], bool]

#: A general matcher that matches nothing (a malformed permit) or everything the
#: index reaches (a malformed forbid): see ``RuleTable.record``.
NEVER: Any = ("never",)
ALWAYS: Any = ("always",)
#: A context pattern without a plan (``prefilter.context_plan`` returned None).
NO_PLAN: Any = ("no plan",)
_EFFECTS: tuple[Literal["permit"], Literal["forbid"]] = ("permit", "forbid")


#: the order a plan's checks run in, by kind (literal, hole, affix, glob, then '*')
_CHECK_ORDER = {0: 0, 2: 1, 3: 2, 4: 3, 1: 4}


#: a missing key in ``hole_value``'s walk
_ABSENT = object()


def held_roles(context: Any) -> frozenset[str] | None:
    """The roles a caller holds, when ``"R" in context.roles`` is exactly set membership.

    None when the context is not a dict or its ``roles`` is missing or not a
    list (or tuple) of strings: then every role condition is evaluated as
    written (and a missing or malformed ``roles`` fails closed there)."""
    if type(context) is not dict:
        return None
    roles = context.get("roles")
    tr = type(roles)
    if tr is not list and tr is not tuple:
        return None
    for r in roles:  # type: ignore[union-attr]
        if type(r) is not str:
            return None
    return frozenset(roles)  # type: ignore[arg-type]


def hole_value(context: Any, path: tuple[str, ...]) -> str | None:
    """The text ``{context.PATH}`` inserts, or None when it is missing or unsafe."""
    value = context
    for name in path:  # plain dicts (what callers pass) read directly; the rest as written
        if type(value) is not dict:
            found, value = lookup_context(context, path)
            return safe_value(value) if found else None
        value = value.get(name, _ABSENT)
        if value is _ABSENT:
            return None
    if type(value) is str and value.isascii() and value.isprintable():
        # printable ASCII is NFC and has no control character: only '/', '*' and
        # the dot segments remain unsafe (``safe_value``)
        if "/" in value or "*" in value or value in ("", ".", ".."):
            return None
        return value
    return safe_value(value)


def glob_texts(context: Any, pieces: tuple[tuple[Any, ...], ...]) -> tuple[str, ...] | None:
    """A plan's glob segment for one context: its texts between wildcards (one text: no
    wildcard), or None when a hole's value is missing or unsafe (see ``hole_value``)."""
    texts = [""]
    for piece in pieces:
        kind = piece[0]
        if kind == "t":
            texts[-1] += piece[1]
        elif kind == "w":
            texts.append("")
        else:
            value = hole_value(context, piece[1])
            if value is None:
                return None
            texts[-1] += value
    return tuple(texts)


def glob_ok(texts: tuple[str, ...], s: str) -> bool:
    """Does segment ``s`` match the glob ``texts`` (``glob_texts``), as ``matchers`` does?"""
    if len(texts) == 1:
        return s == texts[0]
    head, tail = texts[0], texts[-1]
    if len(s) < sum(map(len, texts)) or not s.startswith(head) or not s.endswith(tail):
        return False
    pos = len(head)
    end = len(s) - len(tail)
    for mid in texts[1:-1]:
        found = s.find(mid, pos, end)
        if found < 0:
            return False
        pos = found + len(mid)
    return True


def _glob_pieces(value: Any) -> tuple[tuple[Any, ...], ...]:
    """A plan's glob pieces as tuples (``ValueError`` when malformed)."""
    out: list[tuple[Any, ...]] = []
    for piece in value:
        kind = piece[0]
        if kind == "t" and len(piece) == 2 and type(piece[1]) is str:
            out.append(("t", piece[1]))
        elif kind == "w" and len(piece) == 1:
            out.append(("w",))
        elif kind == "c" and len(piece) == 2 and piece[1] and all(type(v) is str for v in piece[1]):
            out.append(("c", tuple(piece[1])))
        else:
            raise ValueError("malformed glob piece")
    if not out:
        raise ValueError("empty glob")
    return tuple(out)


def validate_buckets(buckets: Any, groups: list[list[int]]) -> None:
    """Raise ``MalformedProgram`` unless ``buckets`` sorts each group's rules (see ``prefilter``)."""
    if type(buckets) is not list or len(buckets) != len(groups):
        raise MalformedProgram("buckets is not one entry per group")
    for entry, group in zip(buckets, groups, strict=True):
        if entry == 0 and type(entry) is int:
            continue
        if type(entry) is not list or len(entry) not in (2, 3):
            raise MalformedProgram("a group's buckets are not [plain, by role(, twins)]")
        plain, by_role = entry[0], entry[1]
        if type(plain) is not list or type(by_role) is not dict:
            raise MalformedProgram("a group's buckets are not [plain, by role(, twins)]")
        members = list(plain)
        for role, ids in by_role.items():
            if type(role) is not str or type(ids) is not list or not ids:
                raise MalformedProgram("a role bucket is malformed")
            members.extend(ids)
        if len(entry) == 3:
            listed = set(members)
            twins = entry[2]
            if type(twins) is not list or not twins:
                raise MalformedProgram("a group's twins are malformed")
            for row in twins:
                if type(row) is not list or len(row) < 2 or row[0] not in listed:
                    raise MalformedProgram("a group's twins are malformed")
                members.extend(row[1:])
        if not all(type(i) is int for i in members) or sorted(members) != sorted(group):
            raise MalformedProgram("a group's buckets do not hold exactly its rules")


_pack = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _role_term_text(role: str) -> str:
    """``"R" in context.roles`` exactly as the compiler packs it."""
    return '["cmp","in",["lit",' + _pack(role) + '],["ref","context",["roles"]]]'


def _negated_role_texts(role: str) -> tuple[str, str]:
    """``"R" not in context.roles`` and ``not ("R" in context.roles)``, as packed."""
    return (
        '["cmp","not in",["lit",' + _pack(role) + '],["ref","context",["roles"]]]',
        '["not",' + _role_term_text(role) + "]",
    )


def checked_prefilter(
    columns: Mapping[str, list[Any]], buckets: list[Any]
) -> tuple[list[str | None], list[int], list[Any]]:
    """The ``rkey``/``rform`` columns and the buckets a decision may trust (copies).

    A rule's role key is a shortcut past its condition, so it is used only
    when the packed condition says the same thing: exactly the role test for
    a role form, the role test as the first term of an ``and`` for a keyed
    forbid, a role test term somewhere in a keyed permit (a permit skipped
    wrongly fails closed). Anything else (a bundle edited by hand) loses its
    key and is evaluated as written, so a garbage condition fails closed where
    it is used; a group holding such a rule in a bucket is scanned whole.
    String tests only: the load parses no condition."""
    rkey = list(columns["rkey"])
    rform = list(columns["rform"])
    conds, ckinds, effects = columns["cond"], columns["ckind"], columns["effect"]
    terms: dict[str, str] = {}
    dropped: set[int] = set()
    for i, role in enumerate(rkey):
        if role is None:
            if rform[i]:
                rform[i] = 0
            continue
        term = terms.get(role)
        if term is None:
            term = terms[role] = _role_term_text(role)
        packed = conds[i]
        form = rform[i]
        if type(packed) is not str:
            ok = False
        elif form:  # ckind 1 when, 2 unless; a negated test: the other kind
            ok = (packed == term and ckinds[i] == form) or (
                ckinds[i] == 3 - form and packed in _negated_role_texts(role)
            )
        elif effects[i] == 1:
            body = packed
            while body.startswith('["and",'):
                body = body[7:]
            ok = body != packed and body.startswith(term) and ckinds[i] in (1, 3)
        else:
            ok = packed.startswith('["and",') and term in packed and ckinds[i] in (1, 3)
        if not ok:
            rkey[i] = None
            rform[i] = 0
            dropped.add(i)
    trusted = list(buckets)
    same = [columns[name] for name in _TWIN_COLUMNS]
    for gid, entry in enumerate(trusted):
        if entry == 0:
            continue
        for role, ids in entry[1].items():
            if any(rkey[i] != role or rform[i] == 2 or i in dropped for i in ids):
                trusted[gid] = 0  # scan the whole group, each rule as written
                break
        else:
            # copies are taken on trust only when every column a decision reads is equal
            if len(entry) == 3 and not all(
                all(col[row[0]] == col[i] for col in same) and rkey[row[0]] == rkey[i]
                for row in entry[2]
                for i in row[1:]
            ):
                trusted[gid] = 0
    return rkey, rform, trusted


#: the columns a decision reads of a rule: copies (``twins``) must agree on each
_TWIN_COLUMNS = (
    "effect",
    "pattern",
    "cond",
    "ckind",
    "ctx",
    "mkind",
    "mdepth",
    "mhead",
    "mtail",
    "mtests",
    "rform",
    "mplan",
)


def twin_maps(buckets: list[Any]) -> list[dict[int, tuple[int, ...]] | None]:
    """Per group, its copies by first rule (``prefilter.group_buckets``), or None."""
    return [
        {row[0]: tuple(row[1:]) for row in entry[2]} if entry != 0 and len(entry) == 3 else None
        for entry in buckets
    ]


class RuleColumns:
    """Per-rule helpers over a checked ``RuleTable``: the references decisions cite
    (built with it), conditions, matchers and plans (built on first use)."""

    __slots__ = (
        "applies",
        "effect",
        "ids",
        "plans",
        "progs",
        "refs",
        "singles",
        "table",
    )

    def __init__(self, table: RuleTable) -> None:
        n = table.n
        self.table = table
        self.effect: list[int] = table.columns["effect"]
        #: compiled conditions by rule (None: not compiled yet; see ``compile``)
        self.applies: list[Applies | None] = [None] * n
        self.progs: list[Any] = [None] * n
        self.plans: list[Any] = [None] * n
        # Every rule's reference, and the tuple of it a decision citing that rule
        # alone holds, built now (in bulk: a few ms for 10,000 rules) rather than
        # by the first decision citing it: a first decision citing dozens of
        # rules (copies of a rule, forbids on overlapping prefixes) would build
        # dozens of objects, and every object the first decisions leave behind
        # brings the garbage collector's next pause (tens of microseconds) closer.
        c = table.columns
        files = table.files
        self.ids: list[str] = c["id"]
        self.refs: list[RuleRef] = new_rule_refs(
            self.ids,
            [files[f] for f in c["file"]],
            c["line"],
            c["col"],
            [_EFFECTS[1 if e == 1 else 0] for e in self.effect],
        )
        self.singles: list[tuple[RuleRef]] = [(r,) for r in self.refs]

    def compile(self, i: int) -> Applies:
        """Rule ``i``'s condition as a closure (compiled once, shared through the memo)."""
        c = self.table.columns
        kind = CONDITION_KINDS[c["ckind"][i]]
        fn = _compile_packed(c["cond"][i], kind, c["effect"][i] == 1, self.table.memo)
        self.applies[i] = fn
        return fn

    def prog(self, i: int) -> Program:
        """Rule ``i``'s general matcher; ``NEVER``/``ALWAYS`` for a malformed one."""
        try:
            prog: Any = compile_tests(self.table.columns["mtests"][i])
        except (ValueError, TypeError, IndexError, KeyError):
            prog = ALWAYS if self.effect[i] == 1 else NEVER
        self.progs[i] = prog
        return prog  # type: ignore[no-any-return]

    def plan(self, i: int) -> Any:
        """Rule ``i``'s context plan as ``(any_tail, depth, checks, qpos, qtext)`` (``qpos``
        -1, or a literal ``qtext`` the segment there must be, taken out of ``checks``); ``NO_PLAN``
        when it has none (or a malformed one: the general matcher decides then)."""
        raw = self.table.columns["mplan"][i]
        plan: Any = NO_PLAN
        try:
            if raw is not None:
                _start, any_tail, depth, checks = raw
                out = []
                for pos, kind, value in checks:
                    if type(pos) is not int or kind not in (0, 1, 2, 3, 4):
                        raise ValueError("malformed check")
                    if kind == 2:
                        value = tuple(value)
                        if not value or not all(type(v) is str for v in value):
                            raise ValueError("malformed hole")
                    elif kind == 3:
                        value = (str(value[0]), str(value[1]))
                    elif kind == 0 and type(value) is not str:
                        raise ValueError("malformed literal")
                    elif kind == 4:
                        value = _glob_pieces(value)
                    out.append((pos, kind, value))
                if type(depth) is not int or not all(p < depth for p, _, _ in out):
                    raise ValueError("malformed depth")
                # each check reads one position on its own, so their order is free:
                # literals first (they reject most paths, the same for every caller)
                out.sort(key=lambda check: _CHECK_ORDER[check[1]])
                # the first literal, if any, is tested on its own, before the loop
                qpos, qtext = -1, ""
                if out and out[0][1] == 0:
                    qpos, _, qtext = out.pop(0)
                plan = (bool(any_tail), depth, tuple(out), qpos, qtext)
        except (ValueError, TypeError, IndexError):
            plan = NO_PLAN
        self.plans[i] = plan
        return plan

    def ref(self, i: int) -> RuleRef:
        """Where rule ``i`` lives (built at load, see ``__init__``)."""
        return self.refs[i]

    def single(self, i: int) -> tuple[RuleRef, ...]:
        """``(ref(i),)``, made at load: most decisions cite one rule."""
        return self.singles[i]

    def cite(self, hits: list[int]) -> tuple[tuple[RuleRef, ...], str]:
        """The references of ``hits`` (program order) and their ids joined by ``", "``."""
        return tuple(map(self.refs.__getitem__, hits)), ", ".join(map(self.ids.__getitem__, hits))
