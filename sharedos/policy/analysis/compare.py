"""Decide requests under two policies, keep the ones that decide differently, group them.

This is the reporting half of ``diff`` and of ``sharedos evidence replay``: give
``compare`` two policies and any iterable of ``Request``; it decides each under
both with the real evaluator (``decide_request``: the run policy first, as the
kernel does) and yields a ``Change`` for every request whose effect or reason
code differs. A replay, whose old side is the decision that was recorded,
gives ``Comparer.change`` both decisions instead (the old policy may be
unknown: ``Comparer(None, new)``).
``group_changes`` groups them by (tool, action, resource pattern, kind of
change) for a report, and ``groups_to_json``/``render_groups`` print them.

Kinds: ``widened`` (deny -> allow), ``narrowed`` (allow -> deny), ``reason
changed`` (still denied, for another reason: ``no_matching_permit`` ->
``forbidden``, a tool that became unavailable...). A call that needs an
approval under both is widened when someone may now approve it whose
approval did not let it run before, else narrowed when someone whose approval
did may not now. Which rule ids decided is
not a change: renaming or moving a rule changes ids, not decisions.

The *responsible* rules of a change are the deciding rules (of either side)
that the other policy does not have in the same form (effect, namespace,
pattern, condition); when every deciding rule exists on both sides (the change
comes from a rule that no longer applies, say), all deciding rules are given.
The group's pattern is the first responsible rule's pattern as written.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sharedos.outcomes import EFFECT_REACH, ReasonCode
from sharedos.policy.decision import Approver, Decision, RuleRef
from sharedos.policy.evaluator import Evaluator

ChangeKind = Literal["widened", "narrowed", "reason changed"]
#: Report order of the kinds.
KINDS: tuple[ChangeKind, ...] = ("widened", "narrowed", "reason changed")


@dataclass(frozen=True, slots=True)
class Request:
    """One call to decide: the raw tool name, its arguments, the context the rules read,
    and the run policy it is made under (None: none)."""

    tool: str
    args: Mapping[str, Any]
    context: Mapping[str, Any]
    run_policy: str | None = None
    #: where the request comes from, when it was recorded (an attempt's ``seq``,
    #: ``turn_id``, ``call_id``, ``started_at``): shown with it, decided by nothing
    origin: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out: dict[str, Any] = {"tool": self.tool, "args": self.args, "context": self.context}
        if self.run_policy is not None:
            out["policy"] = self.run_policy
        if self.origin is not None:
            out["recorded"] = dict(self.origin)
        return out

    def key(self) -> str:
        """A canonical text of the request (for de-duplication)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), default=repr)


def decide_request(policy: Evaluator, request: Request) -> Decision:
    """The decision the kernel would make, in the kernel's order: a tool no requirement
    declares is ``tool_unavailable`` (``decide`` says so) before the run policy is
    looked at, then ``not_in_run_policy``, then ``decide``."""
    from sharedos.policy.cases import run_policy_denial

    denial = run_policy_denial(policy, request.run_policy, request.tool)
    if denial is not None:
        return denial
    return policy.decide(request.tool, request.args, request.context)


def change_kind(old: Decision, new: Decision) -> ChangeKind | None:
    """How the decision changed (None: the same effect and reason).

    ``widened`` when the call can now go further (deny -> approval_required ->
    allow), ``narrowed`` when less far.
    """
    if old.effect is new.effect:
        if old.reason is not new.reason:
            return "reason changed"
        if old.approval is not None and new.approval is not None:
            # who may approve changed: an approval that let the call run before may not
            # now (narrowed), or one that did not may now (widened: someone the old
            # policy did not accept, or one approver where two rules each needed theirs)
            if _admits_more(new.approval.approvers, old.approval.approvers):
                return "widened"
            if _admits_more(old.approval.approvers, new.approval.approvers):
                return "narrowed"
        return None
    return "widened" if EFFECT_REACH[new.effect] > EFFECT_REACH[old.effect] else "narrowed"


#: approver combinations weighed one by one before ``_admits_more`` answers "yes" unseen
_MAX_APPROVER_SETS = 4096


def _admits_more(a: Sequence[Sequence[Approver]], b: Sequence[Sequence[Approver]]) -> bool:
    """True when some approver satisfies every rule of ``a`` but not every rule of ``b``
    (each rule: any one of its approvers; no rule at all: nobody can approve).

    An approver satisfying ``a`` holds one approver of each of its rules; a minimal
    such set that misses some rule of ``b`` is the witness."""
    if not a:
        return False
    if not b:
        return True
    for n, picked in enumerate(itertools.product(*a)):
        if n >= _MAX_APPROVER_SETS:
            return True  # too many to weigh: say it can differ rather than that it cannot
        have = set(picked)
        if not all(any(x in have for x in rule) for rule in b):
            return True
    return False


class RuleForms:
    """Every rule of a policy by id, and the set of their forms (what a rule means:
    effect, namespace, pattern, condition), built once per policy (None: a policy
    that is not known, such as the one a recorded decision was made under: no form)."""

    def __init__(self, policy: Evaluator | None) -> None:
        self.by_id: dict[str, tuple[Any, ...]] = {}
        records = [] if policy is None else [policy.rule(i) for i in range(policy.rule_count)]
        if policy is not None and policy.approvals is not None:
            records += policy.approvals.all_rules()
        for rule in records:
            cond = rule.condition
            text = None if cond is None else json.dumps(cond, sort_keys=True)
            self.by_id[rule.id] = (
                rule.effect,
                rule.namespace,
                rule.pattern,
                text,
                rule.condition_kind,
                getattr(rule, "approvers", ()),
            )
        self.forms = set(self.by_id.values())

    def pattern(self, rule_id: str) -> str | None:
        """The pattern of rule ``rule_id`` as written (None: no such rule)."""
        form = self.by_id.get(rule_id)
        return None if form is None else str(form[2])


@dataclass(frozen=True, slots=True)
class Change:
    """A request that decides differently: both decisions, the kind, the rules responsible
    (``(side, ref)`` with side ``old`` or ``new``) and the pattern it is grouped under."""

    request: Request
    old: Decision
    new: Decision
    kind: ChangeKind
    responsible: tuple[tuple[str, RuleRef], ...]
    pattern: str | None

    @property
    def action(self) -> str | None:
        """The action the tool needs (under the new policy, else the old)."""
        return self.new.action or self.old.action

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the request and both decisions."""
        return {
            **self.request.to_dict(),
            "old": decision_to_dict(self.old),
            "new": decision_to_dict(self.new),
        }


def decision_to_dict(d: Decision) -> dict[str, Any]:
    """A decision as a report shows it: effect, reason, resource, deciding rules."""
    return {
        "effect": d.effect.value,
        "reason": d.reason.value,
        "resource": d.resource,
        "rules": [r.to_dict() for r in d.rule_ids],
    }


class Comparer:
    """Decides requests under two policies and builds ``Change`` records (``old`` None:
    the old decisions are given to ``change``, and the old rules' forms are unknown)."""

    def __init__(self, old: Evaluator | None, new: Evaluator) -> None:
        self.old = old
        self.new = new
        self._forms: tuple[RuleForms, RuleForms] | None = None

    @property
    def forms(self) -> tuple[RuleForms, RuleForms]:
        """The rule forms of both policies (built on the first change)."""
        if self._forms is None:
            self._forms = (RuleForms(self.old), RuleForms(self.new))
        return self._forms

    def compare_one(self, request: Request) -> Change | None:
        """The change ``request`` shows, or None when both policies decide it alike."""
        assert self.old is not None, "compare_one needs the old policy"
        old = decide_request(self.old, request)
        new = decide_request(self.new, request)
        return self.change(request, old, new)

    def change(self, request: Request, old: Decision, new: Decision) -> Change | None:
        """The change between two decisions of ``request`` (None: the same effect and
        reason), with the rules responsible."""
        kind = change_kind(old, new)
        if kind is None:
            return None
        return self._change(request, old, new, kind)

    def _change(self, request: Request, old: Decision, new: Decision, kind: ChangeKind) -> Change:
        old_forms, new_forms = self.forms
        responsible: list[tuple[str, RuleRef]] = []
        for side, d, mine, other in (
            ("new", new, new_forms, old_forms),
            ("old", old, old_forms, new_forms),
        ):
            for ref in d.rule_ids:
                if mine.by_id.get(ref.id) not in other.forms:
                    responsible.append((side, ref))
        if not responsible:
            responsible = [("new", r) for r in new.rule_ids] + [("old", r) for r in old.rule_ids]
        pattern = None
        for side, ref in responsible:
            pattern = (new_forms if side == "new" else old_forms).pattern(ref.id)
            if pattern is not None or self.old is not None:
                break
            # a recorded rule of a policy that is not known: named by its id
            pattern = f"(rule {ref.id} of the recorded policy)"
            break
        return Change(request, old, new, kind, tuple(responsible), pattern)


def compare(old: Evaluator, new: Evaluator, requests: Iterable[Request]) -> Iterator[Change]:
    """Every request of ``requests`` that ``old`` and ``new`` decide differently, as a
    ``Change`` (each decided afresh by both real evaluators)."""
    comparer = Comparer(old, new)
    for request in requests:
        change = comparer.compare_one(request)
        if change is not None:
            yield change


@dataclass(slots=True)
class ChangeGroup:
    """The changes of one (tool, action, pattern, kind): how many, and the simplest few."""

    tool: str
    action: str | None
    pattern: str | None
    kind: ChangeKind
    count: int = 0
    examples: list[Change] = field(default_factory=list)
    #: every responsible rule seen in the group (side, ref), in first-seen order
    rules: dict[tuple[str, RuleRef], None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "tool": self.tool,
            "action": self.action,
            "pattern": self.pattern,
            "kind": self.kind,
            "count": self.count,
            "rules": [{"side": side, **ref.to_dict()} for side, ref in self.rules],
            "examples": [c.to_dict() for c in self.examples],
        }


def _variety(change: Change) -> tuple[Any, ...]:
    """What makes two examples of a group worth showing both: different reasons or rules
    on either side (requests that differ only in values no deciding rule tells apart
    say nothing new)."""
    return (
        change.old.reason,
        change.new.reason,
        tuple(r.id for r in change.old.rule_ids),
        tuple(r.id for r in change.new.rule_ids),
    )


def group_changes(changes: Iterable[Change], max_examples: int = 3) -> list[ChangeGroup]:
    """Group changes by (tool, action, pattern, kind); groups in report order (kind, tool,
    pattern). Each keeps the first ``max_examples`` changes that differ in reasons or
    deciding rules (``_variety``); with 0 it keeps every change."""
    groups: dict[tuple[Any, ...], ChangeGroup] = {}
    shown: dict[tuple[Any, ...], set[tuple[Any, ...]]] = {}
    for change in changes:
        key = (change.request.tool, change.action, change.pattern, change.kind)
        group = groups.get(key)
        if group is None:
            group = groups[key] = ChangeGroup(*key)
            shown[key] = set()
        group.count += 1
        for item in change.responsible:
            group.rules.setdefault(item, None)
        if max_examples:
            variety = _variety(change)
            if variety in shown[key] or len(group.examples) >= max_examples:
                continue
            shown[key].add(variety)
        group.examples.append(change)
    return sorted(
        groups.values(),
        key=lambda g: (KINDS.index(g.kind), g.tool, g.action or "", g.pattern or ""),
    )


def summary(groups: Sequence[ChangeGroup]) -> dict[str, int]:
    """How many groups and changes of each kind."""
    out: dict[str, int] = {"groups": len(groups), "changes": sum(g.count for g in groups)}
    for kind in KINDS:
        out[kind.replace(" ", "_")] = sum(g.count for g in groups if g.kind == kind)
    return out


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)


def _where(ref: RuleRef) -> str:
    """``id (file:line:col)``, or the id alone when its position is not known."""
    return f"{ref.id} ({ref.file}:{ref.line}:{ref.col})" if ref.file else ref.id


def _decision_line(d: Decision) -> str:
    text = f"{d.effect.value} {d.reason.value}"
    if d.rule_ids:
        verb = "by" if d.effect.value == "allow" or d.reason.value == "forbidden" else "with"
        text += f" {verb} " + ", ".join(_where(r) for r in d.rule_ids)
    return text


def _no_rule(group: ChangeGroup) -> str:
    """What a group no rule is responsible for is shown on: a run policy that refuses the
    call on one side (``not_in_run_policy``, before any rule), or the requirement."""
    run = [
        any(d.reason is ReasonCode.NOT_IN_RUN_POLICY for d in (c.old, c.new))
        for c in group.examples
    ]
    if run and all(run):
        return "(no rule: the run policy changed)"
    if any(run):
        return "(no rule: the run policy or the requirement changed)"
    return "(no rule: the requirement changed)"


def render_groups(groups: Sequence[ChangeGroup]) -> list[str]:
    """Text lines for a report: one header per group, then its example requests.

    Groups that differ only in the tool (the same action, pattern, kind and
    rules: the tools of one namespace that share an action) are printed as one,
    naming every tool, with the examples of the first."""
    merged: dict[tuple[Any, ...], list[ChangeGroup]] = {}
    for g in groups:
        key = (g.kind, g.action, g.pattern, tuple(g.rules))
        merged.setdefault(key, []).append(g)
    lines: list[str] = []
    for same in merged.values():
        g = same[0]
        tools = ", ".join(x.tool for x in same)
        count = sum(x.count for x in same)
        pattern = g.pattern if g.pattern is not None else _no_rule(g)
        plural = "s" if count != 1 else ""
        lines.append(
            f"{g.kind}: {tools} ({g.action or '-'}) on {pattern}  [{count} request{plural}]"
        )
        rules = ", ".join(f"{'+' if side == 'new' else '-'}{_where(ref)}" for side, ref in g.rules)
        if rules:
            lines.append(f"  rules: {rules}")
        for change in g.examples:
            req = change.request
            run = f" under {req.run_policy}" if req.run_policy is not None else ""
            origin = req.origin
            if origin is not None:
                run += (
                    f"  (attempt {origin.get('seq')} of turn {origin.get('turn_id')}"
                    f" at {origin.get('started_at')})"
                )
            lines.append(f"  - call {req.tool} {_show(req.args)}{run}")
            lines.append(f"    context {_show(req.context)}")
            lines.append(f"    old: {_decision_line(change.old)}")
            lines.append(f"    new: {_decision_line(change.new)}")
    return lines
