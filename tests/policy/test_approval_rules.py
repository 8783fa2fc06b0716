"""Approval rules (issue 28): ``require approval by ... for ... on ...``.

Precedence, stated in docs/policy-language.md ("Decisions") and held here:
forbid > approval-on-permit > permit > default deny. An approval rule never
grants, fails closed like a forbid, and who may approve is part of the rule.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sharedos.outcomes import Effect, ReasonCode
from sharedos.policy import compile_source, load_bundle
from sharedos.policy.bundle import BundleError
from sharedos.policy.formatter import format_source
from sharedos.policy.lints import lint
from sharedos.policy.parser import parse_source
from sharedos.policy.testing import run_tests

SOURCE = """namespace git
requirement git.git_reset  { action write; resource path(args.repo_path) }
requirement git.git_log    { action read;  resource path(args.repo_path) }
requirement git.get_issue  { action read;  resource "{args.owner}/{args.repo}" }

permit read, write on "/srv/git/**"
permit read on "acme/*"
forbid write on "/srv/git/frozen/**"

@id("main-needs-maintainer")
require approval by role "maintainer", group "release" for write on "/srv/git/**"
  when has args.branch and args.branch == "main"

@id("own-repos")
require approval by role "owner" for write on "/srv/git/{context.principal}/**"

@id("secret-issues")
require approval by group "security" for read on "acme/secret"

@id("no-permit-here")
require approval by role "maintainer" for read on "/srv/other/**"
"""

BOB = {"principal": "bob", "roles": ["developer"]}


@pytest.fixture(scope="module")
def policy():  # type: ignore[no-untyped-def]
    return compile_source(SOURCE, "git.sos")


def _decide(policy, tool, args, context=BOB):  # type: ignore[no-untyped-def]
    return policy.decide(tool, args, context)


def test_a_permit_and_an_applying_approval_rule_need_approval(policy) -> None:  # type: ignore[no-untyped-def]
    d = _decide(policy, "git.git_reset", {"repo_path": "/srv/git/app", "branch": "main"})
    assert d.effect is Effect.APPROVAL_REQUIRED and d.reason is ReasonCode.APPROVAL_REQUIRED
    assert not d.allowed and d.needs_approval
    assert d.approval is not None
    assert [r.id for r in d.approval.rules] == ["main-needs-maintainer"]
    assert d.approval.approvers == ((("role", "maintainer"), ("group", "release")),)
    # the approval rules first, then the permits that allow the call
    assert [r.effect for r in d.rule_ids] == ["approval", "permit"]
    assert d.resource == "/srv/git/app"


def test_precedence_forbid_then_approval_then_permit_then_default_deny(policy) -> None:  # type: ignore[no-untyped-def]
    forbidden = _decide(
        policy, "git.git_reset", {"repo_path": "/srv/git/frozen/a", "branch": "main"}
    )
    assert forbidden.reason is ReasonCode.FORBIDDEN  # a forbid wins over any approval
    plain = _decide(policy, "git.git_reset", {"repo_path": "/srv/git/app", "branch": "dev"})
    assert plain.reason is ReasonCode.ALLOWED  # the approval rule's condition is false
    nothing = _decide(policy, "git.git_log", {"repo_path": "/srv/other/x"})
    # an approval rule applies there, but no permit: it never grants
    assert nothing.reason is ReasonCode.NO_MATCHING_PERMIT


def test_an_approval_is_bound_to_the_canonical_resource(policy) -> None:  # type: ignore[no-untyped-def]
    d = _decide(policy, "git.git_reset", {"repo_path": "/srv/git/x/../app/./", "branch": "main"})
    assert d.needs_approval and d.resource == "/srv/git/app"


def test_several_rules_apply_each_must_be_satisfied(policy) -> None:  # type: ignore[no-untyped-def]
    d = _decide(policy, "git.git_reset", {"repo_path": "/srv/git/bob/r", "branch": "main"})
    assert d.approval is not None
    assert {r.id for r in d.approval.rules} == {"main-needs-maintainer", "own-repos"}
    need = d.approval
    assert not need.satisfied_by(["maintainer"], [])
    assert not need.satisfied_by(["owner"], [])
    assert need.satisfied_by(["owner", "maintainer"], [])
    assert need.satisfied_by(["owner"], ["release"])
    assert not need.satisfied_by([], [])


def test_a_missing_context_value_fails_closed(policy) -> None:  # type: ignore[no-untyped-def]
    # no principal: '{context.principal}' matches any one segment (as in a forbid)
    d = _decide(policy, "git.git_reset", {"repo_path": "/srv/git/alice/r"}, {"roles": []})
    assert d.needs_approval and [r.id for r in d.approval.rules] == ["own-repos"]  # type: ignore[union-attr]
    # with a principal, only their own repositories
    assert _decide(policy, "git.git_reset", {"repo_path": "/srv/git/alice/r"}).allowed


def test_a_condition_that_errors_makes_the_rule_apply() -> None:
    p = compile_source(
        "namespace f\nrequirement f.w { action write; resource path(args.path) }\n"
        'permit write on "/**"\n'
        'require approval by role "m" for write on "/a/**" when args.size > 10\n',
        "f.sos",
    )
    assert p.decide("f.w", {"path": "/a/x", "size": 3}, {}).allowed
    assert p.decide("f.w", {"path": "/a/x", "size": 30}, {}).needs_approval
    # no 'size' argument: the condition errors, the rule applies (fail closed)
    assert p.decide("f.w", {"path": "/a/x"}, {}).needs_approval


def test_template_resources(policy) -> None:  # type: ignore[no-untyped-def]
    d = _decide(policy, "git.get_issue", {"owner": "acme", "repo": "secret"})
    assert d.needs_approval and d.approval.approvers == ((("group", "security"),),)  # type: ignore[union-attr]
    assert _decide(policy, "git.get_issue", {"owner": "acme", "repo": "open"}).allowed


def test_without_approval_rules_the_program_is_unchanged() -> None:
    text = SOURCE.split("@id(")[0]
    p = compile_source(text, "git.sos")
    assert "approvals" not in p.program
    assert p.approvals is None
    assert "decide" not in vars(p)  # the evaluator's own method: no extra call


def test_bundles_keep_approval_rules_and_refuse_a_malformed_section(
    policy,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    path = tmp_path / "b.json"
    policy.save_bundle(path)
    again = load_bundle(path)
    args = {"repo_path": "/srv/git/app", "branch": "main"}
    assert again.decide("git.git_reset", args, BOB) == policy.decide("git.git_reset", args, BOB)
    assert again.bundle_hash == policy.bundle_hash
    doc = json.loads(path.read_text())
    doc["program"]["approvals"]["approvers"][0] = []
    path.write_text(json.dumps(doc))
    with pytest.raises(BundleError):
        load_bundle(path)


def test_dropping_the_approvals_from_a_bundle_is_caught(policy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "b.json"
    policy.save_bundle(path)
    doc = json.loads(path.read_text())
    del doc["program"]["approvals"]
    path.write_text(json.dumps(doc))
    with pytest.raises(BundleError, match="hash"):
        load_bundle(path)


def test_explain_names_the_rule_and_who_may_approve(policy) -> None:  # type: ignore[no-untyped-def]
    text = policy.explain(
        "git.git_reset", {"repo_path": "/srv/git/app", "branch": "main"}, BOB
    ).render()
    assert "[APPLIES] require approval on '/srv/git/**'" in text
    assert "approval required by: main-needs-maintainer at git.sos:11:1" in text
    assert "who may approve: role 'maintainer' or group 'release'" in text
    assert "decision: approval_required (approval_required)" in text


def test_the_catalogue_lists_tools_whose_calls_may_need_approval(policy) -> None:  # type: ignore[no-untyped-def]
    assert policy.could_permit("git.git_reset", BOB)
    listing = policy.explain_listing("git.git_reset", BOB)
    assert listing.listed and "some calls may need approval" in listing.reason
    assert {a.rule.id for a in listing.approvals} == {"main-needs-maintainer", "own-repos"}


def test_policy_tests_expect_approval_and_decide_with_an_approver() -> None:
    text = (
        SOURCE
        + """
test "main needs approval" {
  context { principal: "bob", roles: ["developer"] }
  call git.git_reset { repo_path: "/srv/git/app", branch: "main" }
  expect approval
}
test "a maintainer's yes" {
  context { principal: "bob" }
  call git.git_reset { repo_path: "/srv/git/app", branch: "main" }
  approver { principal: "maya", roles: ["maintainer"] }
  expect allow allowed
}
test "a developer's yes is not enough" {
  context { principal: "bob" }
  call git.git_reset { repo_path: "/srv/git/app", branch: "main" }
  approver { principal: "dan", roles: ["developer"] }
  expect approval approval_required
}
test "no approval gets past a forbid" {
  call git.git_reset { repo_path: "/srv/git/frozen/a", branch: "main" }
  approver { principal: "maya", roles: ["maintainer"], groups: ["release"] }
  expect deny forbidden
}
test "a wrong expectation fails" {
  call git.git_reset { repo_path: "/srv/git/app", branch: "main" }
  expect allow
}
"""
    )
    report = run_tests(compile_source(text, "git.sos"), branches=True)
    status = {o.name: o.passed for o in report.outcomes}
    assert status == {
        "main needs approval": True,
        "a maintainer's yes": True,
        "a developer's yes is not enough": True,
        "no approval gets past a forbid": True,
        "a wrong expectation fails": False,
    }
    ids = {r.id for r in report.coverage.rules}
    assert {"main-needs-maintainer", "own-repos", "secret-issues"} <= ids
    assert {r.id for r in report.coverage.exercised} >= {"main-needs-maintainer"}
    assert report.branches is not None
    assert any(p.rule.id == "main-needs-maintainer" for p in report.branches.points)


def test_fmt_round_trips_approval_rules_and_approver_clauses() -> None:
    text = (
        "namespace git\n"
        "requirement git.w { action write; resource path(args.p) }\n"
        'permit write on "/a/**"\n'
        '@id("x") require approval by role "m",group "g"   for write on "/a/**"  when args.b=="main"\n'
        'test "t" { call git.w { p: "/a/b", b: "main" } approver { principal: "m", roles: ["m"] } '
        "expect allow }\n"
    )
    first = format_source(text, "f.sos")
    assert not first.diagnostics
    assert (
        'require approval by role "m", group "g" for write on "/a/**" when args.b == "main"'
        in first.text
    )
    assert '  approver { principal: "m", roles: ["m"] }' in first.text
    again = format_source(first.text, "f.sos")
    assert again.text == first.text


def _codes(text: str) -> list[str]:
    from sharedos.policy.checker import check

    parsed = parse_source(text, "p.sos")
    found = [*parsed.diagnostics, *check([parsed.file]).diagnostics, *lint([parsed.file])]
    return sorted(d.code for d in found)


def test_checker_and_lints() -> None:
    head = (
        "namespace f\nrequirement f.r { action read; resource path(args.p) }\n"
        "requirement f.d { action delete; resource path(args.p) }\n"
    )
    assert _codes(
        head + 'permit read on "/a/**"\n' + 'require approval by role "" for read on "/a"\n'
    ) == ["SOS216"]
    assert _codes(head + 'require approval by role "m" for delete on "/a"\n') == ["SOS516"]
    covered = head + 'permit read on "/**"\nforbid read on "/x/**"\n'
    assert _codes(covered + 'require approval by role "m" for read on "/x/y"\n') == ["SOS516"]
    assert _codes(covered + 'require approval by role "m" for red on "/a"\n') == ["SOS201"]
    test = 'test "t" { call f.r { p: "/a" } approver { principal: 3 } expect allow }\n'
    assert _codes(head + 'permit read on "/**"\n' + test) == ["SOS406"]
    wrong = 'test "t" { call f.r { p: "/a" } expect deny approval_required }\n'
    assert _codes(head + 'permit read on "/**"\n' + wrong) == ["SOS403"]


def test_diff_sees_an_approval_rule_added_and_its_approvers_changed() -> None:
    from sharedos.policy.analysis.diff import diff_policies

    base = (
        "namespace f\nrequirement f.w { action write; resource path(args.p) }\n"
        'permit write on "/a/**"\n'
    )
    old = compile_source(base, "old.sos")
    new = compile_source(base + 'require approval by role "m" for write on "/a/x/**"\n', "new.sos")
    report = diff_policies(old, new)
    assert {g.kind for g in report.groups} == {"narrowed"}
    back = diff_policies(new, old)
    assert {g.kind for g in back.groups} == {"widened"}
    other = compile_source(
        base + 'require approval by role "lead" for write on "/a/x/**"\n', "other.sos"
    )
    changed = diff_policies(new, other)
    # a lead's approval now lets the call run, where only an "m"'s did
    assert {g.kind for g in changed.groups} == {"widened"}
