"""The shipped rules and run policies compile, and their own test blocks pass."""

from __future__ import annotations

from pathlib import Path

from sharedos.policy import compile_paths, run_case, run_cases
from sharedos.toolpolicy import RunMode


def test_shipped_rules_and_policies_compile_cleanly(repo_root: Path) -> None:
    policy = compile_paths([repo_root / "rules", repo_root / "policy"])
    # the memory graph is one resource: its constant template is deliberate (SOS208 warns)
    assert [
        d for d in policy.diagnostics if not (d.code == "SOS208" and d.file.endswith("memory.sos"))
    ] == []
    assert {
        "files.read",
        "files.write",
        "files.list",
        "files.search",
        "files.delete",
        "github.get_issue",
        "github.create_issue",
        "git.git_status",
        "fs.read_text_file",
        "memory.read_graph",
    } <= set(policy.requirements)
    # brokered tools SharedOS cannot serve are not governed
    assert "github.search" not in policy.requirements
    search = policy.requirements["files.search"]
    assert (search.namespace, search.action, search.resource) == (
        "files",
        "search",
        "path(args.root)",
    )
    assert search.span.file.endswith("rules/files.sos") and search.span.line > 1


def test_every_shipped_file_has_passing_test_blocks(repo_root: Path) -> None:
    policy = compile_paths([repo_root / "rules", repo_root / "policy"])
    results = run_cases(policy)
    files_with_tests = {Path(r.test.span.file).name for r in results}
    assert {"files.sos", "github.sos", "strict.sos", "open.sos"} <= files_with_tests
    failures = [r.message for r in results if not r.passed]
    assert failures == []
    assert len(results) >= 20


def test_shipped_tool_policies(repo_root: Path) -> None:
    policy = compile_paths([repo_root / "rules", repo_root / "policy"])
    strict = policy.tool_policies["ci-strict"]
    assert strict.mode is RunMode.STRICT
    assert strict.managed == ("files.*", "github.get_issue")
    assert strict.harness_local == ("patch", "shell.bounded")
    assert strict.is_managed("files.read") and not strict.is_managed("github.create_issue")
    open_policy = policy.tool_policies["dev-open"]
    assert open_policy.mode is RunMode.OPEN and open_policy.external_direct


def test_a_failing_expectation_is_reported(repo_root: Path) -> None:
    from dataclasses import replace

    policy = compile_paths([repo_root / "rules"])
    test = next(t for t in policy.tests if t.name == "anyone reads public files")
    wrong = replace(test, expect_effect="deny", expect_reason="forbidden")
    result = run_case(policy, wrong)
    assert not result.passed
    assert "expected deny forbidden, got allow allowed" in result.message
    wrong_reason = replace(test, expect_effect="allow", expect_reason="forbidden")
    assert not run_case(policy, wrong_reason).passed


def test_policy_clause_applies_the_run_policy_first(repo_root: Path) -> None:
    from sharedos.policy import compile_sources

    rules = (repo_root / "rules" / "files.sos").read_text()
    text = """
toolpolicy narrow { mode strict; managed files.list; harness_local "patch" }
test "read is outside the narrow run" {
  policy narrow
  context { principal: "bob", roles: [] }
  call files.read { path: "/public/a" }
  expect deny not_in_run_policy
}
test "list is inside it" {
  policy narrow
  context { principal: "bob", roles: [] }
  call files.list { path: "/public" }
  expect allow
}
"""
    policy = compile_sources([("files.sos", rules), ("narrow.sos", text)])
    results = {r.test.name: r for r in run_cases(policy)}
    assert results["read is outside the narrow run"].passed
    assert results["list is inside it"].passed
    decision = results["read is outside the narrow run"].decision
    assert decision is not None and decision.reason.value == "not_in_run_policy"


def test_the_github_security_forbid_holds_whatever_the_names_case(repo_root: Path) -> None:
    # GitHub reads owner and repository names without case: repo "Security" is the
    # security repository. The forbid on the pattern "sharedos/security" let it past,
    # and org-read (or oss-read) allowed the call.
    policy = compile_paths([repo_root / "rules"])
    outsider = {"principal": "bob", "tenant": "default", "roles": ["maintainer"]}
    for owner, repo in (
        ("sharedos", "Security"),
        ("SharedOS", "security"),
        ("SHAREDOS", "SECURITY"),
    ):
        for tool in ("github.get_issue", "github.create_issue"):
            args = {"owner": owner, "repo": repo, "issue_number": 7, "title": "x"}
            decision = policy.decide(tool, args, outsider)
            assert (decision.effect, decision.reason) == ("deny", "forbidden"), (tool, owner, repo)
            assert [r.id for r in decision.rule_ids] == ["github-security-repo"]
    team = {"principal": "sam", "tenant": "acme", "roles": ["security"]}
    args = {"owner": "sharedos", "repo": "Security", "issue_number": 7}
    assert policy.decide("github.get_issue", args, team).effect == "allow"
    other = {"owner": "sharedos", "repo": "Sharedos", "issue_number": 7}
    assert policy.decide("github.get_issue", other, outsider).effect == "allow"
