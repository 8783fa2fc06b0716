"""Evaluate ``test`` blocks against a PolicySet (the ``sharedos-policy test`` runner builds on this)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sharedos.outcomes import Effect, ReasonCode
from sharedos.policy import ast
from sharedos.policy.context import complete_context
from sharedos.policy.decision import Decision
from sharedos.policy.evaluator import Evaluator
from sharedos.policy.policyset import PolicySet

#: how a test's ``expect`` names each decision effect
EXPECTED_AS = {
    Effect.ALLOW: "allow",
    Effect.DENY: "deny",
    Effect.APPROVAL_REQUIRED: "approval",
}


@dataclass(frozen=True, slots=True)
class CaseResult:
    """The outcome of one test block: pass/fail, the decision, and a one-line message."""

    test: ast.TestBlock
    passed: bool
    decision: Decision | None
    message: str


def run_policy_denial(policy: Evaluator, run: str | None, tool: str) -> Decision | None:
    """The ``not_in_run_policy`` denial of ``tool`` under toolpolicy ``run``, if any.

    In the kernel's order (``Kernel.resolve``): a tool no requirement declares
    is ``tool_unavailable`` first (``decide`` says so: no denial here); then a
    tool outside the run's managed set is denied before any rule is consulted.
    ``run`` None means no run policy (no denial).
    """
    if run is None or tool not in policy.requirements:
        return None
    declared = policy.tool_policies.get(run)
    if declared is None:
        why = f"toolpolicy {run!r} is not declared"
    elif not declared.is_managed(tool):
        why = f"{tool} is not in the managed set of toolpolicy {run!r}"
    else:
        return None
    return Decision(Effect.DENY, ReasonCode.NOT_IN_RUN_POLICY, tool, None, None, None, (), why)


def decide_case(policy: PolicySet, test: ast.TestBlock) -> Decision | None:
    """The decision a test block's call gets; ``None`` when the test is incomplete.

    With ``policy NAME`` the call is first checked against that run policy
    (``run_policy_denial``).
    """
    if test.tool is None:
        return None
    denial = run_policy_denial(policy, test.policy, test.tool)
    if denial is not None:
        return denial
    decision = policy.decide(test.tool, test.args, complete_context(test.context))
    if test.approver is not None:
        return approved(decision, test.approver)
    return decision


def approved(decision: Decision, approver: Mapping[str, Any]) -> Decision:
    """``decision`` as it stands once ``approver`` (``{principal, roles, groups}``) said yes.

    A call that needs approval runs (allow) when the approver may give it for
    every approval rule that applied; otherwise, and for every other decision,
    nothing changes: an approval never turns a deny into an allow.
    """
    need = decision.approval
    if need is None or not decision.needs_approval:
        return decision
    roles = approver.get("roles") or ()
    groups = approver.get("groups") or ()
    if not isinstance(roles, list | tuple) or not isinstance(groups, list | tuple):
        return decision
    if not need.satisfied_by(roles, groups):
        return decision
    who = approver.get("principal")
    return replace(
        decision,
        effect=Effect.ALLOW,
        reason=ReasonCode.ALLOWED,
        detail=f"{decision.detail}; approved by {who!r}",
    )


def run_case(policy: PolicySet, test: ast.TestBlock) -> CaseResult:
    """Decide the test's call in the test's context and compare with its expectation."""
    decision = decide_case(policy, test)
    if decision is None or test.expect_effect is None:
        return CaseResult(
            test, False, None, f"test {test.name!r} is incomplete (needs call and expect)"
        )
    got = f"{EXPECTED_AS[decision.effect]} {decision.reason.value}"
    effect_ok = EXPECTED_AS[decision.effect] == test.expect_effect
    reason_ok = test.expect_reason is None or decision.reason.value == test.expect_reason
    want = test.expect_effect + (f" {test.expect_reason}" if test.expect_reason else "")
    if effect_ok and reason_ok:
        return CaseResult(test, True, decision, f"ok: {got}")
    return CaseResult(test, False, decision, f"expected {want}, got {got}: {decision.detail}")


def run_cases(policy: PolicySet) -> list[CaseResult]:
    """Run every test block of the policy's files, in file order."""
    return [run_case(policy, t) for t in policy.tests]
