# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)
"""``sharedos evidence replay``: recorded attempts decided again under a candidate policy.

Traffic is made by a real ``RuntimeHost`` running the shipped rules (``rules/``,
``policy/``) with the built-in files tools over a real sandbox, recorded in a
real store (SQLite and PostgreSQL); the candidate is the shipped rules with
one rule added or taken away. Every change a test reads is checked against
the candidate's own decision of the same request.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
from click.testing import CliRunner

from sharedos.catalog import ToolRegistry
from sharedos.cli.main import main
from sharedos.evidence.export import iter_records
from sharedos.evidence.replay import replay
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.policy import compile_paths, compile_sources
from sharedos.policy.analysis.compare import decide_request
from sharedos.tools import register_files_tools
from tests.evidence.stores import backend, opener, store  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"
POLICY = REPO / "policy"
FILES = (RULES / "files.sos").read_text(encoding="utf-8")


def shipped() -> Any:
    return compile_paths([RULES, POLICY])


def candidate(tmp_path: Path, files_text: str) -> Path:
    """A copy of the shipped ``rules/`` and ``policy/`` with rules/files.sos replaced by
    ``files_text``; returns the copy's ``rules`` directory (``policy`` beside it)."""
    out = tmp_path / "candidate"
    for name in ("rules", "policy"):
        (out / name).mkdir(parents=True, exist_ok=True)
        for src in (REPO / name).glob("*.sos"):
            text = files_text if src.name == "files.sos" else src.read_text(encoding="utf-8")
            (out / name / src.name).write_text(text, encoding="utf-8")
    return out / "rules"


def candidate_policy(tmp_path: Path, files_text: str) -> Any:
    rules = candidate(tmp_path, files_text)
    return compile_paths([rules, rules.parent / "policy"])


#: (principal, roles, tool, arguments)
TRAFFIC: list[tuple[str, tuple[str, ...], str, Any]] = [
    ("bob", (), "files.read", {"path": "/public/readme.txt"}),
    ("bob", (), "files.write", {"path": "/public/readme.txt", "content": "x"}),
    ("bob", ("editor",), "files.write", {"path": "/shared/plan.md", "content": "y"}),
    ("carol", ("editor",), "files.read", {"path": "/shared/plan.md"}),
    ("bob", (), "files.read", {"path": "/private/salaries.csv"}),
    ("alice", ("admin",), "files.read", {"path": "/private/salaries.csv"}),
    ("bob", (), "files.read", {"path": "/public/../../etc/passwd"}),
    ("bob", (), "files.rm", {"path": "/public/a"}),  # no such tool: tool_unavailable
    # invalid_arguments (path is required): replayed as that refusal (the schema is the host's)
    ("bob", (), "files.read", {"nope": 1}),
]


def record_traffic(store: Any, tmp_path: Path, traffic: list[Any] = TRAFFIC) -> None:
    sandbox = tmp_path / "sandbox"
    for d in ("public", "shared", "private", "home/bob"):
        (sandbox / d).mkdir(parents=True, exist_ok=True)
    (sandbox / "public" / "readme.txt").write_text("hello")
    (sandbox / "private" / "salaries.csv").write_text("1")
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    policy = shipped()
    host = RuntimeHost(Kernel(policy, registry), store)
    run = policy.tool_policies["dev-open"]

    async def calls() -> None:
        for i, (principal, roles, tool, args) in enumerate(traffic):
            ctx = AccessContext(principal=principal, roles=roles, turn_id=f"turn-{i % 3}")
            await host.invoke_tool(ToolCall(call_id=f"c{i}", tool=tool, arguments=args), ctx, run)

    anyio.run(calls)


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def test_the_same_policy_changes_nothing(store: Any, tmp_path: Path) -> None:
    record_traffic(store, tmp_path)
    report = replay(iter_records(store), shipped(), old=shipped())
    assert not report.changed
    assert report.attempts == len(TRAFFIC)
    assert report.replayed == len(TRAFFIC) - 1
    assert report.skipped == {"refused before a decision: tool_unavailable": 1}
    # OLD decides every attempt it decided as it was recorded
    assert report.matched_old == report.replayed and report.mismatched == 0


def test_taking_a_permit_away_narrows_the_calls_it_allowed(store: Any, tmp_path: Path) -> None:
    record_traffic(store, tmp_path)
    text = FILES.replace('@id("files-shared-editors")\npermit * on "/shared/**"', "#", 1)
    assert text != FILES
    new = candidate_policy(tmp_path, text)
    report = replay(iter_records(store), new, old=shipped(), max_examples=0)
    assert report.changed
    # the editors' write and read of /shared/plan.md: one group per tool
    assert {(g.tool, g.kind, g.pattern) for g in report.groups} == {
        ("files.write", "narrowed", "/shared/**"),
        ("files.read", "narrowed", "/shared/**"),
    }
    changes = [c for g in report.groups for c in g.examples]
    assert {c.request.args["path"] for c in changes} == {"/shared/plan.md"}
    for group in report.groups:
        assert [(side, ref.id) for side, ref in group.rules] == [("old", "files-shared-editors")]
    for change in changes:
        # the candidate really decides the recorded request so
        again = decide_request(new, change.request)
        assert (again.effect.value, again.reason.value) == ("deny", "no_matching_permit")
        assert change.request.origin is not None and change.request.origin["seq"] is not None


def test_adding_a_permit_widens_and_names_the_new_rule(store: Any, tmp_path: Path) -> None:
    record_traffic(store, tmp_path)
    text = FILES + '\n@id("public-writable")\npermit write on "/public/**"\n'
    report = replay(iter_records(store), candidate_policy(tmp_path, text), max_examples=0)
    (group,) = report.groups
    assert group.kind == "widened" and group.tool == "files.write"
    assert group.pattern == "/public/**"
    assert [(side, ref.id) for side, ref in group.rules] == [("new", "public-writable")]
    text_out = report.render()
    assert "widened: files.write (write) on /public/**  [1 request]" in text_out
    assert "+public-writable (rules/files.sos:" in text_out
    assert "(attempt " in text_out and "of turn turn-1" in text_out


def test_without_the_old_policy_recorded_rules_are_named_by_id(store: Any, tmp_path: Path) -> None:
    record_traffic(store, tmp_path)
    text = FILES.replace('forbid * on "/private/**"', 'forbid * on "/private/x/**"', 1)
    report = replay(iter_records(store), candidate_policy(tmp_path, text), max_examples=0)
    kinds = {(g.kind, g.tool) for g in report.groups}
    # bob's read of /private/salaries.csv was forbidden; now nothing permits it
    assert kinds == {("reason changed", "files.read")}
    (group,) = report.groups
    assert ("old", "files-private-admins-only") in [(s, r.id) for s, r in group.rules]
    assert "-files-private-admins-only" in report.render()


def version_2_store(path: Path) -> None:
    """A store a version-2 SharedOS left: decisions recorded, no decision context."""
    from sharedos.evidence.sqlite_schema import SCHEMA_V2

    conn = sqlite3.connect(path, isolation_level=None)
    for statement in SCHEMA_V2:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO attempts (turn_id, call_id, tool, started_at, arguments_digest, arguments,"
        " effect, resource, principal, tenant) VALUES ('t1', 'a', 'files.read',"
        " '2026-01-01T00:00:00Z', 'sha256:0', '{\"path\": \"/public/a\"}', 'allow',"
        " '/public/a', 'bob', 'default')"
    )
    conn.execute("PRAGMA user_version=2")
    conn.close()


def test_attempts_recorded_before_schema_4_are_counted_not_replayed(tmp_path: Path) -> None:
    db = tmp_path / "v2.db"
    version_2_store(db)
    code, out, _ = cli("evidence", "replay", "--db", str(db), "--policy", str(RULES))
    assert code == 0, out
    assert "1 attempt: no_context: recorded before schema 4" in out
    assert "result: no attempt could be replayed" in out


def test_cli_exit_codes_and_json(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    s = SqliteEvidenceStore(db)
    try:
        record_traffic(s, tmp_path)
    finally:
        s.close()
    same = ["evidence", "replay", "--db", str(db), "--policy", str(RULES), "--with", str(POLICY)]
    code, out, _ = cli(*same)
    assert code == 0, out
    assert "result: no recorded decision would change" in out
    text = FILES + '\n@id("public-writable")\npermit write on "/public/**"\n'
    widened = candidate(tmp_path, text)
    with_policy = str(widened.parent / "policy")
    args = ["evidence", "replay", "--db", str(db), "--policy", str(widened), "--with", with_policy]
    code, out, _ = cli(*args, "--old", str(RULES))
    assert code == 1, out
    assert "result: some recorded decisions would change" in out
    code, out, _ = cli(*args, "--format", "json", "--kind", "narrowed")
    assert code == 0, out  # only narrowings were asked for: none
    code, out, _ = cli(*args, "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["verdict"] == "changed"
    assert doc["summary"]["widened"] == 1 and doc["summary"]["replayed"] == len(TRAFFIC) - 1
    (group,) = doc["groups"]
    (example,) = group["examples"]
    assert example["old"]["effect"] == "deny" and example["new"]["effect"] == "allow"
    assert example["recorded"]["call_id"] == "c1"
    assert doc["skipped"] == {"refused before a decision: tool_unavailable": 1}
    # a window that holds nothing
    code, out, _ = cli(*args, "--since", "2999-01-01T00:00:00Z")
    assert code == 0 and "0 attempts read" in out
    code, out, _ = cli(*args, "--turn", "turn-1")  # a turn the store holds
    assert code == 1 and "3 attempts read" in out, out
    # usage errors: exit 2, no traceback
    bad = tmp_path / "bad.sos"
    bad.write_text("namespace files\npermit read on\n")
    for argv in (
        ["evidence", "replay", "--db", str(tmp_path / "missing.db"), "--policy", str(RULES)],
        ["evidence", "replay", "--db", str(db), "--policy", str(bad)],
        ["evidence", "replay", "--db", str(db), "--policy", str(RULES), "--since", "yesterday"],
        ["evidence", "replay", "--db", str(db), "--policy", str(RULES), "--time-zone", "Mars/X"],
        ["evidence", "replay", "--db", str(db), "--policy", str(RULES), "--run-policy", "nope"],
        # a mistyped turn id compares nothing: it must not pass as "no change"
        ["evidence", "replay", "--db", str(db), "--policy", str(RULES), "--turn", "turn-9"],
        ["evidence", "shadow", "--db", str(db), "--turn", "turn-9"],
    ):
        code, out, err = cli(*argv)
        assert code == 2, (argv, out, err)
        assert "Traceback" not in out + err


def test_the_deployed_bundle_is_old_for_candidate_sources_given_with_run_policies(
    tmp_path: Path,
) -> None:
    """``--old`` is the bundle the host enforced (the whole policy), NEW the working tree's
    rules ``--with`` their run policies (needed for ``--run-policy``): ``--with`` compiles
    with NEW, as documented. It was refused ("OLD is a bundle: --with does not apply to
    it"), so the recorded policy could not be named while NEW needed ``--with``."""
    db = tmp_path / "e.db"
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    s = SqliteEvidenceStore(db)
    try:
        record_traffic(s, tmp_path)
    finally:
        s.close()
    bundle = tmp_path / "deployed.bundle.json"
    shipped().save_bundle(bundle)
    code, out, err = cli("evidence", "replay", "--db", str(db), "--policy", str(RULES),
                         "--with", str(POLICY), "--old", str(bundle), "--run-policy", "dev-open",
                         "--format", "json")  # fmt: skip
    assert code == 0, (out, err)
    doc = json.loads(out)
    assert doc["old"]["bundle_hash"] == doc["policy"]["bundle_hash"]
    assert doc["summary"]["matched_old"] == len(TRAFFIC) - 1, doc
    assert doc["summary"]["mismatched"] == 0, doc
    # NEW a bundle, no OLD: --with would apply to nothing (usage error, said)
    code, _, err = cli("evidence", "replay", "--db", str(db), "--policy", str(bundle),
                       "--with", str(POLICY))  # fmt: skip
    assert code == 2 and "--with" in err, err


def test_a_run_policy_of_the_candidate_applies(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    s = SqliteEvidenceStore(db)
    try:
        record_traffic(s, tmp_path)
        new = compile_sources(
            [
                *((p.name, p.read_text()) for p in sorted(RULES.glob("*.sos"))),
                ("narrow.sos", "toolpolicy only-read {\n  mode open\n  managed files.read\n}\n"),
            ]
        )
        report = replay(iter_records(s), new, run_policy="only-read", max_examples=0)
    finally:
        s.close()
    changes = [c for g in report.groups for c in g.examples]
    assert changes and all(c.request.tool == "files.write" for c in changes)
    assert {c.new.reason.value for c in changes} == {"not_in_run_policy"}


def test_a_call_the_recorded_run_refused_is_widened_by_a_run_policy_that_now_manages_it(
    tmp_path: Path,
) -> None:
    """A write refused ``not_in_run_policy`` (the run managed files.read only), replayed
    ``--run-policy`` under a candidate whose toolpolicy of that name manages files.*: the
    write now reaches the rules, which allow it. It was skipped as "refused before a
    decision", and replay said no recorded decision would change (exit 0), although the
    reverse, a run policy that stops managing a tool, is reported narrowed."""
    rules = [(p.name, p.read_text()) for p in sorted(RULES.glob("*.sos"))]
    old = compile_sources(
        [*rules, ("run.sos", "toolpolicy r {\n  mode open\n  managed files.read\n}\n")]
    )
    new = compile_sources(
        [*rules, ("run.sos", "toolpolicy r {\n  mode open\n  managed files.*\n}\n")]
    )
    sandbox = tmp_path / "sandbox"
    (sandbox / "home" / "bob").mkdir(parents=True)
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    s = SqliteEvidenceStore(tmp_path / "e.db")
    try:
        host = RuntimeHost(Kernel(old, registry), s)
        write = {"path": "/home/bob/x.txt", "content": "x"}

        async def calls() -> None:
            ctx = AccessContext(principal="bob", turn_id="turn-1")
            for i, (tool, args) in enumerate(
                (("files.write", write), ("files.read", {"path": "/home/bob"}))
            ):
                call = ToolCall(call_id=f"c{i}", tool=tool, arguments=args)
                await host.invoke_tool(call, ctx, old.tool_policies["r"])

        anyio.run(calls)
        (refused, _read) = iter_records(s)
        assert (refused.effect, str(refused.reason)) == (None, "not_in_run_policy")
        report = replay(iter_records(s), new, old=old, run_policy="r", max_examples=0)
        plain = replay(iter_records(s), new, old=old, max_examples=0)
        same = replay(iter_records(s), old, old=old, run_policy="r", max_examples=0)
    finally:
        s.close()
    (group,) = report.groups
    (change,) = group.examples
    assert group.kind == "widened" and change.request.tool == "files.write"
    assert (change.old.reason.value, change.new.effect.value) == ("not_in_run_policy", "allow")
    assert report.replayed == 2 and not report.skipped and report.mismatched == 0
    # the same run policy: no change; no run policy asked for: the refusal is not replayed
    assert not same.groups and same.mismatched == 0 and same.replayed == 2
    assert plain.skipped == {"refused before a decision: not_in_run_policy": 1}


def test_a_tool_the_host_has_that_a_requirement_now_declares_is_replayed(tmp_path: Path) -> None:
    """files.write is a tool of the host, but the enforced policy declares no requirement
    for it: the call is refused ``tool_unavailable`` before any rule. A candidate that
    adds the requirement and a permit lets it run: replay skipped the attempt ("refused
    before a decision") and said no recorded decision would change. A tool the host
    does not have (no namespace recorded) is still not replayed."""
    head = "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
    old = compile_sources([("f.sos", head + 'permit read on "/**"\n')])
    new = compile_sources(
        [
            (
                "f.sos",
                head + "requirement files.write { action write; resource path(args.path) }\n"
                'permit read, write on "/**"\n',
            )
        ]
    )
    registry = ToolRegistry()
    register_files_tools(registry, tmp_path)
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    s = SqliteEvidenceStore(tmp_path / "e.db")
    try:
        host = RuntimeHost(Kernel(old, registry), s)
        run = shipped().tool_policies["dev-open"]

        async def calls() -> None:
            ctx = AccessContext(principal="bob", turn_id="turn-1")
            for i, tool in enumerate(("files.write", "files.rm")):
                call = ToolCall(
                    call_id=f"c{i}", tool=tool, arguments={"path": "/x", "content": "x"}
                )
                await host.invoke_tool(call, ctx, run)

        anyio.run(calls)
        assert [str(r.reason) for r in iter_records(s)] == ["tool_unavailable"] * 2
        report = replay(iter_records(s), new, old=old, max_examples=0)
        same = replay(iter_records(s), old, old=old, max_examples=0)
    finally:
        s.close()
    (group,) = report.groups
    (change,) = group.examples
    assert group.kind == "widened" and change.request.tool == "files.write"
    assert (change.old.reason.value, change.new.effect.value) == ("tool_unavailable", "allow")
    assert report.skipped == {"refused before a decision: tool_unavailable": 1}
    assert report.mismatched == 0
    assert not same.groups and same.replayed == 1 and same.mismatched == 0


def test_a_call_the_turns_catalogue_did_not_list_is_replayed_under_the_catalogue_new_lists(
    tmp_path: Path,
) -> None:
    """A turn's catalogue is the policy's (``could_permit`` for the turn's context): bob
    may not write under the enforced policy, so files.write was not listed and his call
    was refused ``not_in_turn_catalog`` before any rule. A candidate that lets bob write
    lists it, and the call runs: replay skipped the attempt ("refused before a
    decision") and said no recorded decision would change. Under a candidate that
    still does not list it (the same policy), it is no change."""
    head = (
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        "requirement files.write { action write; resource path(args.path) }\n"
        'permit read on "/**"\n'
    )
    old = compile_sources([("f.sos", head)])
    new = compile_sources([("f.sos", head + 'permit write on "/home/{context.principal}/**"\n')])
    sandbox = tmp_path / "sandbox"
    (sandbox / "home" / "bob").mkdir(parents=True)
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    s = SqliteEvidenceStore(tmp_path / "e.db")
    try:
        kernel = Kernel(old, registry)
        host = RuntimeHost(kernel, s)
        run = shipped().tool_policies["dev-open"]
        ctx = AccessContext(principal="bob", turn_id="turn-1")
        catalog = kernel.list_tools(ctx, run)
        assert "files.read" in catalog and "files.write" not in catalog

        async def calls() -> None:
            for i, (tool, args) in enumerate(
                (
                    ("files.write", {"path": "/home/bob/x.txt", "content": "x"}),
                    ("files.read", {"path": "/home/bob"}),
                )
            ):
                call = ToolCall(call_id=f"c{i}", tool=tool, arguments=args)
                await host.invoke_tool(call, ctx, run, catalog=catalog)

        anyio.run(calls)
        (refused, _read) = iter_records(s)
        assert (refused.effect, str(refused.reason)) == (None, "not_in_turn_catalog")
        report = replay(iter_records(s), new, old=old, max_examples=0)
        same = replay(iter_records(s), old, old=old, max_examples=0)
        # a run policy NEW's toolpolicy refuses first, as the kernel checks it first
        narrow = compile_sources(
            [
                ("f.sos", head + 'permit write on "/home/{context.principal}/**"\n'),
                ("r.sos", "toolpolicy r {\n  mode open\n  managed files.read\n}\n"),
            ]
        )
        ran = replay(iter_records(s), narrow, run_policy="r", max_examples=0)
    finally:
        s.close()
    (group,) = report.groups
    (change,) = group.examples
    assert group.kind == "widened" and change.request.tool == "files.write"
    assert (change.old.reason.value, change.new.effect.value) == ("not_in_turn_catalog", "allow")
    assert report.replayed == 2 and not report.skipped and report.mismatched == 0
    assert not same.groups and same.replayed == 2 and same.mismatched == 0
    (group,) = ran.groups
    assert group.kind == "reason changed"
    assert [c.new.reason.value for c in group.examples] == ["not_in_run_policy"]


def test_a_call_refused_invalid_arguments_is_refused_as_a_turn_under_new_would(
    tmp_path: Path,
) -> None:
    """The arguments are checked after the tool's lookup, the run policy and the turn's
    catalogue: bob's write with no path (invalid for the tool's schema) was listed and
    refused ``invalid_arguments``. A candidate that lets bob write nowhere does not list
    files.write, and its host refuses the call ``not_in_turn_catalog``; replay skipped
    it ("refused before a decision") and found no change. It is now the same refusal
    when NEW lists the tool (the schema is the host's), whatever NEW's rules, and the
    earlier step's refusal when NEW makes one (not listed; no requirement)."""
    head = (
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        "requirement files.write { action write; resource path(args.path) }\n"
        'permit read on "/**"\n'
    )
    writes = head + 'permit write on "/home/{context.principal}/**"\n'
    old = compile_sources([("f.sos", writes)])
    sandbox = tmp_path / "sandbox"
    (sandbox / "home" / "bob").mkdir(parents=True)
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    with SqliteEvidenceStore(tmp_path / "e.db") as s:
        kernel = Kernel(old, registry)
        run = shipped().tool_policies["dev-open"]
        ctx = AccessContext(principal="bob", turn_id="turn-1")
        catalog = kernel.list_tools(ctx, run)
        assert "files.write" in catalog
        call = ToolCall(call_id="c0", tool="files.write", arguments={"path": 7})
        anyio.run(lambda: RuntimeHost(kernel, s).invoke_tool(call, ctx, run, catalog=catalog))
        (refused,) = iter_records(s)
    assert (refused.effect, str(refused.reason)) == (None, "invalid_arguments")
    unlisted = replay([refused], compile_sources([("f.sos", head)]), old=old, max_examples=0)
    (group,) = unlisted.groups
    assert group.kind == "reason changed" and unlisted.mismatched == 0
    assert [c.new.reason.value for c in group.examples] == ["not_in_turn_catalog"]
    # listed under NEW: the same refusal, whatever its rules would make of the arguments
    anywhere = compile_sources([("f.sos", head + 'permit write on "/**"\n')])
    for same in (old, anywhere):
        report = replay([refused], same, old=old, max_examples=0)
        assert not report.groups and report.replayed == 1 and not report.skipped
    # no requirement under NEW: refused before the catalogue is read
    gone = compile_sources([("f.sos", head.replace("requirement files.write", "#"))])
    (group,) = replay([refused], gone, max_examples=0).groups
    assert [c.new.reason.value for c in group.examples] == ["tool_unavailable"]


OFFICE_HOURS = """namespace files
requirement files.read { action read; resource path(args.path) }
permit read on "/public/**" when context.now.hour >= 9 and context.now.hour < 18
"""
#: the host's clock in the tests below: Monday 09:30 UTC, whatever the wall clock says
MONDAY_0930 = 1796635800.0


def read_on_the_hosts_clock(
    store: Any, tmp_path: Path, policy: Any, calls: int, shadow: Any = None
) -> None:
    """bob reads /public/a.txt ``calls`` times through a host whose kernel (and ``shadow``,
    when given) run on ``MONDAY_0930``."""
    sandbox = tmp_path / "sandbox"
    (sandbox / "public").mkdir(parents=True)
    (sandbox / "public" / "a.txt").write_text("a")
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    host = RuntimeHost(Kernel(policy, registry, clock=lambda: MONDAY_0930), store, shadow=shadow)
    run = shipped().tool_policies["dev-open"]

    async def reads() -> None:
        ctx = AccessContext(principal="bob", turn_id="turn-1")
        for i in range(calls):
            call = ToolCall(call_id=f"c{i}", tool="files.read", arguments={"path": "/public/a.txt"})
            await host.invoke_tool(call, ctx, run)

    anyio.run(reads)


def test_a_policy_on_the_clock_is_replayed_at_the_moment_it_decided(
    store: Any, tmp_path: Path
) -> None:
    # The record keeps the `now` the decision saw, so a replay at any hour decides the
    # same. (Replaying from `started_at`, the wall clock, denied these calls before 09:00.)
    policy = compile_sources([("hours.sos", OFFICE_HOURS)])
    read_on_the_hosts_clock(store, tmp_path, policy, calls=3)
    records = list(iter_records(store))
    attempts = [r for r in records if r.effect is not None]
    assert len(attempts) == 3 and all(r.effect == "allow" for r in attempts)
    assert all(r.context["now"]["hour"] == 9 for r in attempts)
    report = replay(records, policy, old=policy, max_examples=0)
    assert report.matched_old == 3 and report.mismatched == 0
    assert not report.notes  # the time was recorded, not guessed from started_at


def test_a_shadow_policy_on_the_clock_is_replayed_at_the_moment_it_decided(
    store: Any, tmp_path: Path
) -> None:
    # The enforced policy reads no time, the shadow candidate does: the record still
    # keeps the host clock's moment, so the replay of the candidate agrees with the
    # shadow decisions made at that moment (not with the wall clock's hour).
    from sharedos.kernel.shadow import ShadowDecider

    head = "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
    old = compile_sources([("p.sos", head + 'permit read on "/public/**"\n')])
    new = compile_sources([("p.sos", OFFICE_HOURS)])
    shadow = ShadowDecider(new, enforced=old, clock=lambda: MONDAY_0930)
    read_on_the_hosts_clock(store, tmp_path, old, calls=1, shadow=shadow)
    records = list(iter_records(store))
    (attempt,) = [r for r in records if r.effect is not None]
    assert attempt.shadow is not None and attempt.shadow["effect"] == "allow"
    assert attempt.context["now"]["hour"] == 9
    report = replay(records, new, old=old, max_examples=0)
    assert not report.groups and report.mismatched == 0 and not report.notes


def test_an_allowed_call_with_no_handler_keeps_the_moment_it_was_decided(
    store: Any, tmp_path: Path
) -> None:
    # An allowed call refused afterwards (the tool has no handler: handler_error) was
    # recorded without the `now` its decision saw: a replay guessed it from started_at.
    from sharedos.catalog import ToolDefinition

    registry = ToolRegistry()
    registry.register(
        ToolDefinition(
            name="files.read",
            description="Read (no handler here).",
            input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        )
    )
    policy = compile_sources([("hours.sos", OFFICE_HOURS)])
    host = RuntimeHost(Kernel(policy, registry, clock=lambda: MONDAY_0930), store)
    run = shipped().tool_policies["dev-open"]

    async def read() -> None:
        ctx = AccessContext(principal="bob", turn_id="turn-1")
        call = ToolCall(call_id="c0", tool="files.read", arguments={"path": "/public/a.txt"})
        await host.invoke_tool(call, ctx, run)

    anyio.run(read)
    records = list(iter_records(store))
    (attempt,) = records
    assert attempt.effect == "allow" and str(attempt.reason) == "handler_error"
    assert attempt.context["now"]["hour"] == 9
    report = replay(records, policy, old=policy)
    assert report.mismatched == 0 and not report.notes and not report.groups


def test_the_json_document_is_the_one_the_docs_spell(tmp_path: Path) -> None:
    # the docs said "diff's document plus ...": a CI script reading doc["new"] or
    # doc["complete"] as for diff found neither (NEW is "policy"; nothing is analysed)
    import re

    db = tmp_path / "e.db"
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    s = SqliteEvidenceStore(db)
    try:
        record_traffic(s, tmp_path)
    finally:
        s.close()
    policy = ["--policy", str(RULES), "--with", str(POLICY)]
    code, out, _ = cli("evidence", "replay", "--db", str(db), *policy, "--old", str(RULES),
                       "--format", "json")  # fmt: skip
    assert code == 0, out
    doc = json.loads(out)
    text = (REPO / "docs" / "policy-language.md").read_text(encoding="utf-8")
    section = text.split("### `sharedos evidence replay --db DB --policy NEW`", 1)[1]
    spelled = section.split("`--format json` prints\n`", 1)[1].split("`:", 1)[0]
    spelled = " ".join(spelled.split())
    top = set(re.findall(r'"(\w+)"', re.sub(r'"verdict": "changed"\|"unchanged"', '"verdict"',
                                            spelled)))  # fmt: skip
    assert top == set(doc), (sorted(top), sorted(doc))
    summary = re.search(r'"summary": \{([^}]*)\}', spelled)
    assert summary is not None
    assert {k.strip() for k in summary.group(1).split(",")} == set(doc["summary"])


#: edits of a recorded decision context that SharedOS never writes, each of which a loose
#: reading would replay as another request (the roles "admin" as ["a", "d", "m", "i", "n"])
MALFORMED_CONTEXTS = [
    '{"principal":"alice","tenant":"default","roles":"admin","attributes":{}}',
    '{"principal":"alice","tenant":"default","roles":["admin"],"attributes":[["k",1]]}',
    '{"principal":"alice","tenant":"default","roles":[["admin"]],"attributes":{}}',
    '{"principal":"ali\\u0000ce","tenant":"default","roles":["admin"],"attributes":{}}',
    '{"principal":"alice","tenant":7,"roles":["admin"],"attributes":{}}',
]


def test_a_context_changed_outside_sharedos_is_not_replayed_as_another(tmp_path: Path) -> None:
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    db = tmp_path / "e.db"
    with SqliteEvidenceStore(db) as s:
        record_traffic(s, tmp_path)
    alice = "SELECT seq FROM chain WHERE kind = 'attempt' AND principal = 'alice'"
    for i, text in enumerate(MALFORMED_CONTEXTS):
        edited = tmp_path / f"edited{i}.db"
        edited.write_bytes(db.read_bytes())
        with sqlite3.connect(edited) as con:
            con.execute(f"UPDATE chain SET context = ? WHERE seq = ({alice})", (text,))
        with SqliteEvidenceStore(edited) as s:
            report = replay(iter_records(s), shipped(), old=shipped(), max_examples=0)
        # never decided as a made-up context (alice without her role: "narrowed")
        assert not report.changed, (text, report.render())
        (why,) = [k for k in report.skipped if k.startswith("context_malformed")]
        assert report.skipped[why] == 1, text
        assert report.mismatched == 0 and report.replayed == len(TRAFFIC) - 2


def test_a_time_of_the_call_changed_outside_sharedos_is_not_replayed(
    store: Any, tmp_path: Path
) -> None:
    policy = compile_sources([("hours.sos", OFFICE_HOURS)])
    read_on_the_hosts_clock(store, tmp_path, policy, calls=1)
    (record,) = [r for r in iter_records(store) if r.effect is not None]
    assert record.effect == "allow"
    assert not replay([record], policy, old=policy).skipped
    now = dict(record.context["now"])
    for edit in ({"hour": 7}, {"hour": "9"}, {"weekday": None}, {"zone": "Mars/Base"}):
        bad = {**now, **edit}
        changed = replace(record, context={**record.context, "now": bad})
        report = replay([changed], policy, old=policy)
        assert not report.changed and report.replayed == 0, (edit, report.render())
        assert list(report.skipped) == [
            "context_malformed: not a decision context SharedOS records (the store was "
            "changed outside SharedOS?)"
        ]


def test_kind_never_says_no_recorded_decision_changes_when_others_do(tmp_path: Path) -> None:
    """`--kind narrowed` over traffic a candidate only widens: exit 0, as asked, but the
    result must not claim that no recorded decision would change, and the JSON counts
    the attempts that change in the kinds left out (as `evidence shadow` does)."""
    db = tmp_path / "e.db"
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    s = SqliteEvidenceStore(db)
    try:
        record_traffic(s, tmp_path, TRAFFIC[:2])
    finally:
        s.close()
    widened = candidate(
        tmp_path, FILES + '\n@id("public-writable")\npermit write on "/public/**"\n'
    )
    args = ["evidence", "replay", "--db", str(db), "--policy", str(widened),
            "--with", str(widened.parent / "policy"), "--kind", "narrowed"]  # fmt: skip
    code, out, _ = cli(*args)
    assert code == 0, out
    assert "no recorded decision would change" not in out, out
    assert (
        "result: no recorded decision changes in the kinds looked for (looking for: narrowed); "
        "1 attempt in other kinds"
    ) in out, out
    code, out, _ = cli(*args, "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["verdict"] == "unchanged", doc
    assert (doc["summary"]["narrowed"], doc["summary"]["other_kinds"]) == (0, 1), doc
