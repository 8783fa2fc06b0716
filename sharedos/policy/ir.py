"""The typed runtime form of a compiled policy (what the evaluators walk).

The compiled *program* (``compiler.compile_program``) is JSON-ready data:
that is what bundles store and what ``bundle_hash`` is computed over. Its
rules are stored **column by column** (``RULE_COLUMNS``: one list per field,
one entry per rule), so a bundle of 10,000 rules loads as a few dozen long
lists, and each rule's matcher is stored ready to use (``matchers``), so
loading compiles nothing. This module checks those columns once
(``RuleTable``) and decodes one rule into a slotted ``RuleRecord`` the first
time a decision reaches it; the evaluator, the partial evaluator and the
explainer share the records:

* ``RuleRecord`` -- one permit/forbid: where it lives, its condition compiled
  to a closure, and its matcher (``MatchKind`` plus the data that kind needs);
* ``ToolPlan`` -- one requirement ready to decide: resolver, resource shape
  and the decision walk of its (namespace, action).

The decision walks themselves live in ``index``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from sharedos.errors import PolicyLanguageError
from sharedos.policy.conditions import Env, Memo, compile_applies
from sharedos.policy.decision import Decision, Requirement, RuleRef
from sharedos.policy.jsonvalues import loads
from sharedos.policy.matchers import (
    Matcher,
    MatcherPlan,
    MatchKind,
    Program,
    compile_tests,
    context_matcher,
    matcher_plan,
)
from sharedos.policy.patterns import Resolved, parse_pattern, resolve
from sharedos.policy.resolvers import Resolver

if TYPE_CHECKING:
    from sharedos.policy.index import Node

__all__ = [
    "CONDITION_KINDS",
    "RULE_COLUMNS",
    "MalformedProgram",
    "MatchKind",
    "Matcher",
    "RuleRecord",
    "RuleTable",
    "ToolPlan",
    "encode_rules",
]

Applies = Callable[[Env], bool]

#: A rule's condition kind as stored (``ckind`` column) -> as written.
CONDITION_KINDS: tuple[Literal["when", "unless", "when unless"] | None, ...] = (
    None,
    "when",
    "unless",
    "when unless",
)
_EFFECTS: tuple[Literal["permit", "forbid"], ...] = ("permit", "forbid")

#: The rule columns of a program: name -> what every entry is.
#: ``file`` and ``ns`` index the table's ``files`` and ``namespaces`` lists;
#: ``cond`` is the encoded condition (``conditions``) packed as compact JSON,
#: decoded when the rule is first used; ``m*`` is the static matcher
#: (``matchers.static_spec``; ``mkind`` 4 means the pattern interpolates the
#: context and is resolved per context); ``rkey``/``rform``/``mplan`` are what a
#: decision knows without evaluating (``prefilter``).
RULE_COLUMNS: dict[str, str] = {
    "id": "str",
    "effect": "bit",  # 0 permit, 1 forbid
    "file": "file",
    "line": "int",
    "col": "int",
    "ns": "ns",
    "pattern": "str",
    "cond": "str?",
    "ckind": "ckind",
    "ctx": "bit",  # 1: the condition reads nothing but the context
    "desc": "str?",
    "mkind": "mkind",
    "mdepth": "int",
    "mhead": "str",
    "mtail": "str",
    "mtests": "list?",
    "rkey": "str?",  # the role the condition needs (prefilter.role_form), or null
    "rform": "rform",  # 0 general, 1 exactly that role, 2 exactly not that role
    "mplan": "list?",  # a CONTEXT pattern's plan (prefilter.context_plan), or null
}


class MalformedProgram(PolicyLanguageError, ValueError):
    """A program (usually from a bundle) whose structure is not what the compiler writes."""


def encode_rules(
    columns: Mapping[str, list[Any]], files: Sequence[str], namespaces: Sequence[str]
) -> dict[str, Any]:
    """The program's rule table from its columns (keys: ``RULE_COLUMNS``, one entry per rule).

    Columns rather than one mapping per rule: a compile of 10,000 rules
    would otherwise build 10,000 short-lived dicts (a high-water mark the
    process keeps as resident memory).
    """
    table: dict[str, Any] = {name: columns[name] for name in RULE_COLUMNS}
    table["files"] = list(files)
    table["namespaces"] = list(namespaces)
    return table


def _check_column(name: str, kind: str, column: Any, n: int, limits: Mapping[str, int]) -> None:
    if type(column) is not list or len(column) != n:
        raise MalformedProgram(f"rule column {name!r} is not a list of {n} entries")
    if not column:
        return
    types = set(map(type, column))
    if kind == "str":
        ok = types <= {str}
    elif kind == "str?":
        ok = types <= {str, type(None)}
    elif kind == "list?":
        ok = types <= {list, type(None)}
    else:
        ok = types <= {int}
        if ok and kind != "int":
            top = {
                "bit": 2,
                "ckind": len(CONDITION_KINDS),
                "mkind": len(MatchKind),
                "rform": 3,
            }.get(kind)
            ok = min(column) >= 0 and max(column) < (top if top is not None else limits[kind])
    if not ok:
        raise MalformedProgram(f"rule column {name!r} has a malformed entry")


class RuleTable:
    """The program's rule columns, checked once; ``record(i)`` decodes rule ``i``.

    Raise ``MalformedProgram`` when a column is missing, of the wrong length
    or holds an entry of the wrong type (a corrupt bundle fails its load,
    never a decision).
    """

    __slots__ = ("columns", "files", "memo", "n", "namespaces")

    def __init__(self, table: Any) -> None:
        if type(table) is not dict:
            raise MalformedProgram("rules is not a rule table")
        files, namespaces = table.get("files"), table.get("namespaces")
        for what, names in (("files", files), ("namespaces", namespaces)):
            if type(names) is not list or not set(map(type, names)) <= {str}:
                raise MalformedProgram(f"the rule table's {what} is not a list of names")
        ids = table.get("id")
        if type(ids) is not list:
            raise MalformedProgram("rule column 'id' is missing")
        self.n = len(ids)
        limits = {"file": len(files), "ns": len(namespaces)}  # type: ignore[arg-type]
        for name, kind in RULE_COLUMNS.items():
            _check_column(name, kind, table.get(name), self.n, limits)
        self.columns: dict[str, list[Any]] = {name: table[name] for name in RULE_COLUMNS}
        self.files: list[str] = files  # type: ignore[assignment]
        self.namespaces: list[str] = namespaces  # type: ignore[assignment]
        #: the compiled conditions and comparisons of this program's rules (see ``_compile_packed``)
        self.memo: Memo = {}

    def record(self, i: int, ref: RuleRef | None = None) -> RuleRecord:
        """Rule ``i`` decoded (its matcher ready; its condition compiled by its first evaluation).

        ``ref``, when given, is rule ``i``'s reference already built (the
        evaluator's, which decisions cite): the record shares it."""
        c = self.columns
        forbid = c["effect"][i] == 1
        effect = _EFFECTS[1 if forbid else 0]
        rid = c["id"][i]
        if ref is None:
            ref = RuleRef(rid, self.files[c["file"][i]], c["line"][i], c["col"][i], effect)
        kind = CONDITION_KINDS[c["ckind"][i]]
        packed = c["cond"][i]
        mkind = MatchKind(c["mkind"][i])
        depth = c["mdepth"][i]
        prog: Program | None = None
        if mkind is MatchKind.GENERAL:
            prog = _tests_or_nothing(c["mtests"][i])
            if (
                prog is None
            ):  # a malformed matcher: a permit matches nothing, a forbid all it reaches
                mkind, depth = (MatchKind.ANY, 0) if forbid else (MatchKind.DEPTH, -1)
        record = RuleRecord(
            i,
            rid,
            effect,
            forbid,
            self.namespaces[c["ns"][i]],
            c["pattern"][i],
            packed,
            kind,
            c["ctx"][i] == 1 and packed is not None,
            None,
            mkind,
            depth,
            c["mhead"][i],
            c["mtail"][i],
            prog,
            ref,
            c["desc"][i],
        )
        if packed is not None:
            record.applies = _compile_on_first_use(record, self.memo)
        return record


def _compile_on_first_use(record: RuleRecord, memo: Memo) -> Applies:
    """A stand-in for a rule's applies-closure that compiles it the first time it runs.

    Decoding a rule then costs no compile: a decision that reaches a group
    decodes all of its rules but evaluates the conditions of only those whose
    pattern matched, and a condition is compiled once, by the first decision
    that evaluates it (two threads may both compile it; either result is the
    same closure)."""

    def first_use(env: Env) -> bool:
        return record.compile_condition(memo)(env)

    return first_use


def _fail_closed(forbid: bool) -> Applies:
    return lambda env: forbid


def decode_packed(packed: str, memo: Memo) -> list[Any]:
    """A packed condition's encoded expression, decoded once per program (kept in
    ``memo`` under ``("enc", packed)``); raise ``ValueError`` when it is not one (a NaN
    in a tampered bundle is refused too)."""
    key = ("enc", packed)
    enc = memo.get(key)
    if enc is None:
        enc = loads(packed)
        if type(enc) is not list:
            raise ValueError("not an encoded expression")
        memo[key] = enc
    return enc


def _compile_packed(packed: str, kind: str | None, forbid: bool, memo: Memo) -> Applies:
    """The applies-closure of a packed condition; a corrupt one fails closed (a forbid
    applies, a permit does not), like any condition that cannot be evaluated.

    Rules with the same condition (text, kind and effect) share one closure,
    and different conditions share their common comparisons, through ``memo``."""
    key = (packed, kind, forbid)
    applies: Applies | None = memo.get(key)
    if applies is not None:
        return applies
    try:
        enc = decode_packed(packed, memo)
        applies = compile_applies(enc, kind, forbid, memo)
    except Exception:
        applies = _fail_closed(forbid)
    memo[key] = applies
    return applies


def _tests_or_nothing(tests: Any) -> Program | None:
    try:
        return compile_tests(tests)
    except (ValueError, TypeError, IndexError, KeyError):
        return None


class RuleRecord:
    """One compiled permit/forbid, decoded from the program and ready to evaluate.

    ``index`` is the rule's position in the program (per-context verdict
    caches are indexed by it). ``applies`` is ``None`` for an unconditional
    rule; ``context_only`` says the condition reads nothing but the context
    (its verdict is cached per context). The matcher is ``match`` plus, per
    kind, ``depth``/``head``/``tail``/``least`` (``DEPTH``, ``AFFIX``) or
    ``prog`` (``GENERAL``, whose tests start at segment ``depth``); a
    ``CONTEXT`` rule resolves its pattern per context (``context_matcher``).
    ``description`` is the rule's ``@description``, for explanations.
    """

    __slots__ = (
        "_cond",
        "_mplan",
        "_packed",
        "_penc",
        "applies",
        "condition_kind",
        "context_only",
        "depth",
        "description",
        "effect",
        "forbid",
        "head",
        "id",
        "index",
        "least",
        "match",
        "namespace",
        "pattern",
        "prog",
        "ref",
        "refs",
        "tail",
    )

    def __init__(
        self,
        index: int,
        rid: str,
        effect: Literal["permit", "forbid", "approval"],
        forbid: bool,
        namespace: str,
        pattern: str,
        packed: str | None,
        condition_kind: Literal["when", "unless", "when unless"] | None,
        context_only: bool,
        applies: Applies | None,
        match: MatchKind,
        depth: int,
        head: str,
        tail: str,
        prog: Program | None,
        ref: RuleRef,
        description: str | None,
    ) -> None:
        self.index = index
        self.id = rid
        self.effect = effect
        self.forbid = forbid
        self.namespace = namespace
        self.pattern = pattern
        self._packed = packed
        self._cond: list[Any] | None = None
        self._penc: dict[str, Any] | None = None
        self._mplan: MatcherPlan | int | None = None
        self.condition_kind = condition_kind
        self.context_only = context_only
        self.applies = applies
        self.match = match
        self.depth = depth
        self.head = head
        self.tail = tail
        self.least = len(head) + len(tail)
        self.prog = prog
        self.ref = ref
        #: ``(ref,)``, made the first time this rule alone decides a call
        self.refs: tuple[RuleRef, ...] | None = None
        self.description = description

    def compile_condition(self, memo: Memo) -> Applies:
        """Compile the condition now (it is otherwise compiled by its first evaluation),
        sharing closures through ``memo`` (its ``RuleTable``'s); returns the closure,
        which is also ``applies`` from then on."""
        if self._packed is None:
            raise ValueError(f"rule {self.id} has no condition")
        applies = _compile_packed(self._packed, self.condition_kind, self.forbid, memo)
        self.applies = applies
        return applies

    @property
    def has_condition(self) -> bool:
        """True when the rule has a ``when``/``unless`` (without decoding it)."""
        return self._packed is not None

    def decode_condition(self) -> list[Any] | None:
        """The encoded condition decoded afresh (not kept: see ``condition``).

        A corrupt one (a tampered bundle) reads as a condition that always
        errors, so it fails closed here too.
        """
        if self._packed is None:
            return None
        cond = self._cond
        if cond is None:
            try:
                cond = loads(self._packed)
            except (ValueError, RecursionError):
                cond = None
            if type(cond) is not list:
                cond = ["lit", None]  # evaluates to an error: fails closed
        return cond

    @property
    def condition(self) -> list[Any] | None:
        """The encoded condition (``conditions``), decoded on first use and kept; None:
        unconditional. Deciding never reads it (it runs ``applies``); the partial
        evaluator and the explainer do."""
        cond = self._cond
        if cond is None and self._packed is not None:
            cond = self._cond = self.decode_condition()
        return cond

    @property
    def pattern_enc(self) -> dict[str, Any]:
        """The parsed pattern (``patterns.parse_pattern``), for explanations and listing.

        Kept only for a pattern that interpolates the context (resolved per
        context); a static one is parsed again when asked (listing plans keep
        what they resolved, explanations are not a hot path), so a prepared
        policy does not hold every rule's parsed pattern.
        """
        penc = self._penc
        if penc is None:
            try:
                penc = parse_pattern(self.pattern)
            except ValueError:
                # Unparseable (a tampered bundle): a permit matches nothing, a forbid everything.
                penc = {"abs": True, "segs": [["D"]] if self.forbid else [["L", ""], ["L", ""]]}
            if self.match is MatchKind.CONTEXT:
                self._penc = penc
        return penc

    def resolve(self, context: Any) -> Resolved:
        """The pattern with ``{context.x}`` filled in (unsafe values fail closed in a forbid)."""
        return resolve(self.pattern_enc, context, forbid=self.forbid)

    def context_matcher(self, context: Any) -> Matcher | None:
        """A ``CONTEXT`` rule's matcher for one context; None: it matches nothing there."""
        plan = self._mplan
        if plan is None:
            penc = self.pattern_enc
            start = 0
            segs = penc["segs"]
            while start < len(segs) and segs[start][0] == "L":
                start += 1
            plan = self._mplan = matcher_plan(penc, start) or start
        if type(plan) is int:  # a shape the plan does not cover: its prefix length
            return context_matcher(self.pattern_enc, context, plan, forbid=self.forbid)
        return plan.matcher(context, forbid=self.forbid)  # type: ignore[union-attr]


class ToolPlan:
    """A requirement ready to decide: how to resolve its resource and which walk to take.

    ``walk`` is the decision walk (``index``) of its (namespace, action) for
    its resource kind (absolute or relative), in its JSON form;
    ``decision_walk`` the trie ``decide`` reads (``index.merged_walk``), this
    action's groups at ``walk_slot`` and the next,
    ``decided``/``decided_multi`` the decisions it keeps (see ``Evaluator._decision``);
    ``path_arg`` is the argument
    name of a ``path(args.x)`` resource (the evaluator canonicalizes it
    inline); ``forbids``/``permits`` are every rule of that walk, in program
    order (decoded on first use, for listing and explanations).
    """

    __slots__ = (
        "_all",
        "absolute",
        "action",
        "decided",
        "decided_multi",
        "decided_once",
        "decision_walk",
        "name",
        "namespace",
        "path_arg",
        "requirement",
        "resolve",
        "shape",
        "walk",
        "walk_slot",
    )

    def __init__(
        self,
        name: str,
        namespace: str,
        action: str,
        resolve: Resolver,
        absolute: bool,
        shape: tuple[Any, ...],
        requirement: Requirement,
        walk: Node,
        path_arg: str | None,
        rules: Callable[[], tuple[tuple[RuleRecord, ...], tuple[RuleRecord, ...]]],
        decision_walk: tuple[Any, ...] = ({}, (), ()),
        walk_slot: int = 1,
    ) -> None:
        self.name = name
        self.namespace = namespace
        self.action = action
        self.resolve = resolve
        self.absolute = absolute
        self.shape = shape
        self.requirement = requirement
        self.walk = walk
        self.decision_walk = decision_walk
        self.walk_slot = walk_slot
        #: decisions ``decide`` keeps for reuse: by the one rule cited (-1: none), by
        #: resource (None: made once, kept when it is made again)
        self.decided: dict[int, dict[str, Decision | None]] = {}
        #: those citing several rules: by the first rule cited, by resource
        self.decided_multi: dict[int, dict[str, Decision | None]] = {}
        #: the keys of ``decided`` (and ``-2 - rule`` of ``decided_multi``) whose first
        #: decision was made but not kept: their map is made at the second
        self.decided_once: set[int] = set()
        self.path_arg = path_arg
        self._all: Any = rules

    def _rules(self) -> tuple[tuple[RuleRecord, ...], tuple[RuleRecord, ...]]:
        found = self._all
        if callable(found):
            found = self._all = found()
        return found  # type: ignore[no-any-return]

    @property
    def forbids(self) -> tuple[RuleRecord, ...]:
        """Every forbid of this tool's walk, in program order."""
        return self._rules()[0]

    @property
    def permits(self) -> tuple[RuleRecord, ...]:
        """Every permit of this tool's walk, in program order."""
        return self._rules()[1]
