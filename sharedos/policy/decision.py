"""Value types a ``PolicySet`` hands out: decisions, rule references, requirements, explanations."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sharedos.outcomes import Effect, ReasonCode


@dataclass(frozen=True, slots=True)
class RuleRef:
    """Where a rule lives: its id (``@id`` or ``file:line``), position and effect
    (``approval`` for an approval rule)."""

    id: str
    file: str
    line: int
    col: int
    effect: Literal["permit", "forbid", "approval"]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "id": self.id,
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "effect": self.effect,
        }


#: One approver of an approval rule: ``("role", name)`` or ``("group", name)``.
Approver = tuple[str, str]


@dataclass(frozen=True, slots=True)
class ApprovalNeed:
    """Who must approve a call that needs approval: one entry per approval rule that applied.

    ``rules[i]`` may be satisfied by any approver of ``approvers[i]``; a call
    runs only with an approval by someone who satisfies every rule that
    applied (``satisfied_by``). ``permits`` are the permits that allow the call.
    """

    rules: tuple[RuleRef, ...]
    approvers: tuple[tuple[Approver, ...], ...]
    permits: tuple[RuleRef, ...] = ()

    def satisfied_by(self, roles: Any, groups: Any) -> bool:
        """True when someone with ``roles`` and ``groups`` may approve for every rule."""
        have = {("role", r) for r in roles if type(r) is str}
        have |= {("group", g) for g in groups if type(g) is str}
        return bool(self.approvers) and all(
            any((kind, name) in have for kind, name in entry) for entry in self.approvers
        )

    def describe(self) -> str:
        """``role "maintainer" or group "release" (rule main-needs-review)``, one per rule."""
        parts = []
        for ref, entry in zip(self.rules, self.approvers, strict=True):
            who = " or ".join(f"{kind} {name!r}" for kind, name in entry)
            parts.append(f"{who} ({ref.id})")
        return "; and ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "rules": [r.to_dict() for r in self.rules],
            "approvers": [[{"kind": k, "name": n} for k, n in entry] for entry in self.approvers],
            "permits": [r.to_dict() for r in self.permits],
        }


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer for one call: effect, a closed reason code and the rules that decided it.

    For ``approval_required`` (effect and reason), ``approval`` says which approval
    rules applied and who may approve; ``rule_ids`` lists those rules, then the
    permits that allow the call.
    """

    effect: Effect
    reason: ReasonCode
    tool: str
    namespace: str | None
    action: str | None
    resource: str | None
    rule_ids: tuple[RuleRef, ...]
    detail: str
    approval: ApprovalNeed | None = None

    @property
    def allowed(self) -> bool:
        """True when the effect is allow (never for a call that still needs approval)."""
        return self.effect is Effect.ALLOW

    @property
    def needs_approval(self) -> bool:
        """True when a permit allows the call but it runs only with an approval."""
        return self.effect is Effect.APPROVAL_REQUIRED

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (evidence records, ``eval`` output)."""
        out: dict[str, Any] = {
            "effect": self.effect.value,
            "reason": self.reason.value,
            "tool": self.tool,
            "namespace": self.namespace,
            "action": self.action,
            "resource": self.resource,
            "rule_ids": [r.to_dict() for r in self.rule_ids],
            "detail": self.detail,
        }
        if self.approval is not None:
            out["approval"] = self.approval.to_dict()
        return out


@dataclass(frozen=True, slots=True)
class SourceSpan:
    """file:line:col of a construct in policy source."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True, slots=True)
class Requirement:
    """A compiled requirement: which action a tool needs and how its resource is computed."""

    tool: str
    namespace: str
    action: str
    resource: str  # the resource expression as written, e.g. 'path(args.path)'
    span: SourceSpan


@dataclass(frozen=True, slots=True)
class RuleTrace:
    """How one rule fared in an explanation."""

    rule: RuleRef
    pattern: str
    condition: str | None  # 'when ...' / 'unless ...' as source text, or None
    pattern_matched: bool
    condition_result: bool | None  # None: no condition, or not evaluated, or errored
    applied: bool
    why: str
    #: the pattern with its ``{context.x}`` holes filled in (None: it has none)
    instantiated: str | None = None
    description: str | None = None
    #: (depth, sub-expression, what it evaluated to) of the condition, when evaluated
    values: tuple[tuple[int, str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PermitReason:
    """Why one permit could, or could not, make a tool callable for a context."""

    rule: RuleRef
    pattern: str
    possible: bool
    why: str


@dataclass(frozen=True, slots=True)
class ListingExplanation:
    """Whether a tool is listed for a context (``could_permit``) and why, permit by permit."""

    tool: str
    listed: bool
    reason: str
    permits: tuple[PermitReason, ...] = ()
    #: the approval rules of the tool's action: whether they could apply for this
    #: context (a listed tool whose calls may need approval is still listed)
    approvals: tuple[PermitReason, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "tool": self.tool,
            "listed": self.listed,
            "reason": self.reason,
            "approvals": [
                {
                    "rule": p.rule.to_dict(),
                    "pattern": p.pattern,
                    "possible": p.possible,
                    "why": p.why,
                }
                for p in self.approvals
            ],
            "permits": [
                {
                    "rule": p.rule.to_dict(),
                    "pattern": p.pattern,
                    "possible": p.possible,
                    "why": p.why,
                }
                for p in self.permits
            ],
        }

    def render(self) -> str:
        """Text form: the verdict, then each permit and why it can or cannot apply."""
        lines = [f"{'listed' if self.listed else 'hidden'} {self.tool}: {self.reason}"]
        for p in self.permits:
            mark = "could apply" if p.possible else "cannot apply"
            lines.append(
                f"    [{mark}] permit on {p.pattern!r} ({p.rule.id} at {p.rule.file}:{p.rule.line})"
            )
            lines.append(f"        {p.why}")
        for p in self.approvals:
            mark = "may need approval" if p.possible else "approval rule does not apply"
            lines.append(
                f"    [{mark}] require approval on {p.pattern!r} ({p.rule.id} at {p.rule.file}:{p.rule.line})"
            )
            lines.append(f"        {p.why}")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Explanation:
    """The decision path of one call, for ``sharedos-policy explain``."""

    tool: str
    args: Any
    requirement: Requirement | None
    resource: str | None
    resource_error: str | None
    decision: Decision
    rules: tuple[RuleTrace, ...] = field(default=())
    #: the context the rules read (a hand-written one after the kernel's defaults)
    context: Any = None
    #: the run policy the call was decided under, if any
    run_policy: str | None = None

    @property
    def winning_forbids(self) -> tuple[RuleRef, ...]:
        """The forbids that decided a FORBIDDEN decision (empty otherwise)."""
        return self.decision.rule_ids if self.decision.reason is ReasonCode.FORBIDDEN else ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        req = self.requirement
        return {
            "tool": self.tool,
            "context": self.context,
            "run_policy": self.run_policy,
            "requirement": None
            if req is None
            else {
                "tool": req.tool,
                "namespace": req.namespace,
                "action": req.action,
                "resource": req.resource,
                "at": str(req.span),
            },
            "resource": self.resource,
            "resource_error": self.resource_error,
            "decision": self.decision.to_dict(),
            "rules": [
                {
                    "rule": t.rule.to_dict(),
                    "pattern": t.pattern,
                    "condition": t.condition,
                    "pattern_matched": t.pattern_matched,
                    "condition_result": t.condition_result,
                    "applied": t.applied,
                    "why": t.why,
                    "instantiated": t.instantiated,
                    "description": t.description,
                    "values": [{"depth": d, "expr": e, "value": v} for d, e, v in t.values],
                }
                for t in self.rules
            ],
        }

    def render(self) -> str:
        """Text form: requirement, canonical resource, every rule considered, the verdict."""
        import json

        d = self.decision
        lines = [f"call {self.tool}"]
        if self.context is not None:
            shown = json.dumps(self.context, ensure_ascii=False, sort_keys=True, default=repr)
            lines.append(f"  context (after defaults): {shown}")
        if self.run_policy is not None:
            lines.append(f"  run policy: {self.run_policy}")
        req = self.requirement
        if req is None:
            lines.append("  requirement: none (the tool is neither listed nor callable)")
        else:
            lines.append(f"  requirement: {req.tool} at {req.span}")
            lines.append(
                f"    namespace {req.namespace}, action {req.action}, resource {req.resource}"
            )
            if d.reason is ReasonCode.NOT_IN_RUN_POLICY:
                lines.append("  not in the run policy's managed set: no rule is consulted")
            elif self.resource is not None:
                lines.append(f"  canonical resource: {self.resource}")
            else:
                lines.append(f"  canonical resource: unresolvable ({self.resource_error})")
        if self.rules:
            lines.append("  rules considered:")
            for t in self.rules:
                mark = "APPLIES" if t.applied else "skipped"
                cond = f" {t.condition}" if t.condition else ""
                what = "require approval" if t.rule.effect == "approval" else t.rule.effect
                lines.append(
                    f"    [{mark}] {what} on {t.pattern!r}{cond}  ({t.rule.id} at {t.rule.file}:{t.rule.line})"
                )
                if t.description:
                    lines.append(f"        description: {t.description}")
                if t.instantiated is not None:
                    lines.append(f"        pattern as instantiated: {t.instantiated!r}")
                lines.append(f"        {t.why}")
                for depth, expr, value in t.values:
                    lines.append(f"        {'  ' * depth}{expr}  => {value}")
        elif req is not None and self.resource is not None:
            lines.append("  rules considered: none govern this action")
        lines.append(f"  decision: {d.effect.value} ({d.reason.value}) - {d.detail}")
        if d.approval is not None:
            for ref, entry in zip(d.approval.rules, d.approval.approvers, strict=True):
                who = " or ".join(f"{kind} {name!r}" for kind, name in entry)
                lines.append(
                    f"  approval required by: {ref.id} at {ref.file}:{ref.line}:{ref.col}; "
                    f"who may approve: {who}"
                )
            for ref in d.approval.permits:
                lines.append(f"  permitted by: {ref.id} at {ref.file}:{ref.line}:{ref.col}")
        if d.reason is ReasonCode.FORBIDDEN:
            for ref in d.rule_ids:
                lines.append(f"  forbid won: {ref.id} at {ref.file}:{ref.line}:{ref.col}")
        elif d.effect is Effect.ALLOW:
            for ref in d.rule_ids:
                lines.append(f"  permitted by: {ref.id} at {ref.file}:{ref.line}:{ref.col}")
        return "\n".join(lines)


# The evaluator builds one ``Decision`` per distinct call (then reuses it) and one
# ``RuleRef`` per rule that decides one. A frozen dataclass's ``__init__`` sets each
# field through ``object.__setattr__``; these set the slots directly, half the
# time, with the same result (tests/policy/test_decide.py compares them).
_new = object.__new__
(
    _set_effect,
    _set_reason,
    _set_tool,
    _set_namespace,
    _set_action,
    _set_resource,
    _set_rule_ids,
    _set_detail,
    _set_approval,
) = (
    Decision.__dict__[name].__set__
    for name in (
        "effect",
        "reason",
        "tool",
        "namespace",
        "action",
        "resource",
        "rule_ids",
        "detail",
        "approval",
    )
)
_set_id, _set_file, _set_line, _set_col, _set_ref_effect = (
    RuleRef.__dict__[name].__set__ for name in ("id", "file", "line", "col", "effect")
)


def new_decision(
    effect: Effect,
    reason: ReasonCode,
    tool: str,
    namespace: str | None,
    action: str | None,
    resource: str | None,
    rule_ids: tuple[RuleRef, ...],
    detail: str,
) -> Decision:
    """``Decision(effect, reason, tool, namespace, action, resource, rule_ids, detail)``, built faster."""
    d: Decision = _new(Decision)
    _set_effect(d, effect)
    _set_reason(d, reason)
    _set_tool(d, tool)
    _set_namespace(d, namespace)
    _set_action(d, action)
    _set_resource(d, resource)
    _set_rule_ids(d, rule_ids)
    _set_detail(d, detail)
    _set_approval(d, None)
    return d


def new_rule_ref(
    id: str, file: str, line: int, col: int, effect: Literal["permit", "forbid", "approval"]
) -> RuleRef:
    """``RuleRef(id, file, line, col, effect)``, built faster."""
    r: RuleRef = _new(RuleRef)
    _set_id(r, id)
    _set_file(r, file)
    _set_line(r, line)
    _set_col(r, col)
    _set_ref_effect(r, effect)
    return r


def new_rule_refs(
    ids: Sequence[str],
    files: Sequence[str],
    lines: Sequence[int],
    cols: Sequence[int],
    effects: Sequence[Literal["permit", "forbid", "approval"]],
) -> list[RuleRef]:
    """``[RuleRef(*fields) for fields in zip(ids, files, lines, cols, effects)]``, built
    faster: each slot is set for every reference in one C-level pass (``map``)."""
    refs: list[RuleRef] = [_new(RuleRef) for _ in ids]
    for setter, column in (
        (_set_id, ids),
        (_set_file, files),
        (_set_line, lines),
        (_set_col, cols),
        (_set_ref_effect, effects),
    ):
        deque(map(setter, refs, column), maxlen=0)
    return refs
