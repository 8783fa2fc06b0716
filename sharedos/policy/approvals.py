"""Approval rules at decision time: a permit allows the call, does an approval rule apply?

``require approval by role "maintainer" for delete on "/srv/git/**" when ...``
compiles into the program's ``approvals`` section (``compiler``), apart from
the permits and forbids. A decision reads it only after the permits and
forbids allowed the call, so the order of precedence is the language's:

1. a forbid that applies wins (``forbidden``);
2. otherwise, if no permit applies: default deny (``no_matching_permit``) —
   an approval rule never grants;
3. otherwise, if an approval rule applies: ``approval_required`` (effect and
   reason), with who may approve (``ApprovalNeed``);
4. otherwise: ``allowed``.

An approval rule fails closed like a forbid: a condition that cannot be
evaluated makes it apply, and a ``{context.x}`` hole with a missing or unsafe
value matches any one segment. A policy with no approval rule never builds
this (``Evaluator`` decides exactly as before, with no extra call).

This module decides nothing about *whether* an approval was given: the kernel
(``sharedos.approvals``) holds approvals, binds each to one exact call and
consumes it once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sharedos.outcomes import Effect, ReasonCode
from sharedos.policy.decision import ApprovalNeed, Approver, Decision, RuleRef
from sharedos.policy.ir import MalformedProgram, RuleRecord, RuleTable
from sharedos.policy.patterns import (
    PatternSyntaxError,
    match_key,
    parse_pattern,
    resolve,
    to_regex,
)

if TYPE_CHECKING:
    from sharedos.policy.conditions import Env
    from sharedos.policy.ir import ToolPlan

__all__ = ["APPROVER_KINDS", "ApprovalRules"]

#: who may approve: a role of the approver's, or a group the host resolves
APPROVER_KINDS = ("role", "group")


class ApprovalRecord(RuleRecord):
    """An approval rule decoded: a ``RuleRecord`` (stored as a forbid, so that it fails
    closed) whose effect is ``approval``, with who may approve."""

    __slots__ = ("approvers",)

    approvers: tuple[Approver, ...]

    @classmethod
    def of(cls, record: RuleRecord, approvers: tuple[Approver, ...], memo: Any) -> ApprovalRecord:
        """``record`` (from the approvals table) as an approval rule."""
        made = cls.__new__(cls)
        for name in RuleRecord.__slots__:
            if name.startswith("__"):
                continue
            try:
                setattr(made, name, getattr(record, name))
            except AttributeError:
                continue
        ref = record.ref
        made.ref = RuleRef(ref.id, ref.file, ref.line, ref.col, "approval")
        made.effect = "approval"
        made.approvers = approvers
        if made.has_condition:
            made.compile_condition(memo)  # its own closure (few rules: compiled at once)
        return made


class ApprovalRules:
    """The program's approval rules, checked once at load (``MalformedProgram`` otherwise).

    ``index[ns][action]`` is ``[absolute positions, relative positions]``.
    """

    __slots__ = ("_approvers", "_index", "_records", "_regex", "_table")

    def __init__(self, section: Any) -> None:
        if type(section) is not dict:
            raise MalformedProgram("approvals is not a mapping")
        self._table = RuleTable(section.get("rules"))
        n = self._table.n
        approvers = section.get("approvers")
        if type(approvers) is not list or len(approvers) != n:
            raise MalformedProgram(f"approvals: approvers is not a list of {n} entries")
        parsed: list[tuple[Approver, ...]] = []
        for entry in approvers:
            if type(entry) is not list or not entry:
                raise MalformedProgram("approvals: a rule with no approvers")
            one: list[Approver] = []
            for item in entry:
                if (
                    type(item) is not list
                    or len(item) != 2
                    or item[0] not in APPROVER_KINDS
                    or type(item[1]) is not str
                    or not item[1]
                ):
                    raise MalformedProgram("approvals: a malformed approver")
                one.append((item[0], item[1]))
            parsed.append(tuple(one))
        self._approvers = tuple(parsed)
        index = section.get("index")
        if type(index) is not dict:
            raise MalformedProgram("approvals: index is not a mapping")
        for actions in index.values():
            if type(actions) is not dict:
                raise MalformedProgram("approvals: index is not a mapping of actions")
            for sides in actions.values():
                if type(sides) is not list or len(sides) != 2:
                    raise MalformedProgram("approvals: an index entry is not [absolute, relative]")
                for side in sides:
                    if type(side) is not list or not all(
                        type(i) is int and 0 <= i < n for i in side
                    ):
                        raise MalformedProgram("approvals: an index entry names no rule")
        self._index: Mapping[str, Mapping[str, list[list[int]]]] = index
        self._records: list[ApprovalRecord | None] = [None] * n
        #: a static pattern's compiled regex (None: it interpolates the context)
        self._regex: list[re.Pattern[str] | bool | None] = [False] * n

    @property
    def count(self) -> int:
        """How many approval rules the program has."""
        return self._table.n

    def rule(self, index: int) -> ApprovalRecord:
        """Approval rule ``index``, decoded on first use (its ref's effect is ``approval``)."""
        record = self._records[index]
        if record is None:
            record = ApprovalRecord.of(
                self._table.record(index), self._approvers[index], self._table.memo
            )
            self._records[index] = record
        return record

    def approvers(self, index: int) -> tuple[Approver, ...]:
        """Who may approve for approval rule ``index`` (any one of them)."""
        return self._approvers[index]

    def rules_for(self, namespace: str, action: str, absolute: bool) -> tuple[ApprovalRecord, ...]:
        """The approval rules of one (namespace, action) over absolute or relative resources."""
        sides = self._index.get(namespace, {}).get(action)
        if not sides:
            return ()
        return tuple(self.rule(i) for i in sides[0 if absolute else 1])

    def all_rules(self) -> tuple[ApprovalRecord, ...]:
        """Every approval rule, in program order."""
        return tuple(self.rule(i) for i in range(self._table.n))

    def pattern_matches(self, rule: RuleRecord, resource: str, context: Any) -> bool:
        """Does the rule's pattern match the canonical ``resource`` in ``context``?

        Failing closed: a ``{context.x}`` with a missing or unsafe value matches
        any one segment there (as in a forbid).
        """
        compiled = self._regex[rule.index]
        if compiled is False:
            compiled = None
            try:
                penc = parse_pattern(rule.pattern)
            except PatternSyntaxError:
                penc = {"abs": resource.startswith("/"), "segs": [["D"]]}  # tampered: applies
            if not any(seg[0] == "G" for seg in penc["segs"]):
                compiled = re.compile(to_regex(resolve(penc, {}, forbid=True)))
            self._regex[rule.index] = compiled
        if compiled is None:
            try:
                penc = parse_pattern(rule.pattern)
            except PatternSyntaxError:
                return True
            resolved = resolve(penc, context, forbid=True)
            compiled = re.compile(to_regex(resolved))
        return compiled.fullmatch(match_key(resource)) is not None  # type: ignore[union-attr]

    def applying(
        self, t: ToolPlan, resource: str, args: Mapping[str, Any], context: Mapping[str, Any]
    ) -> list[RuleRecord]:
        """The approval rules that apply to this call (pattern and condition)."""
        rules = self.rules_for(t.namespace, t.action, resource.startswith("/"))
        if not rules:
            return []
        env: Env = (context, args, resource, t.action)
        hits: list[RuleRecord] = []
        for rule in rules:
            if not self.pattern_matches(rule, resource, context):
                continue
            applies = rule.applies
            if applies is None or applies(env):
                hits.append(rule)
        return hits

    def check(
        self,
        decision: Decision,
        t: ToolPlan,
        args: Mapping[str, Any],
        context: Mapping[str, Any],
    ) -> Decision:
        """``decision`` (an allow) as it stands, or ``approval_required`` when a rule applies."""
        resource = decision.resource
        if resource is None:
            return decision
        hits = self.applying(t, resource, args, context)
        if not hits:
            return decision
        return self.need(decision, hits)

    def need(self, decision: Decision, hits: Sequence[RuleRecord]) -> Decision:
        """The ``approval_required`` decision for an allow and the approval rules that applied."""
        refs = tuple(r.ref for r in hits)
        need = ApprovalNeed(
            refs, tuple(self._approvers[r.index] for r in hits), tuple(decision.rule_ids)
        )
        detail = (
            f"{decision.action} on {decision.resource} is permitted by "
            f"{', '.join(r.id for r in decision.rule_ids)} and needs an approval by "
            f"{need.describe()}"
        )
        return Decision(
            Effect.APPROVAL_REQUIRED,
            ReasonCode.APPROVAL_REQUIRED,
            decision.tool,
            decision.namespace,
            decision.action,
            decision.resource,
            refs + tuple(decision.rule_ids),
            detail,
            need,
        )
