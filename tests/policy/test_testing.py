"""The policy test runner and rule coverage."""

from __future__ import annotations

import pytest

from sharedos.policy import compile_source
from sharedos.policy.testing import coverage_percent, run_tests

POLICY = """
namespace files
requirement files.read  { action read;  resource path(args.path) }
requirement files.write { action write; resource path(args.path) }

@id("pub") permit read on "/public/**"
@id("shadowed-by-forbid") permit read on "/private/**"
@id("no-private") forbid * on "/private/**" unless "admin" in context.roles
@id("untested") permit write on "/scratch/**"

test "public" { context { principal: "a", roles: [] } call files.read { path: "/public/x" } expect allow }
test "private" { context { principal: "a", roles: [] } call files.read { path: "/private/x" } expect deny forbidden }
test "wrong reason" { context { principal: "a", roles: [] } call files.read { path: "/nowhere" } expect deny forbidden }
"""


@pytest.mark.parametrize(
    ("covered", "total", "expected"),
    [
        (0, 3, "0.00"),
        (1, 3, "33.33"),
        (2, 3, "66.66"),  # truncated, not rounded to 66.67
        (9999, 10000, "99.99"),
        (99999, 100000, "99.99"),  # never rounded up to 100.00
        (999999, 1000000, "99.99"),
        (10, 10, "100.00"),
        (0, 0, "100.00"),
    ],
)
def test_coverage_percent_truncates(covered: int, total: int, expected: str) -> None:
    assert coverage_percent(covered, total) == expected


def test_run_tests_outcomes_and_messages() -> None:
    report = run_tests(compile_source(POLICY, "p.sos"))
    by_name = {o.name: o for o in report.outcomes}
    assert by_name["public"].passed and by_name["private"].passed
    wrong = by_name["wrong reason"]
    assert not wrong.passed
    assert "expected deny forbidden, got deny no_matching_permit" in wrong.message
    assert wrong.location == "p.sos:13"
    assert not report.ok and len(report.failed) == 1


def test_coverage_counts_rules_that_applied_even_when_overridden() -> None:
    report = run_tests(compile_source(POLICY, "p.sos"))
    cov = report.coverage
    assert cov.total == 4
    # 'shadowed-by-forbid' matched in the "private" test although the forbid won
    assert {r.id for r in cov.exercised} == {"pub", "no-private", "shadowed-by-forbid"}
    assert [r.id for r in cov.uncovered] == ["untested"]
    assert cov.percent == "75.00"
    payload = report.to_dict(with_coverage=True)
    assert payload["coverage"]["uncovered"][0]["id"] == "untested"
    assert "coverage" not in report.to_dict()


def test_no_tests_and_no_rules() -> None:
    report = run_tests(
        compile_source(
            "namespace n\nrequirement n.t { action a; resource path(args.p) }\n", "e.sos"
        )
    )
    assert report.ok and report.outcomes == ()
    assert report.coverage.percent == "100.00"


def test_a_call_refused_by_the_run_policy_exercises_no_rule() -> None:
    text = (
        POLICY
        + """
toolpolicy run { mode open; managed other.* }
test "outside the run" { policy run; context { principal: "a", roles: [] } call files.read { path: "/public/x" } expect deny not_in_run_policy }
"""
    )
    report = run_tests(compile_source(text, "p.sos"))
    outcome = {o.name: o for o in report.outcomes}["outside the run"]
    assert outcome.passed and outcome.applied == ()


def test_a_tool_no_requirement_declares_is_unavailable_whatever_the_run() -> None:
    # the kernel's order (Kernel.resolve): no requirement -> tool_unavailable, and only
    # then the run's managed set; test, explain and eval must say what the kernel says
    text = (
        POLICY
        + """
toolpolicy run { mode open; managed files.* }
test "unknown" { policy run; context { principal: "a", roles: [] } call patch { file: "/x" } expect deny tool_unavailable }
"""
    )
    policy = compile_source(text, "p.sos")
    report = run_tests(policy)
    outcome = {o.name: o for o in report.outcomes}["unknown"]
    assert outcome.passed, outcome
    explained = policy.explain("patch", {"file": "/x"}, {"principal": "a"}, run_policy="run")
    assert str(explained.decision.reason) == "tool_unavailable"
