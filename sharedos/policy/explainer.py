"""The explainer: the decision path of one call, rule by rule (``sharedos-policy explain``).

It makes the evaluator's decision and then walks every rule of the call's
(namespace, action) to say whether the index reached it, whether its pattern
matched, what its condition gave, and so whether it applied. It is not on any
hot path: clarity over speed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sharedos.policy.conditions import Env, evaluate, trace, unparse
from sharedos.policy.decision import Explanation, RuleTrace
from sharedos.policy.evaluator import Evaluator
from sharedos.policy.index import walk_along
from sharedos.policy.ir import MatchKind, RuleRecord
from sharedos.policy.patterns import resolved_text


def explain(
    evaluator: Evaluator,
    tool: str,
    args: Mapping[str, Any],
    context: Mapping[str, Any],
    *,
    run_policy: str | None = None,
) -> Explanation:
    """The decision path of one call: requirement, canonical resource, every rule and why.

    With ``run_policy`` the call is first checked against that toolpolicy, as
    the kernel does (a tool outside its managed set reaches no rule).
    """
    from sharedos.policy.cases import run_policy_denial

    denial = run_policy_denial(evaluator, run_policy, tool)
    decision = denial or evaluator.decide(tool, args, context)
    t = evaluator.tool(tool)
    if t is None or denial is not None:
        req = t.requirement if t is not None else None
        return Explanation(str(tool), args, req, None, None, decision, (), context, run_policy)
    try:
        resource, segs = t.resolve(args)
    except Exception as exc:
        return Explanation(
            tool, args, t.requirement, None, str(exc), decision, (), context, run_policy
        )
    env: Env = (context, args, resource, t.action)
    node = walk_along(t.walk, segs)
    traces: list[RuleTrace] = []
    for every, forbid in ((t.forbids, True), (t.permits, False)):
        reached = {r.index for r in evaluator.node_rules(node, forbid)}
        for rule in every:
            traces.append(trace_rule(evaluator, rule, rule.index in reached, segs, env))
    approvals = evaluator.approvals
    if approvals is not None:
        for rule in approvals.rules_for(t.namespace, t.action, t.absolute):
            matched = approvals.pattern_matches(rule, resource, context)
            traces.append(
                trace_rule(
                    evaluator,
                    rule,
                    True,
                    segs,
                    env,
                    matched=matched,
                    approvers=approvals.approvers(rule.index),
                )
            )
    return Explanation(
        tool, args, t.requirement, resource, None, decision, tuple(traces), context, run_policy
    )


def condition_text(rule: RuleRecord) -> str | None:
    """A rule's condition as written: ``when A``, ``unless B`` or ``when A unless B``."""
    cond = rule.condition
    if cond is None:
        return None
    if rule.condition_kind == "when unless":
        return f"when {unparse(cond[1])} unless {unparse(cond[2][1])}"
    return f"{rule.condition_kind} {unparse(cond)}"


def condition_values(rule: RuleRecord, env: Env) -> tuple[tuple[int, str, str], ...]:
    """Each sub-expression of a rule's condition(s) and its value, as written."""
    cond = rule.condition
    if cond is None:
        return ()
    if rule.condition_kind != "when unless":
        found = trace(cond, env)
        return tuple((d, f"{rule.condition_kind} {e}" if d == 0 else e, v) for d, e, v in found)
    when, unless = cond[1], cond[2][1]
    first = trace(when, env)
    out = [(d, f"when {e}" if d == 0 else e, v) for d, e, v in first]
    if first and first[0][2] == "true":
        out += [(d, f"unless {e}" if d == 0 else e, v) for d, e, v in trace(unless, env)]
    else:
        out.append((0, f"unless {unparse(unless)}", "not evaluated"))
    return tuple(out)


def trace_rule(
    evaluator: Evaluator,
    rule: RuleRecord,
    indexed: bool,
    segs: list[str],
    env: Env,
    *,
    matched: bool | None = None,
    approvers: tuple[tuple[str, str], ...] = (),
) -> RuleTrace:
    """How one rule fared for one call (``indexed``: the index reached it; ``matched``:
    whether its pattern matched, when the caller knows, as for an approval rule)."""
    forbid = rule.forbid
    what = "approval rule" if rule.effect == "approval" else rule.effect
    cond_text = condition_text(rule)
    resolved = rule.resolve(env[0])
    instantiated = None
    if rule.match is MatchKind.CONTEXT:
        instantiated = resolved_text(resolved) if resolved.safe else "(unsafe context value)"
    if not indexed:
        matched = False
        why = "pattern does not match: its literal prefix differs from the resource"
    elif not resolved.safe:
        matched = False
        why = "pattern interpolates a missing or unsafe context value: the permit matches nothing"
    else:
        if matched is None:
            matched = evaluator.pattern_matches(rule, segs, env[0])
        why = "pattern matches" if matched else "pattern does not match"
    cond_result: bool | None = None
    applied = matched
    values: tuple[tuple[int, str, str], ...] = ()
    if matched and rule.condition is not None:
        values = condition_values(rule, env)
        value, error = evaluate(rule.condition, env)
        want = rule.condition_kind != "unless"
        if value is None:
            applied = forbid
            why += f"; condition errored ({error}): " + (
                f"the {what} applies (fail closed)" if forbid else "the permit does not apply"
            )
        else:
            cond_result = value
            applied = value is want
            why += f"; condition is {'true' if value else 'false'}"
            why += "" if applied else f", so the {what} does not apply"
    if approvers:
        who = " or ".join(f"{kind} {name!r}" for kind, name in approvers)
        why += f"; approvers: {who}"
    return RuleTrace(
        rule.ref,
        rule.pattern,
        cond_text,
        matched,
        cond_result,
        applied,
        why,
        instantiated,
        rule.description,
        values,
    )
