"""Branch coverage for ``sharedos-policy test --coverage``: which conditions the tests
decided both ways.

A rule can be *exercised* (it applied in some test) while half of its logic
was never tried: its ``when`` never false, the second term of an ``or`` never
true. For every rule with a condition, the branch points are its ``when``
condition, its ``unless`` condition, and each term of every ``or`` inside
them; each has two outcomes, true and false. A test *decides* a branch point
when its call reaches the rule (the rule's pattern matches the call's
resource, forbids and permits alike) and evaluation gets to that point
(``and``/``or`` short-circuit as in ``decide``; an error decides nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sharedos.policy.conditions import Env, compile_expr, unparse
from sharedos.policy.decision import RuleRef
from sharedos.policy.functions import EvalError
from sharedos.policy.index import walk_along

#: (rule index, "when"/"unless", path of the node inside that condition)
Point = tuple[int, str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class BranchPoint:
    """One branch point: a rule's ``when``/``unless`` or a term of an ``or`` in it."""

    rule: RuleRef
    clause: str
    path: tuple[int, ...]
    text: str
    #: 1-based position of the term in its ``or`` (0: the whole clause)
    term: int

    def describe(self) -> str:
        """``when COND`` or ``or term 2 of unless: COND``."""
        if self.term == 0:
            return f"{self.clause} {self.text}"
        return f"or term {self.term} of {self.clause}: {self.text}"


@dataclass(slots=True)
class BranchCoverage:
    """The outcomes seen at every branch point of every conditional rule."""

    points: list[BranchPoint] = field(default_factory=list)
    seen: dict[tuple[RuleRef, str, tuple[int, ...]], set[bool]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Outcomes there are to decide (two per branch point)."""
        return 2 * len(self.points)

    @property
    def covered(self) -> int:
        """Outcomes some test decided."""
        return sum(len(self.seen.get(_key(p), ())) for p in self.points)

    def gaps(self) -> list[tuple[BranchPoint, str]]:
        """Each branch point not decided both ways, with what is missing."""
        out = []
        for p in self.points:
            got = self.seen.get(_key(p), set())
            if len(got) == 2:
                continue
            missing = (
                "never decided" if not got else "never true" if True not in got else "never false"
            )
            out.append((p, missing))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        from sharedos.policy.testing import coverage_percent

        return {
            "outcomes": self.total,
            "covered": self.covered,
            "percent": coverage_percent(self.covered, self.total),
            "not_decided_both_ways": [
                {
                    "rule": p.rule.to_dict(),
                    "clause": p.clause,
                    "term": p.term,
                    "condition": p.text,
                    "missing": missing,
                }
                for p, missing in self.gaps()
            ],
        }


def _key(p: BranchPoint) -> tuple[RuleRef, str, tuple[int, ...]]:
    return (p.rule, p.clause, p.path)


def _clauses(rule: Any) -> list[tuple[str, list[Any]]]:
    enc = rule.condition
    kind = rule.condition_kind
    if enc is None or kind is None:
        return []
    if kind == "when unless":  # compiled as ["and", WHEN, ["not", UNLESS]]
        return [("when", enc[1]), ("unless", enc[2][1])]
    return [(kind, enc)]


def branch_points(policy: Any) -> list[BranchPoint]:
    """Every branch point of every rule of ``policy`` with a condition, in rule order."""
    out: list[BranchPoint] = []
    records = [policy.rule(i) for i in range(policy.rule_count)]
    approvals = getattr(policy, "approvals", None)
    if approvals is not None:
        records += approvals.all_rules()
    for rule in records:
        for clause, enc in _clauses(rule):
            out.append(BranchPoint(rule.ref, clause, (), unparse(enc), 0))
            stack: list[tuple[list[Any], tuple[int, ...]]] = [(enc, ())]
            found: list[BranchPoint] = []
            while stack:
                node, path = stack.pop()
                kind = node[0]
                if kind in ("and", "or", "not"):
                    for k, child in enumerate(node[1:]):
                        if kind == "or":
                            found.append(
                                BranchPoint(rule.ref, clause, (*path, k), unparse(child), k + 1)
                            )
                        stack.append((child, (*path, k)))
            out.extend(sorted(found, key=lambda p: p.path))
    return out


class _Recorder:
    """Evaluates a clause as ``decide`` does, noting each branch point's outcome."""

    def __init__(self, env: Env, note: Any, memo: dict[str, Any]) -> None:
        self.env = env
        self.note = note
        self.memo = memo

    def value(self, node: list[Any], path: tuple[int, ...]) -> Any:
        kind = node[0]
        if kind in ("and", "or"):
            stop = kind == "or"
            for k, child in enumerate(node[1:]):
                result = self.value(child, (*path, k))
                if type(result) is not bool:
                    raise EvalError("not a boolean")
                if kind == "or":
                    self.note((*path, k), result)
                if result is stop:
                    return stop
            return not stop
        if kind == "not":
            inner = self.value(node[1], (*path, 0))
            if type(inner) is not bool:
                raise EvalError("not a boolean")
            return not inner
        key = repr(node)
        fn = self.memo.get(key)
        if fn is None:
            fn = self.memo[key] = compile_expr(node)
        return fn(self.env)


def record(
    policy: Any,
    tool: str,
    args: Mapping[str, Any],
    context: Mapping[str, Any],
    coverage: BranchCoverage,
    memo: dict[str, Any],
) -> None:
    """Note the outcomes one call decides, at every rule whose pattern matches its resource."""
    t = policy.tool(tool)
    if t is None:
        return
    try:
        resource, segs = t.resolve(args)
    except Exception:
        return
    env: Env = (context, args, resource, t.action)
    node = walk_along(t.walk, segs)
    reached = [
        rule
        for forbid in (True, False)
        for rule in policy.node_rules(node, forbid)
        if rule.has_condition and policy.pattern_matches(rule, segs, context)
    ]
    approvals = getattr(policy, "approvals", None)
    if approvals is not None:
        reached += [
            rule
            for rule in approvals.rules_for(t.namespace, t.action, resource.startswith("/"))
            if rule.has_condition and approvals.pattern_matches(rule, resource, context)
        ]
    for rule in reached:
        for clause, enc in _clauses(rule):

            def note(
                path: tuple[int, ...],
                outcome: bool,
                ref: RuleRef = rule.ref,
                clause: str = clause,
            ) -> None:
                coverage.seen.setdefault((ref, clause, path), set()).add(outcome)

            recorder = _Recorder(env, note, memo)
            try:
                result = recorder.value(enc, ())
            except Exception:  # an error decides nothing (the rule failed closed)
                continue
            if type(result) is bool:
                note((), result)


def measure(
    policy: Any, calls: Iterable[tuple[str, Mapping[str, Any], Mapping[str, Any]]]
) -> BranchCoverage:
    """Branch coverage of ``policy`` by ``calls`` (tool, args, completed context)."""
    coverage = BranchCoverage(branch_points(policy))
    memo: dict[str, Any] = {}
    for tool, args, context in calls:
        record(policy, tool, args, context, coverage, memo)
    return coverage


def render(coverage: BranchCoverage) -> Sequence[str]:
    """The text lines ``test --coverage`` prints for branches."""
    from sharedos.policy.testing import coverage_percent

    lines = [
        f"branches: {coverage.covered}/{coverage.total} condition outcomes decided "
        f"({coverage_percent(coverage.covered, coverage.total)}%)"
    ]
    for p, missing in coverage.gaps():
        r = p.rule
        lines.append(
            f"  not decided both ways: {r.file}:{r.line}:{r.col} {r.effect} {r.id} "
            f"{p.describe()}: {missing}"
        )
    return lines
