"""The partial evaluator: ``could_permit`` (could any call of this tool be allowed for this context?).

Arguments and resource are unknown, the context is known. A permit counts
when its condition can hold for some arguments (``partial``) and its pattern
can meet the tool's resource shape; it is cancelled only by forbids that apply
whatever the arguments and whose patterns cover every resource the permit
could match. Forbids and permits that test the same argument are reasoned
about jointly (``partial.JointSpace``).

The answer depends on a tool only through its requirement's (namespace,
action, resource shape): everything that does not read the context is worked
out once per such triple (a ``Plan``); the rest is cached per ``context_key``
under the plan.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sharedos.policy.conditions import Env, roots
from sharedos.policy.decision import ListingExplanation, PermitReason
from sharedos.policy.evaluator import ContextEntry, Evaluator
from sharedos.policy.explainer import condition_text
from sharedos.policy.index import walk_along
from sharedos.policy.ir import MatchKind, RuleRecord, ToolPlan
from sharedos.policy.partial import (
    MAX_JOINT_CASES,
    JointSpace,
    forbid_certain,
    permit_possible,
    rule_applies_under,
)
from sharedos.policy.patterns import Resolved, covers_within, literal_prefix, meets_shape, resolve


@dataclass(frozen=True, slots=True)
class ForbidStep:
    """A forbid that may cover a permit; ``pattern`` is None when it interpolates the context."""

    rule: RuleRecord
    pattern: Resolved | None


@dataclass(frozen=True, slots=True)
class PermitStep:
    """One permit of a plan, with its resolved pattern (None: it interpolates the context)
    and the forbids that may cover it (only for a static pattern; else found per context)."""

    rule: RuleRecord
    pattern: Resolved | None
    forbids: tuple[ForbidStep, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """The context-dependent part of ``could_permit`` for one (namespace, action, shape)."""

    tool: ToolPlan
    memo_key: tuple[str, int]
    steps: tuple[PermitStep, ...]


class PartialEvaluator:
    """``could_permit`` over an ``Evaluator``'s program (its caches are shared)."""

    def __init__(self, evaluator: Evaluator) -> None:
        self._ev = evaluator
        self._plans: dict[str, Plan | bool] = {}
        self._plans_by_shape: dict[tuple[Any, ...], Plan | bool] = {}
        self._sigs: dict[tuple[Any, ...], int] = {}
        self._porder: dict[str, list[RuleRecord]] = {}
        # per rule: how many plans resolve its (context-dependent) pattern
        self._dyn_uses: dict[int, int] = {}

    def could_permit(
        self, tool: str, context: Mapping[str, Any], *, context_key: str | None = None
    ) -> bool:
        """True iff some arguments exist for which ``decide`` allows ``tool`` in ``context``."""
        plan = self._plans.get(tool) if type(tool) is str else None
        if plan is None:
            t = self._ev.tool(tool)
            if t is None:
                return False
            plan = self.plan(t)
        if plan is True or plan is False:
            return plan  # the same for every context
        cache = self._ev.cache_for(context_key)
        if cache is not None:
            hit = cache.memo.get(plan.memo_key)
            if hit is not None:
                return bool(hit)
        result = self._possible(plan, context, cache)
        if cache is not None:
            cache.memo[plan.memo_key] = result
        return result

    def plan(self, t: ToolPlan) -> Plan | bool:
        """The context-independent part of ``could_permit`` for ``t``'s (namespace,
        action, shape): True or False when no context can change the answer, else a
        ``Plan``. A static forbid pattern that cannot cover a static permit pattern
        is dropped here, once."""
        key = ("could", t.namespace, t.action, t.shape)
        plan = self._plans_by_shape.get(key)
        if plan is None:
            plan = self._plans_by_shape[key] = self._build_plan(t)
        self._plans[t.name] = plan
        return plan

    def permit_order(self, t: ToolPlan) -> list[RuleRecord]:
        """The tool's permits, unconditional ones first (they answer soonest)."""
        order = self._porder.get(t.name)
        if order is None:
            plain = [r for r in t.permits if not r.has_condition]
            gated = [r for r in t.permits if r.has_condition]
            order = self._porder[t.name] = plain + gated
        return order

    def _build_plan(self, t: ToolPlan) -> Plan | bool:
        template = t.shape[0] != "path"
        steps: list[PermitStep] = []
        resolved: dict[int, Any] = {}
        for rule in self.permit_order(t):
            if _context_dependent(rule):
                self._dyn_uses[rule.index] = self._dyn_uses.get(rule.index, 0) + 1
                steps.append(PermitStep(rule, None, ()))
                continue
            pat = resolve(rule.pattern_enc, None)
            if not meets_shape(pat, t.shape):
                continue  # whatever the context, this permit never meets the resource
            candidates = t.forbids if template else forbids_along(self._ev, t, literal_prefix(pat))
            fsteps: list[ForbidStep] = []
            for forbid in candidates:
                if _context_dependent(forbid):
                    fsteps.append(ForbidStep(forbid, None))
                    continue
                # a forbid on a shared prefix is weighed against every permit below it:
                # its pattern resolved once per plan, not once per permit
                fpat = resolved.get(forbid.index)
                if fpat is None:
                    fpat = resolved[forbid.index] = resolve(forbid.pattern_enc, None, forbid=True)
                if covers_within(fpat, pat, t.shape):
                    fsteps.append(ForbidStep(forbid, fpat))
            if rule.applies is None and not fsteps:
                # An unconditional permit no forbid can cover: a witness for
                # every context (could_permit is an "exists" over permits).
                return True
            steps.append(PermitStep(rule, pat, tuple(fsteps)))
        if not steps:
            return False
        # Tools whose plans consider the same rules under the same shape get
        # the same answer, whatever their action, unless a condition reads
        # ``action``: share one memo entry per context between them.
        dynamic = any(step.pattern is None for step in steps)
        # each rule once (a forbid on a shared prefix is in the steps of every permit below it)
        involved = {step.rule.index: step.rule for step in steps}
        involved.update((f.rule.index, f.rule) for step in steps for f in step.forbids)
        forbid_set = tuple(r.index for r in t.forbids) if dynamic else None
        if forbid_set is not None:
            involved.update((i, self._ev.rule(i)) for i in forbid_set)
        # decoded afresh, not kept: a prepared policy holds no condition it never weighs
        reads_action = any(
            (cond := r.decode_condition()) is not None and "action" in roots(cond)
            for r in involved.values()
        )
        sig = (
            t.shape,
            tuple((step.rule.index, tuple(f.rule.index for f in step.forbids)) for step in steps),
            forbid_set,
            t.action if reads_action else None,
        )
        sig_id = self._sigs.setdefault(sig, len(self._sigs))
        return Plan(t, ("could", sig_id), tuple(steps))

    def _possible(self, plan: Plan, context: Any, cache: ContextEntry | None) -> bool:
        t = plan.tool
        action = t.action
        env: Env = (context, None, None, action)
        # What depends only on the context (resolved patterns, a forbid's
        # certainty per action) is kept in the context's memo, so the tools of
        # a first-seen context share it; without a context key, for this call.
        memo: dict[Any, Any] = cache.memo if cache is not None else {}
        template = t.shape[0] != "path"
        shape = t.shape
        # The forbid that last covered a permit of this namespace and action (for this
        # context and shape) is tried first: one this context meets whatever it asks
        # ('forbid * on "/**" when "suspended" in context.roles') covers every permit,
        # and finding it at the end of each permit's forbids made a listing weigh every
        # permit against every forbid. A forbid certain to apply whose pattern covers
        # the permit's is one its own list holds (a covering forbid's literal prefix is
        # a prefix of the permit's), so which one is found first changes nothing.
        win_key = ("won", t.namespace, action, shape)
        won = memo.get(win_key)
        for step in plan.steps:
            rule = step.rule
            pat = step.pattern
            if pat is not None and won is not None and covers_within(won, pat, shape):
                continue
            if not self._permit_possible(rule, env, cache):
                continue
            fsteps: Sequence[ForbidStep] = step.forbids
            static_permit = pat is not None
            if pat is None:
                # The permit interpolates the context: resolve it and find the
                # forbids along its (context-filled) literal prefix now.
                if self._dyn_uses.get(rule.index, 0) > 1:  # several plans: once per context
                    pk = ("p", rule.index)
                    pat = memo.get(pk)
                    if pat is None:
                        pat = memo[pk] = resolve(rule.pattern_enc, context)
                else:
                    pat = resolve(rule.pattern_enc, context)
                if not meets_shape(pat, shape):
                    continue
                if won is not None and covers_within(won, pat, shape):
                    continue
                candidates = (
                    t.forbids if template else forbids_along(self._ev, t, literal_prefix(pat))
                )
                fsteps = [ForbidStep(f, None) for f in candidates]
            covered = False
            uncertain: list[RuleRecord] = []
            for fstep in fsteps:
                forbid = fstep.rule
                fk = ("f", forbid.index, action)
                info = memo.get(fk)
                if info is None:
                    info = memo[fk] = (
                        self._forbid_certain(forbid, env, cache),
                        fstep.pattern
                        if fstep.pattern is not None
                        else resolve(forbid.pattern_enc, context, forbid=True),
                    )
                certain, fpat = info
                # A static forbid kept in a static permit's plan is known to cover it.
                if not (static_permit and fstep.pattern is not None) and not covers_within(
                    fpat, pat, shape
                ):
                    continue
                if certain:
                    covered = True
                    won = memo[win_key] = fpat
                    break
                uncertain.append(forbid)
            if covered:
                continue
            # A condition reading arguments is weighed jointly, even alone: its
            # atoms may exclude each other ('when A unless A').
            plain = rule.applies is None or rule.context_only
            if (plain and not uncertain) or _jointly_possible(rule, uncertain, action, context):
                return True
        return False

    def explain(self, tool: str, context: Mapping[str, Any]) -> ListingExplanation:
        """Why ``tool`` is (or is not) listed for ``context``, permit by permit.

        The verdict is ``could_permit``'s; the reasons re-derive it without the
        plan's shortcuts, for a person reading them.
        """
        t = self._ev.tool(tool)
        if t is None:
            return ListingExplanation(
                str(tool), False, "no requirement declares it: it is neither listed nor callable"
            )
        listed = self.could_permit(tool, context)
        env: Env = (context, None, None, t.action)
        reasons = tuple(self._permit_reason(t, rule, env, context) for rule in self.permit_order(t))
        if listed:
            summary = "some call could be permitted"
        elif not reasons:
            summary = f"no permit governs action {t.action!r} of namespace {t.namespace!r}"
        else:
            summary = "no permit could allow any call for this context"
        approvals = self._approval_reasons(t, env)
        if listed and any(a.possible for a in approvals):
            summary += "; some calls may need approval"
        return ListingExplanation(tool, listed, summary, reasons, approvals)

    def _approval_reasons(self, t: ToolPlan, env: Env) -> tuple[PermitReason, ...]:
        """The approval rules of the tool's action, and whether they could apply here.

        They never hide a tool: a call that needs approval is still a call a
        permit allows, so the tool is listed and each such call is asked about.
        """
        approvals = self._ev.approvals
        if approvals is None:
            return ()
        out = []
        for rule in approvals.rules_for(t.namespace, t.action, t.absolute):
            who = " or ".join(f"{k} {n!r}" for k, n in approvals.approvers(rule.index))
            possible = True
            why = f"a call on a resource its pattern matches needs an approval by {who}"
            if rule.applies is not None and rule.context_only:
                try:
                    possible = bool(rule.applies(env))
                except Exception:
                    possible = True  # fails closed: it may apply
                if not possible:
                    why = f"its condition ({condition_text(rule)}) is false for this context"
            elif rule.applies is not None:
                why += f" ({condition_text(rule)})"
            out.append(PermitReason(rule.ref, rule.pattern, possible, why))
        return tuple(out)

    def _permit_reason(self, t: ToolPlan, rule: RuleRecord, env: Env, context: Any) -> PermitReason:
        def say(possible: bool, why: str) -> PermitReason:
            return PermitReason(rule.ref, rule.pattern, possible, why)

        if not self._permit_possible(rule, env, None):
            return say(
                False, f"its condition ({condition_text(rule)}) cannot hold for this context"
            )
        pat = resolve(rule.pattern_enc, context)
        if not pat.safe:
            return say(False, "its pattern interpolates a missing or unsafe context value")
        if not meets_shape(pat, t.shape):
            return say(False, f"its pattern can never match the resource {t.requirement.resource}")
        segs = [] if t.shape[0] != "path" else literal_prefix(pat)
        candidates = t.forbids if t.shape[0] != "path" else forbids_along(self._ev, t, segs)
        uncertain: list[RuleRecord] = []
        for forbid in candidates:
            fpat = resolve(forbid.pattern_enc, context, forbid=True)
            if not covers_within(fpat, pat, t.shape):
                continue
            if self._forbid_certain(forbid, env, None):
                return say(
                    False,
                    f"every resource it could allow is forbidden by {forbid.id} "
                    f"({forbid.ref.file}:{forbid.ref.line}), whatever the arguments",
                )
            uncertain.append(forbid)
        plain = rule.applies is None or rule.context_only
        if (uncertain or not plain) and not _jointly_possible(rule, uncertain, t.action, context):
            ids = ", ".join(f.id for f in uncertain)
            if not ids:
                return say(False, "no arguments can satisfy its condition")
            return say(False, f"the forbids {ids} exclude every call its condition allows")
        return say(True, "some call could match its pattern and condition")

    def _permit_possible(self, rule: RuleRecord, env: Env, cache: ContextEntry | None) -> bool:
        if rule.applies is None:
            return True
        if rule.context_only:  # exactly what decide computes (and caches)
            return self._ev.context_holds(rule, env, cache)
        return permit_possible(rule.condition, rule.condition_kind, env[0], env[3])

    def _forbid_certain(self, rule: RuleRecord, env: Env, cache: ContextEntry | None) -> bool:
        if rule.applies is None:
            return True
        if rule.context_only:  # applies (or fails closed) whatever the arguments
            return self._ev.context_holds(rule, env, cache)
        return forbid_certain(rule.condition, rule.condition_kind, env[0], env[3])


def forbids_along(ev: Evaluator, t: ToolPlan, segs: Sequence[str]) -> Iterator[RuleRecord]:
    """The forbids of ``t`` whose literal prefix is a prefix of ``segs``."""
    return iter(ev.node_rules(walk_along(t.walk, segs), True))


def _context_dependent(rule: RuleRecord) -> bool:
    return rule.match is MatchKind.CONTEXT


def _jointly_possible(
    permit: RuleRecord, forbids: list[RuleRecord], action: str, context: Any
) -> bool:
    """Is there a choice of arguments under which the permit applies and none of
    the (pattern-covering) forbids does? See ``partial.JointSpace``."""
    space = JointSpace(context, action)
    for rule in (permit, *forbids):
        space.add(rule.condition)
    if space.size() > MAX_JOINT_CASES:
        return True  # too many to enumerate: per-condition reasoning already said possible
    for assign in space.cases():
        if not rule_applies_under(
            permit.condition, permit.condition_kind, False, context, action, assign
        ):
            continue
        if not any(
            rule_applies_under(f.condition, f.condition_kind, True, context, action, assign)
            for f in forbids
        ):
            return True
    return False
