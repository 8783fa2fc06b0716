"""Tooling of issue 13: explain at 2 a.m., catalog, tests for CI, diagnostics at scale."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedos.cli.policy import main
from sharedos.policy import compile_source

POLICY = """namespace files
requirement files.read   { action read;   resource path(args.path) }
requirement files.write  { action write;  resource path(args.path) }
condition is_editor = "editor" in context.roles
@id("home")
@description("people own their home directory")
permit read, write on "/home/{context.principal}/**"
@id("shared")
permit * on "/shared/**" when is_editor unless context.tenant == "archive"
forbid write on "/shared/locked/**"
toolpolicy ro { mode open; managed files.read }
"""

TESTS = """
test "owners read home" {
  context { principal: "ann" }
  call files.read { path: "/home/ann/x" }
  expect allow
}
test "editors write shared" {
  context { principal: "bo", roles: ["editor"] }
  call files.write { path: "/shared/a" }
  expect allow
}
test "a wrong expectation" {
  context { principal: "bo", roles: [] }
  call files.write { path: "/shared/a" }
  expect allow
}
test "not yet" {
  skip "waiting for the archive rules"
  call files.read { path: "/archive/a" }
  expect allow
}
"""


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "p.sos"
    path.write_text(POLICY + TESTS)
    return path


def run(*args: str, input: str | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, list(args), input=input)


# ------------------------------------------------------------- the language


def test_when_and_unless_on_one_rule() -> None:
    policy = compile_source(POLICY, "p.sos")
    editor = {"principal": "bo", "roles": ["editor"], "tenant": "t"}
    frozen = {**editor, "tenant": "archive"}
    assert policy.decide("files.write", {"path": "/shared/a"}, editor).allowed
    assert not policy.decide("files.write", {"path": "/shared/a"}, frozen).allowed
    assert not policy.decide("files.write", {"path": "/shared/a"}, {**editor, "roles": []}).allowed
    # an error in 'unless' fails closed for a permit: it does not apply
    missing = {"principal": "bo", "roles": ["editor"]}
    assert not policy.decide("files.write", {"path": "/shared/a"}, missing).allowed
    assert policy.could_permit("files.write", editor)


def test_named_conditions_are_inlined_and_shared_in_their_namespace() -> None:
    text = (
        POLICY
        + 'condition staff = is_editor or "admin" in context.roles\n'
        + 'permit read on "/staff/**" when staff and context.tenant == "t"\n'
    )
    policy = compile_source(text, "p.sos")
    ctx = {"principal": "x", "roles": ["admin"], "tenant": "t"}
    assert policy.decide("files.read", {"path": "/staff/a"}, ctx).allowed
    assert not policy.decide("files.read", {"path": "/staff/a"}, {**ctx, "roles": []}).allowed
    other = "namespace other\nrequirement other.x { action x; resource path(args.p) }\n"
    with pytest.raises(Exception, match="SOS203"):  # not visible from another namespace
        compile_source(text + other + 'permit x on "/**" when staff\n', "p.sos")


def test_descriptions_travel_in_bundles_and_explanations(tmp_path: Path) -> None:
    policy = compile_source(POLICY, "p.sos")
    bundle = tmp_path / "b.json"
    policy.save_bundle(bundle)
    from sharedos.policy import load_bundle

    exp = load_bundle(bundle).explain("files.read", {"path": "/home/ann/x"}, {"principal": "ann"})
    (home,) = [t for t in exp.rules if t.rule.id == "home"]
    assert home.description == "people own their home directory"
    assert "description: people own their home directory" in exp.render()


# ------------------------------------------------------------- explain


def test_explain_shows_the_effective_context_instantiated_patterns_and_values(
    policy_file: Path,
) -> None:
    result = run(
        "explain",
        str(policy_file),
        "--tool",
        "files.write",
        "--args",
        '{"path": "/shared/a"}',
        "--context",
        '{"principal": "bo", "roles": ["editor"], "attributes": {"team": "x"}}',
    )
    out = result.stdout
    assert result.exit_code == 0, out
    assert (
        'context (after defaults): {"attributes": {"team": "x"}, "principal": "bo", "roles": ["editor"], "tenant": "default"}'
        in out
    )
    assert "pattern as instantiated: '/home/bo/**'" in out
    assert 'when "editor" in context.roles unless context.tenant == "archive"' in out  # inlined
    assert 'when "editor" in context.roles  => true' in out
    assert 'unless context.tenant == "archive"  => false' in out
    assert '  context.tenant  => "default"' in out
    assert "permitted by: shared" in out


def test_explain_and_eval_take_a_run_policy(policy_file: Path) -> None:
    result = run("explain", str(policy_file), "--tool", "files.write", "--policy", "ro")
    assert result.exit_code == 0 and "not_in_run_policy" in result.stdout
    assert "run policy: ro" in result.stdout
    lines = (
        '{"tool": "files.write", "args": {"path": "/home/a/x"}, "context": {"principal": "a"}}\n'
    )
    plain = run("eval", str(policy_file), input=lines)
    ro = run("eval", str(policy_file), "--policy", "ro", input=lines)
    assert json.loads(plain.stdout)["reason"] == "allowed"
    assert json.loads(ro.stdout)["reason"] == "not_in_run_policy"
    bad = run("eval", str(policy_file), "--policy", "nope", input=lines)
    assert bad.exit_code == 2 and "no toolpolicy 'nope'" in bad.stderr


def test_catalog_says_what_a_context_sees_and_why_a_tool_is_not_there(policy_file: Path) -> None:
    result = run("catalog", str(policy_file), "--context", '{"principal": "bo"}', "--policy", "ro")
    assert result.exit_code == 0
    assert "listed files.read" in result.stdout
    assert (
        "hidden files.write: files.write is not in the managed set of toolpolicy 'ro'"
        in result.stdout
    )
    why = run(
        "catalog", str(policy_file), "--context", '{"principal": ""}', "--tool", "files.write"
    )
    assert "hidden files.write" in why.stdout
    assert "interpolates a missing or unsafe context value" in why.stdout
    assert 'condition (when "editor" in context.roles unless' in why.stdout
    data = json.loads(
        run("catalog", str(policy_file), "--format", "json", "--tool", "files.nope").stdout
    )
    assert data["tools"][0]["listed"] is False


# ------------------------------------------------------------- test runner


def test_a_failing_test_prints_its_decision_path(policy_file: Path) -> None:
    result = run("test", str(policy_file))
    assert result.exit_code == 1
    out = result.stdout
    assert "FAIL" in out and "a wrong expectation" in out
    assert "| call files.write" in out and "|   rules considered:" in out
    assert "SKIP" in out and "waiting for the archive rules" in out
    assert "4 tests: 2 passed, 1 failed, 1 skipped" in out


def test_run_selects_tests_by_name_and_junit_is_written(policy_file: Path, tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    result = run("test", str(policy_file), "--run", "^(owners|editors)", "--junit", str(junit))
    assert result.exit_code == 0, result.stdout
    assert "2 tests: 2 passed, 0 failed" in result.stdout
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "0"
    everything = run("test", str(policy_file), "--junit", str(junit))
    suite = ET.parse(junit).getroot()
    assert everything.exit_code == 1
    assert (suite.get("failures"), suite.get("skipped")) == ("1", "1")
    assert suite.find("testcase/failure") is not None
    assert run("test", str(policy_file), "--run", "(").exit_code == 2


def test_a_run_filter_that_matches_no_test_is_a_usage_error(policy_file: Path) -> None:
    # '--run ^ownrs' (a typo) ran nothing, printed "no test blocks found" and exited
    # 0: a CI step meant to run the owners' tests went green with none run
    for fmt in ("text", "json"):
        result = run("test", str(policy_file), "--run", "^ownrs", "--format", fmt)
        assert result.exit_code == 2, result.output
        assert "no test name matches '^ownrs' (the policy has 4 test blocks)" in result.output


def test_junit_is_well_formed_xml_whatever_a_test_is_called(tmp_path: Path) -> None:
    # A name or skip reason may hold any escape; XML 1.0 cannot hold a control
    # character or U+FFFE, and the report CI reads did not parse.
    policy = tmp_path / "p.sos"
    policy.write_text(
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'permit read on "/a/**"\n'
        'test "t\\u0001\\ufffe" { call files.read { path: "/b" } expect allow }\n'
        'test "s\\u000b" { skip "r\\u0000"; call files.read { path: "/a/b" } expect allow }\n'
    )
    junit = tmp_path / "junit.xml"
    assert run("test", str(policy), "--junit", str(junit)).exit_code == 1
    cases = ET.parse(junit).getroot().findall("testcase")
    assert [c.get("name") for c in cases] == ["t\\x01\\ufffe", "s\\x0b"]
    assert cases[1].find("skipped").get("message") == "r\\x00"  # type: ignore[union-attr]


def test_coverage_threshold(policy_file: Path) -> None:
    passing = "--run", "^(owners|editors)"
    assert run("test", str(policy_file), *passing, "--coverage", "--threshold", "50").exit_code == 0
    low = run("test", str(policy_file), *passing, "--coverage", "--threshold", "100")
    assert low.exit_code == 1 and "below the threshold of 100%" in low.stdout
    assert run("test", str(policy_file), "--threshold", "50").exit_code == 2


def test_passing_tests_are_decided_not_explained(
    policy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a run costs one indexed decision per test; only a failure pays for a trace
    from sharedos.policy.policyset import PolicySet

    calls: list[str] = []
    original = PolicySet.explain

    def counting(self, tool, args, context, **kw):  # type: ignore[no-untyped-def]
        calls.append(tool)
        return original(self, tool, args, context, **kw)

    monkeypatch.setattr(PolicySet, "explain", counting)
    run("test", str(policy_file), "--coverage")
    assert calls == ["files.write"]  # the one failing test


def test_coverage_counts_a_permit_overridden_by_a_forbid(tmp_path: Path) -> None:
    path = tmp_path / "p.sos"
    path.write_text(
        POLICY
        + 'test "locked" { context { principal: "bo", roles: ["editor"], attributes: {} }'
        + ' call files.write { path: "/shared/locked/a" } expect deny forbidden }\n'
    )
    data = json.loads(run("test", str(path), "--coverage", "--format", "json").stdout)
    uncovered = {r["id"] for r in data["coverage"]["uncovered"]}
    assert "shared" not in uncovered and "home" in uncovered


# ------------------------------------------------------------- check at scale


def test_max_errors_bounds_the_output_but_counts_everything(tmp_path: Path) -> None:
    path = tmp_path / "p.sos"
    path.write_text(
        "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
        + "".join(f'@id("dup")\npermit read on "/p{i}/**"\n' for i in range(50))
    )
    result = run("check", str(path), "--max-errors", "3")
    assert result.exit_code == 1
    assert result.stdout.count("error[SOS210]") == 3
    assert "46 more not shown" in result.stdout and "49 errors" in result.stdout
