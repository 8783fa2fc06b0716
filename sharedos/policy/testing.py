"""Run a policy's own ``test`` blocks and measure rule coverage (``sharedos-policy test``).

Each test block names a context, a call (tool and arguments) and the expected
decision (``allow``/``deny`` and optionally a reason code). A test runs the
real compiled policy: ``PolicySet.explain``, which makes the same decision as
``decide`` and also reports every rule it considered.

The test's context is passed exactly as written (no defaults are filled in),
so a test can probe what happens when an attribute is missing.

Coverage: a rule is *exercised* when it applied in at least one test — its
pattern matched and its condition held (for a forbid, also when the condition
failed closed). The percentage is truncated, never rounded up: 99.995% is
reported as 99.99%, and 100% means every rule was exercised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sharedos.outcomes import ReasonCode
from sharedos.policy import ast
from sharedos.policy.context import complete_context
from sharedos.policy.decision import Decision, Explanation, RuleRef


@dataclass(frozen=True, slots=True)
class TestOutcome:
    """The result of one test block."""

    __test__ = False  # not a pytest test class

    name: str
    file: str
    line: int
    col: int
    tool: str
    expected_effect: str
    expected_reason: str | None
    passed: bool
    decision: Decision | None
    message: str  # why it failed ("" when it passed)
    applied: tuple[RuleRef, ...]  # rules that applied in this test's decision

    @property
    def location(self) -> str:
        """``file:line`` of the test block."""
        return f"{self.file}:{self.line}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "tool": self.tool,
            "expected": {"effect": self.expected_effect, "reason": self.expected_reason},
            "passed": self.passed,
            "decision": self.decision.to_dict() if self.decision is not None else None,
            "message": self.message,
            "applied_rules": [r.to_dict() for r in self.applied],
        }


@dataclass(frozen=True, slots=True)
class Coverage:
    """Which rules the tests exercised."""

    rules: tuple[RuleRef, ...]
    exercised: frozenset[RuleRef]

    @property
    def total(self) -> int:
        """Number of rules."""
        return len(self.rules)

    @property
    def covered(self) -> int:
        """Number of rules some test exercised."""
        return sum(1 for r in self.rules if r in self.exercised)

    @property
    def uncovered(self) -> tuple[RuleRef, ...]:
        """Rules no test exercised, in source order."""
        return tuple(r for r in self.rules if r not in self.exercised)

    @property
    def percent(self) -> str:
        """Coverage with two decimals, truncated (see ``coverage_percent``)."""
        return coverage_percent(self.covered, self.total)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "rules": self.total,
            "covered": self.covered,
            "percent": self.percent,
            "uncovered": [r.to_dict() for r in self.uncovered],
        }


@dataclass(frozen=True, slots=True)
class TestReport:
    """Every test outcome plus coverage."""

    __test__ = False  # not a pytest test class

    outcomes: tuple[TestOutcome, ...]
    coverage: Coverage

    @property
    def failed(self) -> tuple[TestOutcome, ...]:
        """The tests that failed."""
        return tuple(o for o in self.outcomes if not o.passed)

    @property
    def ok(self) -> bool:
        """True when every test passed."""
        return not self.failed

    def to_dict(self, *, with_coverage: bool = False) -> dict[str, Any]:
        """JSON-ready form (``coverage`` only when asked for)."""
        out: dict[str, Any] = {
            "tests": [o.to_dict() for o in self.outcomes],
            "total": len(self.outcomes),
            "passed": len(self.outcomes) - len(self.failed),
            "failed": len(self.failed),
        }
        if with_coverage:
            out["coverage"] = self.coverage.to_dict()
        return out


def coverage_percent(covered: int, total: int) -> str:
    """``covered/total`` as a percentage with two decimals, truncated toward zero.

    Integer arithmetic, so no float rounding can turn 99.999% into 100.00%.
    No rules at all is reported as ``100.00`` (nothing is left unexercised).
    """
    if total <= 0:
        return "100.00"
    hundredths = covered * 10000 // total
    return f"{hundredths // 100}.{hundredths % 100:02d}"


def run_test(policy: Any, test: ast.TestBlock) -> TestOutcome:
    """Run one test block against a compiled ``PolicySet``.

    The verdict is the core's (``sharedos.policy.cases.run_case``); the
    explanation of the same call adds which rules applied, for coverage.
    """
    from sharedos.policy.cases import run_case

    tool = test.tool or ""
    expected_effect = test.expect_effect or "allow"
    applied: tuple[RuleRef, ...] = ()
    try:
        case = run_case(policy, test)
        # A call refused by the test's run policy never reached the rules.
        reached_rules = case.decision is not None and case.decision.reason is not (
            ReasonCode.NOT_IN_RUN_POLICY
        )
        if test.tool is not None and reached_rules:
            explanation: Explanation = policy.explain(
                test.tool, test.args, complete_context(test.context)
            )
            applied = tuple(t.rule for t in explanation.rules if t.applied)
    # evaluation must not raise; if it does, this test fails and the run goes on
    except Exception as exc:
        return TestOutcome(
            test.name, test.span.file, test.span.line, test.span.col, tool, expected_effect,
            test.expect_reason, False, None, f"evaluation raised {type(exc).__name__}: {exc}", (),
        )  # fmt: skip
    message = ""
    if not case.passed:
        message = case.message
        decision = case.decision
        if decision is not None and decision.rule_ids:
            message += "; decided by " + ", ".join(
                f"{r.id} ({r.file}:{r.line})" for r in decision.rule_ids
            )
    return TestOutcome(
        test.name, test.span.file, test.span.line, test.span.col, tool, expected_effect,
        test.expect_reason, case.passed, case.decision, message, applied,
    )  # fmt: skip


def run_tests(policy: Any, tests: Sequence[ast.TestBlock] | None = None) -> TestReport:
    """Run ``tests`` (default: every test block compiled into ``policy``) and measure coverage."""
    blocks = tuple(policy.tests) if tests is None else tuple(tests)
    outcomes = tuple(run_test(policy, t) for t in blocks)
    exercised = frozenset(r for o in outcomes for r in o.applied)
    return TestReport(outcomes, Coverage(tuple(policy.rules), exercised))
