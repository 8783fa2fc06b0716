"""``sharedos-policy diff`` and ``diff_policies`` on the shipped rules and small policies.

Every counterexample a test looks at is decided again by policies compiled
afresh from the same sources (``assert_real``): the report's own objects are
never trusted to say that a request decides differently.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sharedos.cli.policy import main
from sharedos.policy import compile_paths, compile_source, compile_sources
from sharedos.policy.analysis.compare import Request, change_kind, decide_request
from sharedos.policy.analysis.diff import DiffReport, diff_policies
from sharedos.policy.formatter import format_source
from tests.timing import cpu_bound

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"
FS = (RULES / "fs.sos").read_text(encoding="utf-8")
GIT = (RULES / "git.sos").read_text(encoding="utf-8")


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def diff_texts(old: str, new: str, **kwargs: Any) -> DiffReport:
    return diff_policies(compile_source(old, "p.sos"), compile_source(new, "p.sos"), **kwargs)


FILES_HEAD = "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"


def assert_real(old: str, new: str, report: DiffReport) -> int:
    """Every example of the report decides differently, the same way, under fresh compiles."""
    a, b = compile_source(old, "p.sos"), compile_source(new, "p.sos")
    assert report.dropped == 0  # the report's second decision agreed with its first
    seen = 0
    for group in report.groups:
        assert group.examples and group.count >= len(group.examples)
        for change in group.examples:
            request = Request(
                change.request.tool,
                json.loads(json.dumps(change.request.args)),
                json.loads(json.dumps(change.request.context)),
                change.request.run_policy,
            )
            kind = change_kind(decide_request(a, request), decide_request(b, request))
            assert kind == group.kind == change.kind, change.to_dict()
            seen += 1
    return seen


def assert_only(old: str, new: str, kind: str) -> None:
    """The diff from ``old`` to ``new`` is complete, every group of it is ``kind``, and its
    examples are real (``assert_real``)."""
    report = diff_texts(old, new, max_examples=0)
    assert assert_real(old, new, report) > 0
    assert report.complete and {g.kind for g in report.groups} == {kind}


def add_rule(text: str, rule: str) -> str:
    return text.rstrip("\n") + "\n\n" + rule + "\n"


# ---------------------------------------------------------------- the shipped rules


def test_widening_fs_by_a_permit_reports_the_write_tools_on_its_pattern() -> None:
    new = add_rule(FS, '@id("fs-public-write")\npermit write on "/srv/share/public/**"')
    report = diff_texts(FS, new, max_examples=0)
    assert report.verdict == "changed" and report.complete
    kinds = {g.kind for g in report.groups}
    assert kinds == {"widened"}
    tools = {g.tool for g in report.groups}
    assert tools == {"fs.write_file", "fs.edit_file", "fs.create_directory"}
    for group in report.groups:
        assert group.action == "write" and group.pattern == "/srv/share/public/**"
        assert [ref.id for side, ref in group.rules] == ["fs-public-write"]
        for change in group.examples:
            assert change.new.allowed and not change.old.allowed
            assert change.new.resource is not None
            assert change.new.resource.startswith("/srv/share/public")
    assert assert_real(FS, new, report) > 0


def test_widening_git_writes_to_every_repository_keeps_the_security_forbid() -> None:
    new = add_rule(GIT, 'permit write on "/srv/git/**"')
    report = diff_texts(GIT, new, max_examples=0)
    assert report.complete and {g.kind for g in report.groups} == {"widened"}
    for group in report.groups:
        for change in group.examples:
            resource = change.new.resource or ""
            roles = change.request.context["roles"]
            # the security repositories stay forbidden to everyone outside the team
            assert not resource.startswith("/srv/git/security") or "security" in roles
            assert "maintainer" not in roles  # maintainers could write already
    assert assert_real(GIT, new, report) > 0


def test_narrowing_fs_by_a_forbid_reports_what_was_allowed_before() -> None:
    new = add_rule(FS, '@id("no-home-secrets")\nforbid * on "/home/{context.principal}/secret/**"')
    report = diff_texts(FS, new, max_examples=0)
    assert report.complete
    narrowed = [g for g in report.groups if g.kind == "narrowed"]
    assert narrowed and all(g.pattern == "/home/{context.principal}/secret/**" for g in narrowed)
    # every fs tool the home rule permits loses its secret directory
    assert {g.tool for g in narrowed} == set(compile_source(FS, "p.sos").requirements)
    for g in narrowed:
        for change in g.examples:
            principal = change.request.context["principal"]
            assert change.new.resource is not None
            assert change.new.resource.startswith(f"/home/{principal}/secret")
            assert change.old.allowed and change.new.reason.value == "forbidden"
    # where nothing permitted, the forbid only changes the reason
    for g in report.groups:
        if g.kind == "reason changed":
            for change in g.examples:
                assert change.old.reason.value == "no_matching_permit"
    assert assert_real(FS, new, report) > 0


def test_a_forbid_where_nothing_was_permitted_only_changes_the_reason() -> None:
    new = add_rule(FS, 'forbid write on "/srv/share/public/**"')
    report = diff_texts(FS, new, max_examples=0)
    assert report.complete and report.groups
    assert {g.kind for g in report.groups} == {"reason changed"}
    assert assert_real(FS, new, report) > 0
    only_widened = diff_texts(FS, new, kinds=["widened", "narrowed"])
    assert only_widened.verdict == "unchanged" and not only_widened.groups


def test_changing_only_a_condition_reports_the_contexts_it_changes() -> None:
    new = FS.replace(
        'unless "admin" in context.roles',
        'unless "admin" in context.roles or "ops" in context.roles',
    )
    report = diff_texts(FS, new, max_examples=0)
    assert report.complete and report.groups
    for g in report.groups:
        assert g.pattern == "/srv/share/private/**" and g.kind == "reason changed"
        for change in g.examples:
            assert "ops" in change.request.context["roles"]
            assert "admin" not in change.request.context["roles"]
    assert assert_real(FS, new, report) > 0


def test_argument_conditions_get_counterexamples_with_the_arguments_that_matter() -> None:
    new = FS.replace(
        'permit read, list, search on "/srv/share/public/**"',
        'permit read, list, search on "/srv/share/public/**" when args.mode != "raw" and args.n < 10',
    )
    report = diff_texts(FS, new, max_examples=0)
    assert report.complete and {g.kind for g in report.groups} == {"narrowed"}
    args = [c.request.args for g in report.groups for c in g.examples]
    assert any(a.get("mode") == "raw" for a in args)
    assert any(isinstance(a.get("n"), int | float) and a["n"] >= 10 for a in args)
    assert assert_real(FS, new, report) > 0


# ------------------------------------------------------------ no change, whatever moves


def test_formatting_reordering_renaming_and_moving_rules_is_no_change() -> None:
    formatted = format_source(FS, "fs.sos").text
    assert formatted is not None
    header, _, body = FS.partition('@id("fs-public-read")')
    rules = ["@id(" + r for r in ('@id("fs-public-read")' + body).split("@id(")[1:]]
    tests_at = rules[-1].index("test ")
    tail = rules[-1][tests_at:]
    rules[-1] = rules[-1][:tests_at]
    renamed = [r.replace('@id("', '@id("renamed-', 1) for r in reversed(rules)]
    moved = header + "".join(renamed[:2]) + tail
    other = "namespace fs\n" + "".join(renamed[2:])
    old = compile_source(FS, "fs.sos")
    for new in (
        compile_source(formatted, "fs.sos"),
        compile_sources([("a.sos", moved), ("b.sos", other)]),
    ):
        report = diff_policies(old, new)
        assert report.verdict == "unchanged", report.render()
        assert report.analysed == [] and report.requests == 0


def test_the_whole_shipped_policy_against_itself_exits_0() -> None:
    code, out, _ = invoke("diff", str(RULES), str(RULES), "--with", str(REPO / "policy"))
    assert code == 0, out
    assert "no decision can change" in out


def test_a_bundle_diffs_like_its_sources(tmp_path: Path) -> None:
    bundle = tmp_path / "old.bundle.json"
    compile_paths([RULES / "fs.sos"]).save_bundle(bundle)
    new = tmp_path / "fs.sos"
    new.write_text(add_rule(FS, 'permit write on "/srv/share/public/**"'), encoding="utf-8")
    code, out, _ = invoke("diff", str(bundle), str(new), "--format", "json")
    assert code == 1
    doc = json.loads(out)
    assert doc["verdict"] == "changed" and doc["summary"]["widened"] > 0
    assert doc["old"]["bundle_hash"] == compile_paths([RULES / "fs.sos"]).bundle_hash
    code, out, _ = invoke("diff", str(bundle), str(RULES / "fs.sos"))
    assert code == 0, out


RUN_POLICY = "toolpolicy fs-dev {\n  mode open\n  managed fs.*\n}\n"


def test_a_bundle_diffs_against_sources_given_with_their_run_policies(tmp_path: Path) -> None:
    """The deployed bundle (rules and run policies, the whole policy) against the working
    tree's rules ``--with`` its run policies: ``--with`` compiles with the side given as
    sources. It was refused ("OLD is a bundle: --with does not apply to it"), so a bundle
    could only be diffed against sources that hold no run policy (every toolpolicy then
    reported removed)."""
    run = tmp_path / "policy" / "dev.sos"
    run.parent.mkdir()
    run.write_text(RUN_POLICY, encoding="utf-8")
    bundle = tmp_path / "deployed.bundle.json"
    compile_paths([RULES / "fs.sos", run]).save_bundle(bundle)
    rules = str(RULES / "fs.sos")
    for argv in (
        (str(bundle), rules, "--with", str(run.parent)),
        (rules, str(bundle), "--with", str(run.parent)),
    ):
        code, out, err = invoke("diff", *argv, "--policy", "fs-dev", "--format", "json")
        assert code == 0, (argv, out, err)
        doc = json.loads(out)
        assert doc["verdict"] == "unchanged" and doc["run_policies"] == [], doc
        assert doc["old"]["bundle_hash"] == doc["new"]["bundle_hash"]
    # --with where no side is sources would apply to nothing: a usage error, said
    code, _, err = invoke("diff", str(bundle), str(bundle), "--with", str(run.parent))
    assert code == 2 and "--with" in err, err


# ---------------------------------------------------------------- requirements, tools


def test_a_changed_resource_expression_is_reported() -> None:
    new = FS.replace(
        "requirement fs.write_file                { action write;  resource path(args.path) }",
        "requirement fs.write_file                { action write;  resource path(args.file) }",
    )
    assert new != FS
    report = diff_texts(FS, new, max_examples=0)
    assert report.complete
    groups = [g for g in report.groups if g.tool == "fs.write_file"]
    assert {g.kind for g in groups} >= {"widened", "narrowed"}
    assert all(g.tool == "fs.write_file" for g in report.groups)
    assert assert_real(FS, new, report) > 0


def test_a_removed_and_an_added_tool_are_reported() -> None:
    removed = FS.replace(
        "requirement fs.create_directory          { action write;  resource path(args.path) }\n", ""
    )
    assert removed != FS
    report = diff_texts(FS, removed, max_examples=0)
    assert {g.tool for g in report.groups} == {"fs.create_directory"}
    assert {g.kind for g in report.groups} == {"narrowed", "reason changed"}
    for g in report.groups:
        for change in g.examples:
            assert change.new.reason.value == "tool_unavailable"
    assert assert_real(FS, removed, report) > 0
    back = diff_texts(removed, FS, max_examples=0)
    assert {g.kind for g in back.groups} == {"widened", "reason changed"}
    assert assert_real(removed, FS, back) > 0


# ------------------------------------------------------------- gaps: never "no change"


def test_a_construct_the_analysis_does_not_cover_is_reported_not_called_unchanged() -> None:
    head = FILES_HEAD
    old = head + 'permit read on "/a/**" when args.x + "1" == "ab1"\n'
    new = head + 'permit read on "/a/**" when args.x + "1" == "ac1"\n'
    report = diff_texts(old, new)
    assert report.verdict != "unchanged"
    assert not report.complete
    assert any('args.x + "1"' in g.construct for g in report.gaps)
    assert "incomplete" in report.render()


def test_the_cli_exits_1_with_gaps_and_lists_them(tmp_path: Path) -> None:
    head = FILES_HEAD
    (tmp_path / "old.sos").write_text(head + 'permit read on "/a/**" when args.x + "1" == "ab1"\n')
    (tmp_path / "new.sos").write_text(head + 'permit read on "/a/**" when args.x + "1" == "ac1"\n')
    code, out, _ = invoke("diff", str(tmp_path / "old.sos"), str(tmp_path / "new.sos"))
    assert code == 1
    assert "not a proof" in out
    assert "old.sos:3:1" in out and "new.sos:3:1" in out


# ----------------------------------------------------------------------- run policies


def test_a_toolpolicy_that_manages_more_tools_is_reported(tmp_path: Path) -> None:
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    for d, managed in ((old_dir, "fs.read_text_file"), (new_dir, "fs.*")):
        d.mkdir()
        (d / "fs.sos").write_text(FS, encoding="utf-8")
        (d / "run.sos").write_text(
            f'toolpolicy r {{ mode strict; managed {managed}; harness_local "patch" }}\n'
        )
    code, out, _ = invoke("diff", str(old_dir), str(new_dir), "--format", "json")
    assert code == 1
    doc = json.loads(out)
    assert doc["groups"] == []
    (rp,) = doc["run_policies"]
    assert rp["name"] == "r" and rp["status"] == "changed"
    assert {"tool": "fs.write_file", "old": False, "new": True} in rp["managed"]
    code, out, _ = invoke("diff", str(old_dir), str(new_dir), "--policy", "r", "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["summary"]["widened"] > 0
    for group in doc["groups"]:
        for ex in group["examples"]:
            assert ex["policy"] == "r" and ex["old"]["reason"] == "not_in_run_policy"


@pytest.mark.parametrize(
    ("old_run", "new_run", "kind"),
    [
        ('mode strict; harness_local "patch"', 'mode open; harness_local "patch"', "widened"),
        ('mode open; harness_local "patch"', 'mode strict; harness_local "patch"', "narrowed"),
        (
            'mode strict; harness_local "patch"',
            'mode strict; harness_local "patch", "shell"',
            "widened",
        ),
        ('mode open; external_direct "web"', "mode open", "narrowed"),
    ],
)
def test_a_run_policy_that_changes_its_reach_is_reported_under_its_kind(
    tmp_path: Path, old_run: str, new_run: str, kind: str
) -> None:
    """A run turned from strict to open no longer confines the harness, though no decision
    of the kernel changes: ``--kind widened`` (a reviewer's gate) must still report it."""
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    for d, body in ((old_dir, old_run), (new_dir, new_run)):
        d.mkdir()
        (d / "fs.sos").write_text(FS, encoding="utf-8")
        (d / "run.sos").write_text(f"toolpolicy r {{ {body}; managed fs.* }}\n")
    other = "narrowed" if kind == "widened" else "widened"
    code, out, _ = invoke("diff", str(old_dir), str(new_dir), "--kind", kind, "--format", "json")
    doc = json.loads(out)
    assert code == 1, out
    [rp] = doc["run_policies"]
    assert rp["name"] == "r" and rp["status"] == "changed"
    code, out, _ = invoke("diff", str(old_dir), str(new_dir), "--kind", other, "--format", "json")
    assert code == 0, out
    assert json.loads(out)["run_policies"] == []


@pytest.mark.parametrize(
    ("old_managed", "new_managed", "kind"),
    [
        # each was exit 0 under --kind widened when the run policies are diffed alone
        # (policy/ apart from rules/): no requirement declares a tool to weigh
        ("files.read", "files.*, github.**", "widened"),
        ("files.*", "files.**", "widened"),
        ("a.b.c", "a.*.c", "widened"),
        ("files.*, github.**", "files.read", "narrowed"),
    ],
)
def test_a_managed_set_that_grows_is_widened_whatever_tools_are_declared(
    tmp_path: Path, old_managed: str, new_managed: str, kind: str
) -> None:
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    for d, managed in ((old_dir, old_managed), (new_dir, new_managed)):
        d.mkdir()
        (d / "run.sos").write_text(
            f'toolpolicy r {{ mode strict; managed {managed}; harness_local "patch" }}\n'
        )
    other = "narrowed" if kind == "widened" else "widened"
    code, out, _ = invoke("diff", str(old_dir), str(new_dir), "--kind", kind, "--format", "json")
    assert code == 1, out
    assert [rp["name"] for rp in json.loads(out)["run_policies"]] == ["r"]
    code, out, _ = invoke("diff", str(old_dir), str(new_dir), "--kind", other, "--format", "json")
    assert code == 0 and json.loads(out)["run_policies"] == [], out


def test_a_managed_set_written_otherwise_is_neither_kind(tmp_path: Path) -> None:
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    for d, managed in ((old_dir, "a.b.c, a.*.*"), (new_dir, "a.*.c, a.*.*")):
        d.mkdir()
        (d / "run.sos").write_text(
            f'toolpolicy r {{ mode strict; managed {managed}; harness_local "patch" }}\n'
        )
    for kind in ("widened", "narrowed"):
        code, out, _ = invoke("diff", str(old_dir), str(new_dir), "--kind", kind)
        assert code == 0, out


# ------------------------------------------------------------------------------- CLI


def test_cli_text_names_the_group_rules_and_both_decisions(tmp_path: Path) -> None:
    new = tmp_path / "fs.sos"
    new.write_text(add_rule(FS, '@id("fs-public-write")\npermit write on "/srv/share/public/**"'))
    code, out, _ = invoke("diff", str(RULES / "fs.sos"), str(new))
    assert code == 1
    assert (
        "widened: fs.create_directory, fs.edit_file, fs.write_file (write) on /srv/share/public/**"
        in out
    )
    assert "rules: +fs-public-write (fs.sos:" in out
    assert "old: deny no_matching_permit" in out
    assert "new: allow allowed by fs-public-write" in out
    assert "result: some decisions change" in out


def test_cli_json_is_one_document_for_ci(tmp_path: Path) -> None:
    new = tmp_path / "fs.sos"
    new.write_text(add_rule(FS, 'forbid * on "/home/{context.principal}/secret/**"'))
    code, out, _ = invoke(
        "diff", str(RULES / "fs.sos"), str(new), "--format", "json", "--kind", "narrowed"
    )
    assert code == 1
    doc = json.loads(out)
    assert doc["kinds"] == ["narrowed"] and doc["complete"] is True
    assert {g["kind"] for g in doc["groups"]} == {"narrowed"}
    group = doc["groups"][0]
    assert set(group) == {"tool", "action", "pattern", "kind", "count", "rules", "examples"}
    example = group["examples"][0]
    assert set(example) == {"tool", "args", "context", "old", "new"}
    assert example["old"]["effect"] == "allow" and example["new"]["reason"] == "forbidden"
    assert example["new"]["rules"][0]["file"].endswith("fs.sos")


@pytest.mark.parametrize(
    "args",
    [
        ("diff", "nope-old.sos", "nope-new.sos"),
        ("diff", str(RULES / "fs.sos")),
        ("diff", str(RULES / "fs.sos"), str(RULES / "fs.sos"), "--kind", "wider"),
        ("diff", str(RULES / "fs.sos"), str(RULES / "fs.sos"), "--policy", "nope"),
    ],
)
def test_cli_usage_errors_exit_2(args: tuple[str, ...]) -> None:
    code, _, _ = invoke(*args)
    assert code == 2


def test_cli_a_policy_that_does_not_compile_exits_2_with_its_diagnostics(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sos"
    bad.write_text("namespace files\npermit read on /public/**\n")
    code, _, err = invoke("diff", str(RULES / "fs.sos"), str(bad))
    assert code == 2
    assert "NEW" in err and "bad.sos:2:" in err and "SOS102" in err
    junk = tmp_path / "junk.bundle.json"
    junk.write_text("{}")
    code, _, err = invoke("diff", str(junk), str(RULES / "fs.sos"))
    assert code == 2 and "OLD" in err and "Traceback" not in err


def test_a_context_key_the_kernel_schema_does_not_know_is_still_tried() -> None:
    """A newer kernel may pass more keys: a change in a condition on one is found, not
    taken for "no change"."""
    head = FILES_HEAD
    old = head + 'permit read on "/a/**" when context.level < 100\n'
    new = head + 'permit read on "/a/**" when context.level < 200\n'
    report = diff_texts(old, new, max_examples=0)
    assert report.verdict == "changed" and report.complete
    (group,) = report.groups
    assert group.kind == "widened"
    assert all(100 <= c.request.context["level"] < 200 for c in group.examples)
    assert assert_real(old, new, report) > 0


def test_a_tool_without_a_requirement_is_unavailable_before_the_run_policy_as_in_the_kernel(
    tmp_path: Path,
) -> None:
    """The kernel refuses a tool no requirement declares as ``tool_unavailable`` before it
    looks at the run policy; ``diff --policy`` decides each side the same way, so a
    requirement dropped for a tool the run does not manage changes the reason."""
    from sharedos.catalog import ToolRegistry
    from sharedos.kernel import AccessContext, Kernel
    from sharedos.tools.files import register_files_tools

    run = "toolpolicy run { mode open; managed files.write }\n"
    old_text = (
        "namespace files\n"
        "requirement files.read  { action read;  resource path(args.path) }\n"
        "requirement files.write { action write; resource path(args.path) }\n"
        'permit * on "/**"\n' + run
    )
    new_text = old_text.replace(
        "requirement files.read  { action read;  resource path(args.path) }\n", ""
    )
    registry = ToolRegistry()
    register_files_tools(registry, tmp_path)
    context = AccessContext(principal="alice")
    reasons = []
    for text in (old_text, new_text):
        policy = compile_source(text, "p.sos")
        kernel = Kernel(policy, registry)
        _, reason = kernel.resolve("files.read", context, None, policy.tool_policies["run"])
        reasons.append(reason)
        decided = decide_request(policy, Request("files.read", {"path": "/a"}, {}, "run"))
        assert decided.reason is reason, (decided, reason)
    assert [r.value for r in reasons if r is not None] == ["not_in_run_policy", "tool_unavailable"]
    report = diff_texts(old_text, new_text, run_policy="run")
    assert report.verdict == "changed"
    assert [(g.tool, g.kind) for g in report.groups] == [("files.read", "reason changed")]
    assert_real(old_text, new_text, report)


def test_a_tool_leaving_the_run_changes_the_reason_of_calls_with_no_resource() -> None:
    """The same requirement and rules, the run's managed set narrowed: a call whose
    resource cannot be resolved was ``unresolvable_resource`` and becomes
    ``not_in_run_policy``; the report names that change too, not only the narrowing."""
    head = (
        "namespace files\n"
        "requirement files.read  { action read;  resource path(args.path) }\n"
        "requirement files.write { action write; resource path(args.path) }\n"
        'permit * on "/**"\n'
    )
    old = head + "toolpolicy run { mode open; managed files.* }\n"
    new = head + "toolpolicy run { mode open; managed files.write }\n"
    report = diff_texts(old, new, run_policy="run", max_examples=0)
    assert report.complete
    found = {(g.tool, g.kind) for g in report.groups}
    assert ("files.read", "narrowed") in found
    assert ("files.read", "reason changed") in found, found
    (group,) = [g for g in report.groups if g.kind == "reason changed"]
    assert {(c.old.reason.value, c.new.reason.value) for c in group.examples} == {
        ("unresolvable_resource", "not_in_run_policy")
    }
    assert_real(old, new, report)


def test_a_condition_of_many_literals_diffs_in_linear_work() -> None:
    """One value class per literal: picking a readable stand-in ("user") for each
    class matched every readable name against every glob again, n * n matches
    (a condition of 1,500 names took 6 s of CPU, 2,000 names 37 s through the CLI)."""
    head = FILES_HEAD
    old = compile_source(head + 'permit read on "/a/**"\n', "p.sos")
    names = " or ".join(f'context.principal == "p{i}"' for i in range(1500))
    new = compile_source(head + f'permit read on "/a/**" when {names}\n', "p.sos")
    started = time.process_time()
    report = diff_policies(old, new)
    assert report.changed and report.complete
    assert time.process_time() - started < cpu_bound(2.0)


@pytest.mark.parametrize(
    ("old_rule", "new_rule"),
    [
        # each was "no decision can change" (complete, exit 0 under --kind widened):
        # the principal or tenant filling a pattern's segment was tried only with
        # values the patterns suggest, never one the resource condition singles out
        (
            'permit read on "/home/{context.principal}/**" unless startswith(resource, "/home/svc-")',
            'permit read on "/home/{context.principal}/**"',
        ),
        (
            'permit read on "/srv/{context.tenant}/**" unless segment(resource, 2) == "internal"',
            'permit read on "/srv/{context.tenant}/**"',
        ),
        (
            'permit read on "/h/u-{context.principal}/**" unless startswith(resource, "/h/u-svc")',
            'permit read on "/h/u-{context.principal}/**"',
        ),
        ("", 'permit read on "/t/{context.tenant}" when endswith(resource, "-prod")'),
        ("", 'permit read on "/a/{context.turn_id}" when contains(resource, "b")'),
        (
            'permit get on "{context.principal}/*" unless startswith(resource, "bot-")',
            'permit get on "{context.principal}/*"',
        ),
    ],
)
def test_a_resource_condition_on_an_interpolated_segment_is_tried_with_its_values(
    old_rule: str, new_rule: str
) -> None:
    head = (
        "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
        if "get" not in new_rule
        else 'namespace g\nrequirement g.get { action get; resource "{args.owner}/{args.repo}" }\n'
    )
    old, new = head + old_rule + "\n", head + new_rule + "\n"
    assert_only(old, new, "widened")
    assert_only(new, old, "narrowed")  # and the other way round


@pytest.mark.parametrize("test", ["in context.attributes.dirs", "== context.attributes.dir"])
def test_a_segment_compared_with_the_context_can_be_the_interpolated_one(test: str) -> None:
    # was "no decision can change" for `in` (complete, exit 0 under --kind widened): the
    # principal filling the segment was tried as "user", the folders listed as ["x"]
    head = FILES_HEAD
    new = head + f'permit read on "/{{context.principal}}/**" when segment(resource, 1) {test}\n'
    assert_only(head, new, "widened")


APPROVAL_HEAD = (
    "namespace git\nrequirement git.commit { action write; resource path(args.repo) }\n"
    'permit write on "/srv/**"\n'
)
MAINTAINER = 'require approval by role "maintainer" for write on "/srv/**"\n'
SECURITY = 'require approval by group "security" for write on "/srv/**"\n'


@pytest.mark.parametrize(
    ("old_rules", "new_rules", "kind"),
    [
        # each was "reason changed", so `diff --kind widened` exited 0: an intern's
        # approval now lets the commit run; a maintainer's alone, where the security
        # group's was needed too
        (MAINTAINER, MAINTAINER.replace('"maintainer"', '"maintainer", role "intern"'), "widened"),
        (MAINTAINER + SECURITY, MAINTAINER, "widened"),
        (MAINTAINER, MAINTAINER.replace('role "maintainer"', 'role "intern"'), "widened"),
        (MAINTAINER.replace('"maintainer"', '"maintainer", role "intern"'), MAINTAINER, "narrowed"),
        (MAINTAINER, MAINTAINER + SECURITY, "narrowed"),
        # the same approvers, written otherwise: no change
        (MAINTAINER, '@id("m") ' + MAINTAINER, None),
        (MAINTAINER + MAINTAINER.replace("/srv/**", "/srv/*/**"), MAINTAINER, None),
    ],
)
def test_who_may_approve_widens_or_narrows(
    old_rules: str, new_rules: str, kind: str | None
) -> None:
    old, new = APPROVAL_HEAD + old_rules, APPROVAL_HEAD + new_rules
    report = diff_texts(old, new, max_examples=0)
    assert assert_real(old, new, report) == sum(len(g.examples) for g in report.groups)
    assert report.complete
    if kind is None:
        assert report.verdict == "unchanged"
    else:
        assert {g.kind for g in report.groups} == {kind}
        only = diff_texts(old, new, kinds=[kind])
        assert only.verdict == "changed"


@pytest.mark.parametrize(
    "condition",
    [
        # each was "no decision can change" (complete, exit 0 under --kind widened): the
        # roles were tried as [] and the lists membership tests make, never another list
        "when context.roles != []",
        "unless context.roles == []",
        "when not (context.roles == [])",
        'when "a" in context.roles and context.roles != ["a"]',
    ],
)
def test_a_list_compared_with_a_list_is_tried_with_another_list(condition: str) -> None:
    head = FILES_HEAD
    new = head + f'permit read on "/a/**" {condition}\n'
    assert_only(head, new, "widened")


@pytest.mark.parametrize("condition", ["args.n > 1e300", "args.n < -1e300", "args.n > 1.5e308"])
def test_a_bound_where_one_more_is_the_same_float_is_still_passed(condition: str) -> None:
    # was "no decision can change": 1e300 + 1 is 1e300, so no number above it was tried
    head = FILES_HEAD
    new = head + f'permit read on "/a/**" when {condition}\n'
    assert_only(head, new, "widened")


@pytest.mark.parametrize(
    ("old_action", "new_action", "kind"),
    [
        # was "2 tools compared, 0 with different rules ... no decision can change": the
        # tool was skipped because its resource and its rules were the same, though the
        # rule `permit *` ... `unless action == "delete"` decides otherwise for another
        # action (a removal tool re-declared as a read lets everyone delete)
        ("delete", "read", "widened"),
        ("read", "delete", "narrowed"),
    ],
)
def test_a_requirement_whose_action_alone_changed_is_analysed(
    old_action: str, new_action: str, kind: str
) -> None:
    head = (
        "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
        "requirement files.write { action delete; resource path(args.x) }\n"
    )
    rules = 'permit * on "/shared/**" unless action == "delete"\n'
    old = head + f"requirement files.remove {{ action {old_action}; resource path(args.path) }}\n"
    new = old.replace(
        f"files.remove {{ action {old_action};", f"files.remove {{ action {new_action};"
    )
    old, new = old + rules, new + rules
    report = diff_texts(old, new, max_examples=0)
    assert assert_real(old, new, report) > 0
    assert report.complete
    assert {(g.tool, g.kind) for g in report.groups} == {("files.remove", kind)}


def test_kind_never_says_no_decision_changes_when_others_do(tmp_path: Path) -> None:
    """`--kind narrowed` on a change that only widens (and `--kind widened` on one that
    only narrows): exit 0, as asked, but the result must not claim that no decision can
    change, and the JSON counts the requests that change in the kinds left out."""
    old = FILES_HEAD + 'permit read on "/public/**"\n'
    new = FILES_HEAD + 'permit read on "/**"\n'
    a, b = tmp_path / "old.sos", tmp_path / "new.sos"
    a.write_text(old, encoding="utf-8")
    b.write_text(new, encoding="utf-8")
    for first, second, kind in ((a, b, "narrowed"), (b, a, "widened")):
        code, out, _ = invoke("diff", str(first), str(second), "--kind", kind)
        assert code == 0, out
        assert "no decision can change" not in out, out
        assert f"result: no decision changes in the kinds looked for (looking for: {kind}); " in out
        code, out, _ = invoke("diff", str(first), str(second), "--kind", kind, "--format", "json")
        doc = json.loads(out)
        assert code == 0 and doc["verdict"] == "unchanged" and doc["summary"][kind] == 0, doc
        assert doc["summary"]["other_kinds"] >= 1, doc
    # without --kind there are no other kinds
    code, out, _ = invoke("diff", str(a), str(b), "--format", "json")
    assert code == 1 and json.loads(out)["summary"]["other_kinds"] == 0


def test_kind_never_says_no_decision_changes_when_a_toolpolicy_changes_in_another(
    tmp_path: Path,
) -> None:
    """A toolpolicy removed (a run naming it no longer reaches any tool: narrowed), or
    added (widened), diffed with ``--kind`` looking only for the other kind: exit 0, as
    asked, but the result said "no decision can change" and the JSON counted nothing
    in the kinds left out; a toolpolicy is a change like a request."""
    rules = FILES_HEAD + 'permit read on "/public/**"\n'
    run = "toolpolicy r {\n  mode open\n  managed files.*\n}\n"
    a, b = tmp_path / "with.sos", tmp_path / "without.sos"
    a.write_text(rules + run, encoding="utf-8")
    b.write_text(rules, encoding="utf-8")
    for first, second, kind in ((a, b, "widened"), (b, a, "narrowed")):
        code, out, _ = invoke("diff", str(first), str(second), "--kind", kind)
        assert code == 0, out
        assert "no decision can change" not in out, out
        assert out.rstrip().endswith(
            f"result: no decision changes in the kinds looked for (looking for: {kind}); "
            "1 toolpolicy changes in other kinds"
        ), out
        code, out, _ = invoke("diff", str(first), str(second), "--kind", kind, "--format", "json")
        doc = json.loads(out)
        assert code == 0 and doc["verdict"] == "unchanged" and not doc["run_policies"], doc
        assert doc["summary"]["other_run_policies"] == 1, doc
    # in the kind looked for it is listed, not counted as another kind
    code, out, _ = invoke("diff", str(a), str(b), "--kind", "narrowed", "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["summary"]["other_run_policies"] == 0 and doc["run_policies"]


def test_a_change_no_rule_makes_is_shown_on_what_made_it() -> None:
    """A tool a run policy now manages decides otherwise though its requirement and rules
    are the same: the text said those requests were "on (no rule: the requirement
    changed)", sending a reviewer to a requirement nobody touched."""
    old = FILES_HEAD + 'permit read on "/a/**"\n'
    new = old + "toolpolicy r {\n  mode open\n  managed files.*\n}\n"
    report = diff_texts(old, new, run_policy="r", max_examples=0)
    assert_real(old, new, report)
    text = report.render()
    nameless = [line for line in text.splitlines() if "(no rule:" in line]
    assert nameless and all("(no rule: the run policy changed)" in x for x in nameless), text
    # a changed requirement is still said to be one
    moved = FILES_HEAD.replace("path(args.path)", "path(args.file)") + 'permit read on "/a/**"\n'
    text = diff_texts(old, moved, max_examples=0).render()
    assert "(no rule: the requirement changed)" in text, text
