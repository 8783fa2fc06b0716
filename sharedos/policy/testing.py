"""Run a policy's own ``test`` blocks and measure rule coverage (``sharedos-policy test``).

Each test block names a context, a call (tool and arguments) and the expected
decision (``allow``/``deny`` and optionally a reason code). A test is
*decided*, as the kernel decides (``cases.run_case``); only a failing test is
explained (``PolicySet.explain``), so a run costs one indexed decision per
test, not a walk of every rule.

The test's context gets the kernel's defaults for the keys it leaves out
(``context.complete_context``), so it decides as the kernel would for the same
person.

Coverage: a rule is *exercised* when it applied in at least one test's call
-- its pattern matched and its condition held (for a forbid, also when the
condition failed closed), a permit overridden by a forbid included. The
percentage is truncated, never rounded up: 99.995% is reported as 99.99%, and
100% means every rule was exercised. Branch coverage (``branches``) also
reports each ``when``/``unless`` condition and ``or`` term the tests never
decided both ways.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape as _escape
from xml.sax.saxutils import quoteattr as _quoteattr

from sharedos.outcomes import ReasonCode
from sharedos.policy import ast
from sharedos.policy.context import complete_context
from sharedos.policy.decision import Decision, RuleRef

if TYPE_CHECKING:
    from sharedos.policy.branches import BranchCoverage


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
    applied: tuple[RuleRef, ...]  # rules that applied in this test's call
    skipped: bool = False
    #: the explanation of a failing test's call (the decision path), else ""
    trace: str = ""

    @property
    def location(self) -> str:
        """``file:line`` of the test block."""
        return f"{self.file}:{self.line}"

    @property
    def status(self) -> str:
        """``PASS``, ``FAIL`` or ``SKIP``."""
        return "SKIP" if self.skipped else "PASS" if self.passed else "FAIL"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "tool": self.tool,
            "expected": {"effect": self.expected_effect, "reason": self.expected_reason},
            "status": self.status.lower(),
            "passed": self.passed,
            "skipped": self.skipped,
            "decision": self.decision.to_dict() if self.decision is not None else None,
            "message": self.message,
            "trace": self.trace,
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

    def meets(self, threshold: float) -> bool:
        """True when coverage is at least ``threshold`` percent (exact integer arithmetic)."""
        if self.total == 0:
            return True
        return self.covered * 100 >= threshold * self.total

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
    #: condition outcomes decided (``branches``), when asked for
    branches: BranchCoverage | None = None

    @property
    def failed(self) -> tuple[TestOutcome, ...]:
        """The tests that failed."""
        return tuple(o for o in self.outcomes if not o.passed and not o.skipped)

    @property
    def skipped(self) -> tuple[TestOutcome, ...]:
        """The tests that were skipped."""
        return tuple(o for o in self.outcomes if o.skipped)

    @property
    def ok(self) -> bool:
        """True when every test that ran passed."""
        return not self.failed

    def to_dict(self, *, with_coverage: bool = False) -> dict[str, Any]:
        """JSON-ready form (``coverage`` only when asked for)."""
        out: dict[str, Any] = {
            "tests": [o.to_dict() for o in self.outcomes],
            "total": len(self.outcomes),
            "passed": len(self.outcomes) - len(self.failed) - len(self.skipped),
            "failed": len(self.failed),
            "skipped": len(self.skipped),
        }
        if with_coverage:
            out["coverage"] = self.coverage.to_dict()
            if self.branches is not None:
                out["coverage"]["branches"] = self.branches.to_dict()
        return out

    def junit_xml(self, suite: str = "sharedos-policy") -> str:
        """The report as JUnit XML (one ``testcase`` per test block, classname = file).

        Text XML 1.0 cannot hold (a control character or U+FFFE in a test's name,
        a lone surrogate in a file name) is spelled as an escape, so the document
        always parses."""

        def quoteattr(text: str) -> str:
            return _quoteattr(_xml_text(text))

        def escape(text: str) -> str:
            return _escape(_xml_text(text))

        lines = [
            '<?xml version="1.0" encoding="UTF-8"?>',
            f'<testsuite name={quoteattr(suite)} tests="{len(self.outcomes)}" '
            f'failures="{len(self.failed)}" errors="0" skipped="{len(self.skipped)}">',
        ]
        for o in self.outcomes:
            head = f'  <testcase classname={quoteattr(o.file)} name={quoteattr(o.name)} line="{o.line}"'
            if o.skipped:
                lines.append(head + ">")
                lines.append(f"    <skipped message={quoteattr(o.message or 'skipped')}/>")
                lines.append("  </testcase>")
            elif o.passed:
                lines.append(head + "/>")
            else:
                lines.append(head + ">")
                lines.append(
                    f"    <failure message={quoteattr(o.message)}>{escape(o.trace)}</failure>"
                )
                lines.append("  </testcase>")
        lines.append("</testsuite>")
        return "\n".join(lines) + "\n"


#: characters XML 1.0 cannot hold: C0 controls but tab, LF and CR; surrogates; U+FFFE, U+FFFF
_NOT_XML_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(text: str) -> str:
    """``text`` with what XML 1.0 cannot hold spelled ``\\xNN`` / ``\\uNNNN``."""
    return _NOT_XML_RE.sub(
        lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text
    )


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
    """Run one test block against a compiled ``PolicySet``: decide, and explain only a failure."""
    from sharedos.policy.cases import run_case

    tool = test.tool or ""
    expected_effect = test.expect_effect or "allow"
    head = (test.name, test.span.file, test.span.line, test.span.col, tool, expected_effect)
    if test.skip is not None:
        return TestOutcome(
            *head, test.expect_reason, False, None, test.skip or "skipped", (), skipped=True
        )
    applied: tuple[RuleRef, ...] = ()
    trace = ""
    try:
        case = run_case(policy, test)
        context = complete_context(test.context)
        # A call refused by the test's run policy never reached the rules.
        reached_rules = case.decision is not None and case.decision.reason is not (
            ReasonCode.NOT_IN_RUN_POLICY
        )
        if test.tool is not None and reached_rules:
            applied = tuple(r.ref for r in policy.applying_rules(test.tool, test.args, context))
        if not case.passed and test.tool is not None:
            trace = policy.explain(test.tool, test.args, context, run_policy=test.policy).render()
    # evaluation must not raise; if it does, this test fails and the run goes on
    except Exception as exc:
        return TestOutcome(
            *head,
            test.expect_reason,
            False,
            None,
            f"evaluation raised {type(exc).__name__}: {exc}",
            (),
        )
    message = ""
    if not case.passed:
        message = case.message
        decision = case.decision
        if decision is not None and decision.rule_ids:
            message += "; decided by " + ", ".join(
                f"{r.id} ({r.file}:{r.line})" for r in decision.rule_ids
            )
    return TestOutcome(
        *head, test.expect_reason, case.passed, case.decision, message, applied, trace=trace
    )


def select_tests(tests: Sequence[ast.TestBlock], pattern: str | None) -> tuple[ast.TestBlock, ...]:
    """The tests whose name matches the regular expression ``pattern`` (all when None).

    Raise ``re.error`` for an invalid expression.
    """
    if pattern is None:
        return tuple(tests)
    regex = re.compile(pattern)
    return tuple(t for t in tests if regex.search(t.name))


def run_tests(
    policy: Any, tests: Sequence[ast.TestBlock] | None = None, *, branches: bool = False
) -> TestReport:
    """Run ``tests`` (default: every test block compiled into ``policy``) and measure rule
    coverage; with ``branches``, also which condition outcomes they decided (``branches``)."""
    from sharedos.policy.branches import measure

    blocks = tuple(policy.tests) if tests is None else tuple(tests)
    outcomes = tuple(run_test(policy, t) for t in blocks)
    exercised = frozenset(r for o in outcomes for r in o.applied)
    branch_cov = None
    if branches:
        calls = []
        for test, outcome in zip(blocks, outcomes, strict=True):
            d = outcome.decision
            if test.tool is None or outcome.skipped or d is None:
                continue
            if d.reason is ReasonCode.NOT_IN_RUN_POLICY:
                continue  # refused before any rule
            try:
                calls.append((test.tool, test.args, complete_context(test.context)))
            except ValueError:
                continue  # an unreadable 'now': the test failed already
        branch_cov = measure(policy, calls)
    return TestReport(outcomes, Coverage(tuple(policy.rules), exercised), branch_cov)
