"""Shadow mode through the real call path: ``RuntimeHost.invoke_tool`` with a candidate policy.

Every call the enforced policy decides is decided by the candidate too, on the
same arguments and context; only the enforced decision acts (the handler runs
or not by it alone); the attempt's row carries the candidate's decision and
rule ids (schema 5, ``shadow``), on SQLite and PostgreSQL. A candidate that
raises is recorded as an error and changes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall, ToolResult
from sharedos.kernel.shadow import MAX_SHADOW_ERROR, ShadowDecider
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.policy import compile_source
from tests.evidence.stores import backend  # noqa: F401  (SQLite and PostgreSQL)

from .conftest import ADMIN, ALICE, ALL, POLICY, echo_handler

pytestmark = pytest.mark.anyio

#: the candidate: /public/** loses read (narrowed), gains write (widened); admin.reset
#: has no requirement any more; vault.get reads the clock
CANDIDATE = (
    POLICY.replace(
        'permit read, list, search on "/public/**"',
        '@id("public-list") permit list, search on "/public/**"\n'
        '@id("public-write") permit write on "/public/**"',
    )
    .replace(
        "requirement admin.reset { action reset; resource path(args.path) }\n"
        'permit reset on "/**" when "admin" in context.roles\n',
        "",
    )
    .replace(
        'permit get on "/**"',
        '@id("vault-by-day") permit get on "/**" when context.now.year >= 2000',
    )
)


def candidate() -> ShadowDecider:
    return ShadowDecider(compile_source(CANDIDATE, "candidate.sos"))


async def call(
    host: RuntimeHost, tool: str, arguments: Any, context: AccessContext = ALICE
) -> ToolResult:
    return await host.invoke_tool(ToolCall(tool=tool, arguments=arguments), context, ALL)


def row(host: RuntimeHost, result: ToolResult) -> Any:
    (rec,) = host.evidence.query(call_id=result.call_id)
    return rec


def test_the_candidate_differs_where_the_tests_say() -> None:
    """The fixture itself: the candidate compiles and is another policy."""
    policy = compile_source(POLICY, "kernel-test.sos")
    assert candidate().policy_hash != policy.bundle_hash
    assert "admin.reset" not in candidate().policy.requirements


async def test_only_the_enforced_decision_acts_and_the_row_carries_both(
    backend: tuple[str, str],  # noqa: F811
    policy: Any,
    registry: ToolRegistry,
    sandbox: Path,
) -> None:
    from sharedos.evidence.url import open_store

    shadow = candidate()
    with open_store(backend[1]) as store:
        host = RuntimeHost(Kernel(policy, registry), store, shadow=shadow)

        # narrowed: the enforced policy allows the read, the candidate would deny it
        read = await call(host, "files.read", {"path": "/public/a.txt"})
        assert read.outcome is Outcome.SUCCEEDED
        assert read.content == [{"type": "text", "text": "public A"}]
        rec = row(host, read)
        assert (rec.effect, rec.rule_ids) == ("allow", ("kernel-test.sos:10",))
        assert rec.shadow == {
            "policy": shadow.policy_hash,
            "effect": "deny",
            "reason": "no_matching_permit",
            "rule_ids": [],
        }

        # widened: the candidate would allow the write, the enforced policy refuses it
        write = await call(host, "files.write", {"path": "/public/new.txt", "content": "x"})
        assert write.outcome is Outcome.DENIED
        assert write.reason is ReasonCode.NO_MATCHING_PERMIT
        assert not (sandbox / "public" / "new.txt").exists()  # nothing acted on the shadow
        rec = row(host, write)
        assert rec.effect == "deny"
        assert rec.shadow == {
            "policy": shadow.policy_hash,
            "effect": "allow",
            "reason": "allowed",
            "rule_ids": ["public-write"],
        }

        # the same decision under both, the candidate's own rule id recorded
        forbid = await call(host, "files.read", {"path": "/private/a.txt"})
        assert forbid.reason is ReasonCode.FORBIDDEN
        assert row(host, forbid).shadow == {
            "policy": shadow.policy_hash,
            "effect": "deny",
            "reason": "forbidden",
            "rule_ids": ["private-admins-only"],
        }

        # no requirement in the candidate: its resource (none) is recorded beside
        reset = await call(host, "admin.reset", {"path": "/x"}, ADMIN)
        assert reset.outcome is Outcome.SUCCEEDED
        assert row(host, reset).shadow == {
            "policy": shadow.policy_hash,
            "effect": "deny",
            "reason": "tool_unavailable",
            "rule_ids": [],
            "resource": None,
        }

        # refused before any decision: the candidate is not asked
        bad = await call(host, "files.read", {"path": 3})
        assert bad.reason is ReasonCode.INVALID_ARGUMENTS
        assert row(host, bad).shadow is None
        unknown = await call(host, "no.such", {})
        assert row(host, unknown).shadow is None


async def test_a_candidate_that_reads_the_clock_is_given_now(
    policy: Any, registry: ToolRegistry, tmp_path: Path
) -> None:
    from sharedos.evidence import SqliteEvidenceStore

    shadow = candidate()
    assert not getattr(policy, "reads_clock", False)  # the enforced policy does not
    with SqliteEvidenceStore(tmp_path / "e.db") as store:
        host = RuntimeHost(Kernel(policy, registry), store, shadow=shadow)
        registry.register(
            ToolDefinition(
                name="vault.get",
                description="Get.",
                input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
                handler=echo_handler,
            )
        )
        got = await call(host, "vault.get", {"path": "/k"})
        assert got.outcome is Outcome.SUCCEEDED
        assert row(host, got).shadow["rule_ids"] == ["vault-by-day"]


class Raising:
    """A candidate whose evaluation raises: a fault injected in front of the real policy."""

    def __init__(self, policy: Any, exc: BaseException) -> None:
        self.policy, self.exc = policy, exc
        self.bundle_hash = policy.bundle_hash
        self.requirements = policy.requirements

    def decide(self, *args: Any, **kw: Any) -> Any:
        raise self.exc

    def could_permit(self, *args: Any, **kw: Any) -> bool:
        raise self.exc


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("evaluator broke near hunter2-secret-token"),
        RecursionError("maximum recursion depth exceeded"),
        ValueError("x" * 5000),
    ],
)
async def test_a_candidate_that_raises_changes_nothing(
    exc: BaseException, policy: Any, registry: ToolRegistry, tmp_path: Path
) -> None:
    from sharedos.evidence import SqliteEvidenceStore

    shadow = ShadowDecider(Raising(compile_source(CANDIDATE, "candidate.sos"), exc))
    with SqliteEvidenceStore(tmp_path / "e.db") as store:
        host = RuntimeHost(
            Kernel(policy, registry), store, shadow=shadow, host_secrets=["hunter2-secret-token"]
        )
        plain = RuntimeHost(Kernel(policy, registry), store)
        for args in ({"path": "/public/a.txt"}, {"path": "/private/a.txt"}):
            with_shadow = await call(host, "files.read", args)
            without = await call(plain, "files.read", args)
            # enforcement is exactly what it is without a shadow
            assert (with_shadow.outcome, with_shadow.reason, with_shadow.content) == (
                without.outcome,
                without.reason,
                without.content,
            )
            recorded = row(host, with_shadow).shadow
            assert set(recorded) == {"policy", "error"}
            assert recorded["policy"] == shadow.policy_hash
            assert recorded["error"].startswith(type(exc).__name__)
            assert len(recorded["error"]) <= MAX_SHADOW_ERROR
            assert "hunter2-secret-token" not in recorded["error"]
            assert row(plain, without).shadow is None


def shadow_cli(*args: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from sharedos.cli.main import main

    result = CliRunner().invoke(main, ["evidence", "shadow", *args])
    return result.exit_code, result.output


async def test_evidence_shadow_reports_what_the_candidate_would_have_done(
    backend: tuple[str, str],  # noqa: F811
    policy: Any,
    registry: ToolRegistry,
) -> None:
    """Traffic through the real kernel into a real store, then ``sharedos evidence shadow``."""
    import json

    from sharedos.evidence.url import open_store

    shadow = candidate()
    with open_store(backend[1]) as store:
        host = RuntimeHost(Kernel(policy, registry), store, shadow=shadow)
        plain = RuntimeHost(Kernel(policy, registry), store)
        for name in ("a", "b", "c"):  # would deny: the candidate takes /public reads away
            await call(host, "files.read", {"path": f"/public/{name}.txt"})
        for _ in range(2):  # would allow: the candidate permits /public writes
            await call(host, "files.write", {"path": "/public/n.txt", "content": "x"})
        await call(host, "files.read", {"path": "/private/a.txt"})  # same: forbidden
        await call(host, "files.read", {"path": "/home/alice/x"})  # same: allowed
        await call(plain, "files.read", {"path": "/public/a.txt"})  # no shadow policy
        await call(host, "files.read", {"path": 7})  # refused before a decision
    code, out = shadow_cli("--db", backend[1], "--format", "json")
    assert code == 1, out
    doc = json.loads(out)
    assert doc["summary"] == {
        "attempts": 9,
        "shadowed": 7,
        "without_shadow": 2,
        "other_policies": 0,
        "same": 2,
        "errors": 0,
        "would_allow": 2,
        "would_deny": 3,
        "reason_changed": 0,
        "other_kinds": 0,
    }
    assert [p["policy"] for p in doc["policies"]] == [shadow.policy_hash]
    groups = {(g["kind"], g["tool"]): g for g in doc["groups"]}
    assert set(groups) == {("would allow", "files.write"), ("would deny", "files.read")}
    widened = groups[("would allow", "files.write")]
    assert (widened["count"], widened["shadow_rules"]) == (2, ["public-write"])
    narrowed = groups[("would deny", "files.read")]
    assert narrowed["count"] == 3 and narrowed["enforced_rules"] == ["kernel-test.sos:10"]
    assert len(narrowed["examples"]) == 3
    example = narrowed["examples"][0]
    assert example["enforced"] == {
        "effect": "allow",
        "reason": "allowed",
        "rule_ids": ["kernel-test.sos:10"],
    }
    assert example["shadow"]["reason"] == "no_matching_permit"
    assert example["principal"] == "alice" and example["resource"] == "/public/a.txt"
    assert doc["by_tool"] == {"files.read": {"would deny": 3}, "files.write": {"would allow": 2}}
    assert doc["by_rule"]["shadow:public-write"] == {"would allow": 2}
    assert doc["by_rule"]["enforced:kernel-test.sos:10"] == {"would deny": 3}

    code, text = shadow_cli("--db", backend[1], "--examples", "1")
    assert code == 1
    assert "would have been allowed: 2 attempts" in text
    assert "files.write: 2 attempts  (shadow: public-write; enforced: no rule)" in text
    assert "would have been denied: 3 attempts" in text
    assert "enforced: allow allowed by kernel-test.sos:10; shadow: deny no_matching_permit" in text
    assert text.count("      - turn ") == 2  # one example per group
    assert "public-write: 2 would allow" in text

    code, _ = shadow_cli("--db", backend[1], "--kind", "reason-changed")
    assert code == 0  # nothing of that kind
    code, out = shadow_cli("--db", backend[1], "--policy", "0000", "--format", "json")
    summary = json.loads(out)["summary"]
    assert code == 0 and summary["shadowed"] == 0
    # the candidate's records are another policy's, not records without a shadow decision
    assert (summary["without_shadow"], summary["other_policies"]) == (2, 7)
    code, text = shadow_cli("--db", backend[1], "--policy", "0000")
    assert "2 without (" in text and "7 by other shadow policies (left out)" in text
    # a --policy that matches none of them compared nothing: the result says so, never
    # that no shadow decision was recorded (7 were)
    assert "no shadow decision recorded" not in text, text
    assert (
        "result: no shadow policy whose hash starts with '0000' decided these attempts; "
        "7 attempts were decided by other shadow policies"
    ) in text, text


def test_evidence_shadow_usage_errors(tmp_path: Path) -> None:
    code, out = shadow_cli("--db", str(tmp_path / "missing.db"))
    assert code == 2 and "Traceback" not in out
    code, out = shadow_cli("--db", str(tmp_path / "x.db"), "--since", "yesterday")
    assert code == 2 and "ISO-8601" in out


def shipped_policy(extra: str = "", rename: bool = False) -> Any:
    """The shipped rules and run policies, ``extra`` appended to git.sos; ``rename`` gives
    every rule of files.sos a new id and moves it (a change that decides nothing anew)."""
    from sharedos.policy import compile_sources
    from sharedos.resources import shipped_dir

    sources = []
    for directory in (shipped_dir("rules"), shipped_dir("policy")):
        for path in sorted(Path(directory).glob("*.sos")):
            text = path.read_text(encoding="utf-8")
            if path.name == "git.sos":
                text += extra
            if rename and path.name == "files.sos":
                text = "\n\n" + text.replace('@id("', '@id("renamed-')
            sources.append((f"{Path(directory).name}/{path.name}", text))
    return compile_sources(sources)


SHIPPED_CALLS = [
    (tool, args, ctx)
    for ctx in (
        AccessContext(principal="alice", roles=("maintainer",), turn_id="t"),
        AccessContext(principal="bob", turn_id="t"),
        AccessContext(principal="carol", roles=("admin",), turn_id="t"),
    )
    for tool, args in (
        ("files.read", {"path": "/public/a.txt"}),
        ("files.read", {"path": "/private/a.txt"}),
        ("files.write", {"path": "/home/alice/n.md"}),
        ("files.delete", {"path": "/home/bob/n.md"}),
        ("git.git_commit", {"repo_path": "/srv/git/app"}),
        ("git.git_add", {"repo_path": "/srv/git/security/k"}),
        ("git.git_status", {"repo_path": "/srv/git/app"}),
        ("github.create_issue", {"owner": "sharedos", "repo": "core"}),
        ("fs.write_file", {"path": "/srv/projects/x"}),
        ("memory.read_graph", {}),
    )
]


@pytest.mark.parametrize(
    ("extra", "rename"),
    [
        ('\n@id("git-everyone-writes")\npermit write on "/srv/git/**"\n', False),
        ("", True),
        ('\nforbid * on "/srv/git/**" unless "admin" in context.roles\n', True),
    ],
)
def test_tools_the_change_leaves_alike_are_not_decided_again(extra: str, rename: bool) -> None:
    """The shortcut records exactly what deciding under the candidate records."""
    enforced = shipped_policy()
    candidate_policy = shipped_policy(extra, rename)
    fast = ShadowDecider(candidate_policy, enforced=enforced)
    full = ShadowDecider(candidate_policy)
    shortcut = 0
    for tool, args, ctx in SHIPPED_CALLS:
        decision = enforced.decide(tool, args, ctx.policy_input, context_key=ctx.cache_key)
        assert fast.decide(tool, args, ctx, decision) == full.decide(tool, args, ctx, decision)
        shortcut += fast._sameness(tool) is not None
    assert shortcut  # the shortcut was taken (files, fs, github, memory are untouched by git)
    if rename:  # the renamed rules are cited by the candidate's new ids
        ctx = SHIPPED_CALLS[0][2]
        decision = enforced.decide("files.write", {"path": "/home/alice/n.md"}, ctx.policy_input)
        recorded = fast.decide("files.write", {"path": "/home/alice/n.md"}, ctx, decision)
        assert recorded["rule_ids"] and all(
            r.startswith("renamed-") for r in recorded["rule_ids"]
        ), recorded
    # git writes: decided again exactly when the change touches them
    assert (fast._sameness("git.git_commit") is None) == bool(extra)


#: Monday 2026-12-07 09:00:00 UTC; the host's clock below ticks two microseconds a read
NINE = 1796634000.0


async def test_the_candidate_decides_at_the_moment_the_enforced_decision_saw(
    registry: ToolRegistry, store: Any
) -> None:
    """Both policies read the time; the host's clock is read for the enforced decision
    a microsecond before 09:00 and would be read again just after. The candidate
    (the same office-hours rule, and one more rule of the tool) decides at the moment
    the enforced decision saw and the record keeps: the same decision, no divergence the
    policy change did not make — as replay of the record decides it."""
    from sharedos.evidence.export import iter_records
    from sharedos.evidence.replay import replay
    from sharedos.evidence.shadow_report import shadow_report

    hours = POLICY.replace('permit get on "/**"', 'permit get on "/**" when context.now.hour >= 9')
    enforced = compile_source(hours, "p.sos")
    changed = compile_source(
        hours.replace('permit get on "/**"', 'forbid get on "/sealed/**"\npermit get on "/**"'),
        "candidate.sos",
    )
    reads = iter(NINE - 1e-6 + i * 2e-6 for i in range(1000))

    def clock() -> float:
        return next(reads)

    shadow = ShadowDecider(changed, enforced=enforced, clock=clock)
    host = RuntimeHost(Kernel(enforced, registry, clock=clock), store, shadow=shadow)
    registry.register(
        ToolDefinition(
            name="vault.get",
            description="Read a secret.",
            input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
            handler=echo_handler,
        )
    )
    result = await call(host, "vault.get", {"path": "/k"})
    rec = row(host, result)
    assert rec.effect == "deny" and rec.context["now"]["hour"] == 8
    assert rec.shadow["effect"] == "deny", rec.shadow
    records = list(iter_records(store))
    assert not shadow_report(records).changed
    assert not replay(records, changed, old=enforced).changed


async def test_evidence_shadow_does_not_pass_a_candidate_that_failed_on_every_call(
    policy: Any, registry: ToolRegistry, tmp_path: Path
) -> None:
    """A candidate that raised on every call compared nothing: the report must not say
    it "decided every call as enforced", nor exit 0 as if it had."""
    import json

    from sharedos.evidence import SqliteEvidenceStore

    db = tmp_path / "e.db"
    raising = ShadowDecider(Raising(compile_source(CANDIDATE, "candidate.sos"), RuntimeError("x")))
    with SqliteEvidenceStore(db) as store:
        host = RuntimeHost(Kernel(policy, registry), store, shadow=raising)
        for args in ({"path": "/public/a.txt"}, {"path": "/private/a.txt"}):
            await call(host, "files.read", args)
    code, text = shadow_cli("--db", str(db))
    assert code == 1, text
    assert "decided every call as enforced" not in text
    assert "result: the shadow policy failed on 2 attempts" in text
    code, out = shadow_cli("--db", str(db), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["summary"]["errors"] == 2
    assert doc["verdict"] == "unknown" and doc["changed"] is False


async def test_evidence_shadow_under_kind_never_says_every_call_was_decided_as_enforced(
    policy: Any, registry: ToolRegistry, tmp_path: Path
) -> None:
    """`--kind reason-changed` over calls the candidate would allow and deny: nothing of
    that kind (exit 0), but the result line must not claim the candidate decided every
    call as enforced — it did not."""
    from sharedos.evidence import SqliteEvidenceStore

    db = tmp_path / "e.db"
    with SqliteEvidenceStore(db) as store:
        host = RuntimeHost(Kernel(policy, registry), store, shadow=candidate())
        await call(host, "files.read", {"path": "/public/a.txt"})  # would deny
        await call(host, "files.write", {"path": "/public/n.txt", "content": "x"})  # would allow
    code, text = shadow_cli("--db", str(db), "--kind", "reason-changed")
    assert code == 0, text
    assert "decided every call as enforced" not in text
    assert (
        "result: no call decided differently in the kinds looked for "
        "(looking for: reason changed); 2 attempts in other kinds"
    ) in text
    code, text = shadow_cli("--db", str(db), "--kind", "would-allow")
    assert code == 1 and "differently (looking for: would allow)" in text


async def test_evidence_shadow_json_under_kind_keeps_every_documented_count(
    policy: Any, registry: ToolRegistry, tmp_path: Path
) -> None:
    """`--format json --kind ...`: the summary has every key the docs spell (the kinds not
    looked for count 0, as in replay and diff), and says how many attempts differ in
    the kinds left out: a CI job reading `summary.would_deny` must not crash, and a
    document whose verdict is "unchanged" must not hide that calls were decided
    otherwise."""
    import json

    from sharedos.evidence import SqliteEvidenceStore

    db = tmp_path / "e.db"
    with SqliteEvidenceStore(db) as store:
        host = RuntimeHost(Kernel(policy, registry), store, shadow=candidate())
        await call(host, "files.read", {"path": "/public/a.txt"})  # would deny
        await call(host, "files.write", {"path": "/public/n.txt", "content": "x"})  # would allow
        await call(host, "files.read", {"path": "/home/alice/x"})  # same
    code, out = shadow_cli("--db", str(db), "--kind", "reason-changed", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["verdict"] == "unchanged", out
    assert doc["summary"] == {
        "attempts": 3,
        "shadowed": 3,
        "without_shadow": 0,
        "other_policies": 0,
        "same": 1,
        "errors": 0,
        "would_allow": 0,
        "would_deny": 0,
        "reason_changed": 0,
        "other_kinds": 2,
    }
    code, out = shadow_cli("--db", str(db), "--kind", "would-allow", "--format", "json")
    summary = json.loads(out)["summary"]
    assert code == 1
    assert (summary["would_allow"], summary["would_deny"], summary["other_kinds"]) == (1, 0, 1)


async def test_in_a_turn_a_tool_the_candidate_would_not_list_is_its_catalogue_refusal(
    policy: Any, kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    """A turn's catalogue is its policy's: alice's lists files.delete (her home), the
    candidate's would not (no delete permit left). Her delete of /public/x, which the
    enforced rules deny (no_matching_permit), is refused not_in_turn_catalog by a host
    enforcing the candidate: the shadow decision says so, as a replay of the record
    does, not 'the same decision'. Outside a turn's catalogue the rules decide."""
    from sharedos.evidence.replay import replay
    from sharedos.evidence.shadow_report import shadow_report

    text = POLICY.replace("permit read, write, list, delete on", "permit read, write, list on")
    new = compile_source(text, "candidate.sos")
    host = RuntimeHost(kernel, store, shadow=ShadowDecider(new, enforced=policy))
    catalog = kernel.list_tools(ALICE, ALL)
    assert "files.delete" in catalog.names
    args = {"path": "/public/x"}
    listed = await host.invoke_tool(
        ToolCall(tool="files.delete", arguments=args), ALICE, ALL, catalog=catalog
    )
    bare = await call(host, "files.delete", args)
    assert listed.reason is bare.reason is ReasonCode.NO_MATCHING_PERMIT
    in_turn, alone = row(host, listed), row(host, bare)
    assert (in_turn.shadow["effect"], in_turn.shadow["reason"]) == ("deny", "not_in_turn_catalog")
    assert in_turn.shadow["rule_ids"] == []
    assert (alone.shadow["effect"], alone.shadow["reason"]) == ("deny", "no_matching_permit")
    shadowed = shadow_report([in_turn, alone], max_examples=0)
    replayed = replay([in_turn, alone], new, old=policy, max_examples=0)
    assert shadowed.counts()["reason changed"] == 1 and shadowed.verdict == "changed"
    assert [(g.kind, len(g.examples)) for g in replayed.groups] == [("reason changed", 1)]
