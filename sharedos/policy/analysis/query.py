"""``query``: under which resource patterns, and conditions, could a principal's calls be allowed?

The answer Cerbos's PlanResources and OPA's partial evaluation give, from the
partial evaluator that builds a turn's catalogue: with the context known and
the arguments unknown, each tool's permits are weighed as ``could_permit``
weighs them (``PolicySet.explain_listing``). For every permit that could
allow some call the answer gives its pattern as instantiated for this context
(``/home/{context.principal}/**`` is ``/home/alice/**`` for alice), its
*residual* condition on the arguments and resource (``residual``), and the
forbids that carve parts out of it: each forbid whose pattern overlaps the
permit's (exactly: ``segments.overlap``) and whose own residual can apply,
saying whether it covers the whole permit. Permits that cannot allow any call
are listed apart with the reason.

Tools of one namespace, action and resource shape get the same answer and are
reported together.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sharedos.policy.analysis.residual import Residual, residual
from sharedos.policy.analysis.segments import SegPattern, Shape, overlap
from sharedos.policy.decision import RuleRef
from sharedos.policy.ir import RuleRecord
from sharedos.policy.patterns import covers_within, resolve, resolved_text
from sharedos.policy.policyset import PolicySet


@dataclass(frozen=True, slots=True)
class CarveOut:
    """A forbid that takes part of a grant away: where, and when."""

    rule: RuleRef
    pattern: str
    instantiated: str
    residual: Residual
    #: its pattern covers every resource the grant's pattern matches
    covers: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "rule": self.rule.to_dict(),
            "pattern": self.pattern,
            "instantiated": self.instantiated,
            "covers": self.covers,
            **self.residual.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class Grant:
    """A permit that could allow some call: its pattern as instantiated, its residual
    condition, and the forbids that carve parts out of it."""

    rule: RuleRef
    pattern: str
    instantiated: str
    residual: Residual
    carve_outs: tuple[CarveOut, ...]
    description: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "rule": self.rule.to_dict(),
            "pattern": self.pattern,
            "instantiated": self.instantiated,
            "description": self.description,
            **self.residual.to_dict(),
            "except": [c.to_dict() for c in self.carve_outs],
        }


@dataclass(frozen=True, slots=True)
class Excluded:
    """A permit that cannot allow any call in this context, and why."""

    rule: RuleRef
    pattern: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"rule": self.rule.to_dict(), "pattern": self.pattern, "why": self.why}


@dataclass(slots=True)
class Answer:
    """The tools of one (namespace, action, resource shape) and what they may do."""

    tools: list[str]
    namespace: str
    action: str
    resource: str
    grants: tuple[Grant, ...] = ()
    excluded: tuple[Excluded, ...] = ()

    @property
    def allowed(self) -> bool:
        """True when some call of these tools could be allowed."""
        return bool(self.grants)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "tools": list(self.tools),
            "namespace": self.namespace,
            "action": self.action,
            "resource": self.resource,
            "allowed": self.allowed,
            "grants": [g.to_dict() for g in self.grants],
            "excluded": [e.to_dict() for e in self.excluded],
        }


@dataclass(slots=True)
class QueryResult:
    """Everything ``query`` found for one context."""

    context: Mapping[str, Any]
    run_policy: str | None
    answers: list[Answer] = field(default_factory=list)
    #: tools outside the run's managed set, and why
    hidden: list[tuple[str, str]] = field(default_factory=list)
    #: tools asked for that no requirement declares
    unknown: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the ``--format json`` document)."""
        return {
            "context": dict(self.context),
            "run_policy": self.run_policy,
            "answers": [a.to_dict() for a in self.answers],
            "hidden": [{"tool": t, "why": w} for t, w in self.hidden],
            "unknown": list(self.unknown),
        }

    def render(self, *, verbose: bool = False) -> str:
        """Text form: per group of tools, each grant with its residual and carve-outs."""
        shown = json.dumps(dict(self.context), ensure_ascii=False, sort_keys=True, default=repr)
        lines = [f"context (after defaults): {shown}"]
        if self.run_policy is not None:
            lines.append(f"run policy: {self.run_policy}")
        for a in self.answers:
            lines.append(f"{', '.join(a.tools)} ({a.action}, resource {a.resource}):")
            if not a.grants:
                lines.append("  no call can be allowed")
            for g in a.grants:
                cond = f" {g.residual.condition}" if g.residual.condition else ""
                lines.append(f"  allow {g.instantiated}{cond}  ({_where(g.rule)})")
                for c in g.carve_outs:
                    cond = c.residual.shown
                    whole = " (all of it)" if c.covers else ""
                    lines.append(f"    except {c.instantiated}{whole}{cond}  ({_where(c.rule)})")
            if verbose:
                for e in a.excluded:
                    lines.append(f"  (not {e.pattern}: {e.why})  ({_where(e.rule)})")
        for tool, why in self.hidden:
            lines.append(f"{tool}: hidden: {why}")
        for tool in self.unknown:
            lines.append(f"{tool}: no requirement declares it: it is neither listed nor callable")
        return "\n".join(lines)


def _where(ref: RuleRef) -> str:
    return f"{ref.id} at {ref.file}:{ref.line}:{ref.col}"


def query(
    policy: PolicySet,
    context: Mapping[str, Any],
    *,
    actions: Sequence[str] = (),
    tools: Sequence[str] = (),
    run_policy: str | None = None,
) -> QueryResult:
    """What calls ``context`` could be allowed: for the ``tools`` named (else every tool
    a requirement declares), of the ``actions`` named (else any), under ``run_policy``."""
    from sharedos.policy.cases import run_policy_denial

    result = QueryResult(context, run_policy)
    names = list(dict.fromkeys(tools)) if tools else sorted(policy.requirements)
    groups: dict[tuple[Any, ...], Answer] = {}
    for name in names:
        t = policy.tool(name)
        if t is None:
            result.unknown.append(name)
            continue
        if actions and t.action not in actions:
            continue
        denial = run_policy_denial(policy, run_policy, name)
        if denial is not None:
            result.hidden.append((name, denial.detail))
            continue
        key = (t.namespace, t.action, t.absolute, t.shape)
        answer = groups.get(key)
        if answer is None:
            answer = groups[key] = _answer(policy, name, context)
        else:
            answer.tools.append(name)
    result.answers = list(groups.values())
    return result


def _answer(policy: PolicySet, tool: str, context: Mapping[str, Any]) -> Answer:
    t = policy.tool(tool)
    assert t is not None
    shape = Shape.of(policy.program["requirements"][tool]["resource"])
    listing = policy.explain_listing(tool, context)
    reasons = {r.rule.id: r for r in listing.permits}
    grants: list[Grant] = []
    excluded: list[Excluded] = []
    forbids = _Forbids(t.forbids, context, t.action)
    for rule in t.permits:
        reason = reasons.get(rule.id)
        if reason is not None and not reason.possible:
            excluded.append(Excluded(rule.ref, rule.pattern, reason.why))
            continue
        resolved = resolve(rule.pattern_enc, context)
        res = residual(rule.condition, rule.condition_kind, False, context, t.action)
        grant_pat = SegPattern.of(resolved)
        if res.applies == "never" or grant_pat is None:
            excluded.append(Excluded(rule.ref, rule.pattern, "it cannot apply in this context"))
            continue
        carve: list[CarveOut] = []
        for i in forbids.candidates(grant_pat):
            c = forbids.carve_out(i, grant_pat, resolved, shape, t.shape)
            if c is not None:
                carve.append(c)
        grants.append(
            Grant(
                rule.ref,
                rule.pattern,
                resolved_text(resolved),
                res,
                tuple(carve),
                rule.description,
            )
        )
    return Answer(
        [tool],
        t.namespace,
        t.action,
        t.requirement.resource,
        tuple(grants),
        tuple(excluded),
    )


class _Node:
    """A node of a trie of literal leading segments: the forbids whose literal lead ends
    here, its children, and (once asked) every forbid below it."""

    __slots__ = ("below", "children", "here")

    def __init__(self) -> None:
        self.here: list[int] = []
        self.children: dict[str, _Node] = {}
        self.below: list[int] | None = None

    def every_below(self) -> list[int]:
        if self.below is None:
            below: list[int] = []
            todo = list(self.children.values())
            while todo:  # no recursion: a pattern may have many literal segments
                node = todo.pop()
                below.extend(node.here)
                todo.extend(node.children.values())
            self.below = below
        return self.below


def _lead(pattern: SegPattern) -> list[str]:
    """The pattern's leading literal segments (up to its first wildcard segment)."""
    lead: list[str] = []
    for seg in pattern.segs:
        if seg[0] != "L":
            break
        lead.append(seg[1])
    return lead


class _Forbids:
    """A tool's forbids as one context resolves them, each worked out once (not once per
    permit), in a trie by their pattern's leading literal segments. A resource both a
    permit and a forbid match has, at each place before either pattern's first wildcard,
    the segment both name there: a forbid whose literal lead differs from the permit's
    at some place cannot overlap it and is never checked, so P permits and F forbids on
    distinct prefixes cost far less than P x F overlap checks."""

    def __init__(self, rules: Sequence[RuleRecord], context: Mapping[str, Any], action: str):
        #: per forbid that can apply here (program order): it, its residual and pattern
        self.prepared: list[tuple[RuleRecord, Residual, Any, SegPattern]] = []
        #: per kind of pattern (absolute or not): the forbids of that kind, by literal lead
        self._tries: dict[bool, _Node] = {True: _Node(), False: _Node()}
        #: per kind: the forbids of the other kind (never pruned)
        self._rest: dict[bool, list[int]] = {True: [], False: []}
        for forbid in rules:
            res = residual(forbid.condition, forbid.condition_kind, True, context, action)
            if res.applies == "never":
                continue
            fresolved = resolve(forbid.pattern_enc, context, forbid=True)
            fpat = SegPattern.of(fresolved)
            if fpat is None:
                continue
            i = len(self.prepared)
            self.prepared.append((forbid, res, fresolved, fpat))
            self._rest[not fpat.absolute].append(i)
            node = self._tries[fpat.absolute]
            for text in _lead(fpat):
                node = node.children.setdefault(text, _Node())
            node.here.append(i)

    def candidates(self, grant: SegPattern) -> list[int]:
        """The forbids (indexes, in program order) that may overlap ``grant``: those whose
        literal lead agrees with the grant's wherever both have one."""
        node = self._tries[grant.absolute]
        out = [*self._rest[grant.absolute], *node.here]
        for text in _lead(grant):
            child = node.children.get(text)
            if child is None:
                return sorted(out)
            node = child
            out.extend(node.here)
        out.extend(node.every_below())
        return sorted(out)

    def carve_out(
        self,
        i: int,
        grant_pat: SegPattern,
        grant_resolved: Any,
        shape: Shape,
        plan_shape: tuple[Any, ...],
    ) -> CarveOut | None:
        forbid, res, fresolved, fpat = self.prepared[i]
        if overlap(fpat, grant_pat, shape) is None:
            return None
        covers = covers_within(fresolved, grant_resolved, plan_shape)
        return CarveOut(forbid.ref, forbid.pattern, resolved_text(fresolved), res, covers)
