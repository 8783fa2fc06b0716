"""``sharedos-policy query``: the patterns and conditions under which a principal's calls
could be allowed, on the shipped rules and against brute force on random policies."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sharedos.cli.policy import main
from sharedos.policy import PolicyError, compile_paths, compile_source
from sharedos.policy.analysis.query import Answer, query
from sharedos.policy.analysis.residual import residual
from sharedos.policy.context import complete_context

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules"
SHIPPED = compile_paths([RULES, REPO / "policy"])


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def answer_for(result: Any, tool: str) -> Answer:
    (found,) = [a for a in result.answers if tool in a.tools]
    return found


def test_alice_writes_only_her_home_in_fs_files_and_git() -> None:
    result = query(SHIPPED, complete_context({"principal": "alice"}), actions=["write"])
    for tool in ("fs.write_file", "files.write", "git.git_commit"):
        a = answer_for(result, tool)
        assert [g.instantiated for g in a.grants] == ["/home/alice/**"]
        assert a.grants[0].residual.applies == "always" and a.grants[0].carve_outs == ()
    assert not answer_for(result, "github.create_issue").allowed
    git = answer_for(result, "git.git_commit")
    assert set(git.tools) == {
        "git.git_add",
        "git.git_reset",
        "git.git_commit",
        "git.git_create_branch",
        "git.git_checkout",
    }
    assert [e.rule.id for e in git.excluded] == ["git-maintainers-write"]


def test_a_maintainer_writes_the_org_repositories_except_security() -> None:
    ctx = complete_context({"principal": "alice", "roles": ["maintainer"]})
    git = answer_for(query(SHIPPED, ctx, tools=["git.git_commit"]), "git.git_commit")
    grants = {g.instantiated: g for g in git.grants}
    assert set(grants) == {"/srv/git/**", "/home/alice/**"}
    (carve,) = grants["/srv/git/**"].carve_outs
    assert carve.instantiated == "/srv/git/security/**" and carve.rule.id == "git-security-repos"
    assert carve.residual.applies == "always" and not carve.covers
    # the security team has no carve-out: the forbid's residual never applies to it
    ctx = complete_context({"principal": "sam", "roles": ["maintainer", "security"]})
    git = answer_for(query(SHIPPED, ctx, tools=["git.git_commit"]), "git.git_commit")
    assert all(not g.carve_outs for g in git.grants)


def test_residual_conditions_and_conditional_carve_outs() -> None:
    policy = compile_source(
        "namespace files\n"
        "requirement files.write { action write; resource path(args.path) }\n"
        'permit write on "/shared/**" when "editor" in context.roles and args.mode == "x"\n'
        'forbid write on "/shared/locked/**" unless args.force == true and context.tenant == "ops"\n'
        'forbid write on "/shared/**" when context.tenant == "frozen"\n',
        "p.sos",
    )
    editor = complete_context({"principal": "e", "roles": ["editor"]})
    (a,) = query(policy, editor).answers
    (grant,) = a.grants
    assert grant.residual.condition == 'when args.mode == "x"'
    assert grant.residual.reads == ("args.mode",)
    (carve,) = grant.carve_outs
    assert carve.instantiated == "/shared/locked/**"
    # the tenant is not "ops": the unless can never hold, so the forbid always applies
    assert carve.residual.applies == "always"
    ops = complete_context({"principal": "e", "roles": ["editor"], "tenant": "ops"})
    (carve,) = query(policy, ops).answers[0].grants[0].carve_outs
    assert carve.residual.condition == "unless args.force == true"
    frozen = complete_context({"principal": "e", "roles": ["editor"], "tenant": "frozen"})
    (a,) = query(policy, frozen).answers
    assert not a.grants  # a forbid covering the whole permit, whatever the arguments
    assert "forbidden" in a.excluded[0].why
    reader = complete_context({"principal": "r"})
    (a,) = query(policy, reader).answers
    assert not a.allowed and "cannot hold" in a.excluded[0].why


def test_run_policy_hides_unmanaged_tools_and_unknown_tools_are_named() -> None:
    ctx = complete_context({"principal": "bob"})
    result = query(
        SHIPPED,
        ctx,
        tools=["fs.read_text_file", "github.get_issue", "files.chmod"],
        run_policy="brokered-review",
    )
    assert [t for t, _ in result.hidden] == ["fs.read_text_file", "github.get_issue"]
    assert result.unknown == ["files.chmod"]


# ------------------------------------------------------------------------------ CLI


def test_cli_text_and_json() -> None:
    code, out, _ = invoke(
        "query", str(RULES), "--principal", "alice", "--role", "maintainer", "--action", "write"
    )
    assert code == 0
    assert "allow /srv/git/**  (git-maintainers-write at git.sos:" in out
    assert "    except /srv/git/security/**  (git-security-repos at git.sos:" in out
    code, out, _ = invoke(
        "query",
        str(RULES),
        "--principal",
        "alice",
        "--attr",
        "team=web",
        "--attr",
        "level=3",
        "--tool",
        "fs.write_file",
        "--format",
        "json",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["context"]["attributes"] == {"team": "web", "level": 3}
    (answer,) = doc["answers"]
    assert answer["tools"] == ["fs.write_file"] and answer["allowed"] is True
    assert answer["grants"][0]["instantiated"] == "/home/alice/**"
    assert answer["grants"][0]["applies"] == "always"


def test_cli_verbose_lists_the_permits_that_cannot_apply() -> None:
    code, out, _ = invoke("query", str(RULES), "--principal", "bob", "--tool", "files.delete", "-v")
    assert code == 0
    assert "(not /shared/**: its condition" in out


@pytest.mark.parametrize(
    "args",
    [
        ("query", str(RULES), "--action", "write"),  # no principal
        ("query", str(RULES), "--principal", "a", "--action", "writ"),
        ("query", str(RULES), "--principal", "a", "--attr", "novalue"),
        # JSON the kernel's contexts cannot hold: a usage error, as in --context
        ("query", str(RULES), "--principal", "a", "--attr", "n=NaN"),
        ("query", str(RULES), "--principal", "a", "--attr", "n=-Infinity"),
        ("query", str(RULES), "--principal", "a", "--attr", "n=" + "[" * 5000 + "]" * 5000),
        ("query", str(RULES), "--principal", "a", "--context", "[1]"),
        ("query", str(RULES), "--principal", "a", "--policy", "nope"),
        ("query", "missing-dir", "--principal", "a"),
    ],
)
def test_cli_usage_errors_exit_2(args: tuple[str, ...]) -> None:
    code, _, err = invoke(*args)
    assert code == 2, err
    assert "Traceback" not in err


# ----------------------------------------------- against brute force on random policies

HEAD = """namespace files
requirement files.read  { action read;  resource path(args.path) }
namespace g
requirement g.get { action get; resource "{args.owner}/{args.repo}" }
"""
PATH_PATTERNS = ["/**", "/a/**", "/a/*", "/a/b", "/{context.principal}/**", "/a/*.md", "/b/**"]
REPO_PATTERNS = ["*/*", "acme/*", "acme/web", "{context.principal}/*", "*/web"]
CONDITIONS = [
    '"r1" in context.roles',
    'context.tenant == "t1"',
    'args.mode == "x"',
    '"r1" in context.roles and args.mode == "x"',
    'args.mode != "x" or context.tenant == "t2"',
    "args.n < 3",
    'context.missing == 1 or args.mode == "y"',
]


def _policy(rng: random.Random) -> str:
    lines = [HEAD]
    for ns, pool in (("files", PATH_PATTERNS), ("g", REPO_PATTERNS)):
        lines.append(f"namespace {ns}")
        for _ in range(rng.randint(1, 4)):
            effect = "forbid" if rng.random() < 0.4 else "permit"
            cond = ""
            if rng.random() < 0.6:
                cond = f" {rng.choice(['when', 'unless'])} {rng.choice(CONDITIONS)}"
            lines.append(f'{effect} * on "{rng.choice(pool)}"{cond}')
    return "\n".join(lines) + "\n"


ARGS = [
    {**({"mode": m} if m else {}), **({"n": n} if n is not None else {})}
    for m in ("x", "y", None)
    for n in (2, 5, None)
]
CONTEXTS = [
    complete_context(c)
    for c in (
        {"principal": "alice", "tenant": "t1", "roles": ["r1"]},
        {"principal": "zz", "tenant": "t2"},
        {"principal": "acme", "tenant": "t3", "roles": ["r1"]},
    )
]


def test_every_allowed_call_is_under_a_grant_of_its_permit() -> None:
    """A brute-force allowed call is allowed by a permit the query lists as a grant, the
    call's resource matches the grant's instantiated pattern, and a tool with no grant
    allows nothing."""
    rng = random.Random(20261205)
    checked = 0
    for _ in range(40):
        try:
            policy = compile_source(_policy(rng), "p.sos")
        except PolicyError:
            continue
        for ctx in CONTEXTS:
            result = query(policy, ctx)
            for tool, space in (
                (
                    "files.read",
                    [
                        {"path": "/" + "/".join(p)}
                        for n in (0, 1, 2, 3)
                        for p in itertools.product(
                            ["a", "b", "x.md", str(ctx["principal"])], repeat=n
                        )
                    ],
                ),
                (
                    "g.get",
                    [
                        {"owner": o, "repo": r}
                        for o in ("acme", "zz", "alice")
                        for r in ("web", "zz")
                    ],
                ),
            ):
                a = answer_for(result, tool)
                grants = {g.rule.id: g for g in a.grants}
                # the catalogue lists the tool exactly when the query has a grant for it
                assert a.allowed == policy.could_permit(tool, ctx), (tool, ctx)
                for base in space:
                    for extra in ARGS:
                        d = policy.decide(tool, {**base, **extra}, ctx)
                        if not d.allowed:
                            continue
                        checked += 1
                        assert any(r.id in grants for r in d.rule_ids), (tool, base, extra)
    assert checked > 500


def test_residuals_decide_like_the_rules_they_come_from() -> None:
    """A residual that says always/never agrees with the rule for every sampled call; a
    residual condition, compiled as a rule of its own, decides every call like the rule."""
    rng = random.Random(7)
    head = "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
    compared = 0
    for _ in range(150):
        cond = rng.choice(CONDITIONS)
        kind = rng.choice(["when", "unless"])
        forbid = rng.random() < 0.5
        effect = "forbid" if forbid else "permit"
        policy = compile_source(f'{head}{effect} read on "/**" {kind} {cond}\n', "p.sos")
        rule = policy.rule(0)
        for ctx in CONTEXTS:
            res = residual(rule.condition, rule.condition_kind, forbid, ctx, "read")
            applies = [
                policy.applying_rules("files.read", {"path": "/a", **a}, ctx) != () for a in ARGS
            ]
            if res.applies == "always":
                assert all(applies), (cond, ctx)
            elif res.applies == "never":
                assert not any(applies), (cond, ctx)
            else:
                assert res.condition is not None and "<error>" not in res.condition
                again = compile_source(f'{head}{effect} read on "/**" {res.condition}\n', "r.sos")
                redo = [
                    again.applying_rules("files.read", {"path": "/a", **a}, ctx) != () for a in ARGS
                ]
                assert redo == applies, (cond, kind, ctx, res.condition)
                compared += 1
    assert compared > 50


def test_cli_json_with_a_lone_surrogate_in_the_context_is_escaped_not_a_crash() -> None:
    # JSON carries a lone surrogate (an --attr value, a --context file); UTF-8 cannot:
    # every --format json of sharedos-policy (emit_json) failed as an internal error
    code, out, err = invoke(
        "query", str(RULES), "--principal", "bob", "--attr", 'k="\\ud800"', "--format", "json"
    )
    assert code == 0, err
    assert '"k": "\\ud800"' in out
    assert json.loads(out)["context"]["attributes"]["k"] == "\ud800"


@pytest.mark.parametrize(
    ("forbid", "fails_closed"),
    [
        ('when args.mode == "x"', True),  # no mode: the forbid applies
        ("when args.n > 3", True),  # n a string: the forbid applies
        ('unless args.mode in ["a", "b"]', True),
        ('when segment(resource, 4) == "x"', True),  # /w/s/a has no 4th segment
        ('when has args.mode and args.mode == "x"', False),
        ('when not has args.mode or args.mode == "x"', False),
        ("unless has args.ok", False),
        ('when startswith(resource, "/w/s/tmp")', False),
        ('when args.mode == "x" and context.tenant == "t"', True),
    ],
)
def test_a_carve_out_says_when_it_fails_closed(forbid: str, fails_closed: bool) -> None:
    # 'except /w/s/** when args.mode == "x"' read as "calls without a mode are
    # allowed there", and they were denied: a forbid applies where its condition
    # cannot be evaluated. The text says so, and only where it is true.
    policy = compile_source(
        "namespace files\n"
        "requirement files.write { action write; resource path(args.path) }\n"
        'permit write on "/w/**"\n'
        f'forbid write on "/w/s/**" {forbid}\n',
        "p.sos",
    )
    context = complete_context({"principal": "a", "tenant": "t"})
    (carve,) = query(policy, context).answers[0].grants[0].carve_outs
    assert carve.residual.fails_closed is fails_closed
    assert ("(or where that cannot be evaluated)" in query(policy, context).render()) is (
        fails_closed
    )
    # the truth: some call under the carve-out errors (and is forbidden) iff it says so
    calls = [{}, {"mode": 1}, {"n": "many"}, {"mode": "a"}, {"mode": "x", "n": 1, "ok": 1}]
    errored = False
    for extra in calls:
        decision = policy.decide("files.write", {"path": "/w/s/a", **extra}, context)
        explained = policy.explain("files.write", {"path": "/w/s/a", **extra}, context).render()
        errored = errored or (decision.reason == "forbidden" and "errored" in explained)
    assert errored is fails_closed


def test_a_permit_is_checked_only_against_forbids_whose_literal_lead_agrees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each carve-out check runs an automaton (about a millisecond): checking every permit
    # against every forbid made query on 2,000 rules take a minute and on 20,000 hours.
    import sharedos.policy.analysis.query as query_module

    n = 40
    lines = [
        "namespace files",
        "requirement files.read { action read; resource path(args.path) }",
        'forbid read on "/**/tmp/**"',
    ]
    for i in range(n):
        lines += [
            f'permit read on "/p{i}/d{i % 3}/**"',
            f'forbid read on "/p{i}/d{(i + 1) % 3}/**"',
            f'forbid read on "/p{i}/**/secret/**"',
            f'forbid read on "/q{i}/**"',
        ]
    policy = compile_source("\n".join(lines), "many.sos")
    real = query_module.overlap
    calls = 0

    def counted(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args)

    monkeypatch.setattr(query_module, "overlap", counted)
    result = query(policy, complete_context({"principal": "alice"}))
    (answer,) = result.answers
    assert [g.instantiated for g in answer.grants] == [f"/p{i}/d{i % 3}/**" for i in range(n)]
    for i, grant in enumerate(answer.grants):
        # the same carve-outs, in program order, as checking every forbid would give
        assert [c.instantiated for c in grant.carve_outs] == ["/**/tmp/**", f"/p{i}/**/secret/**"]
    assert calls <= 3 * n, f"{calls} overlap checks for {n} permits and {3 * n + 1} forbids"


CLOCK_POLICY = """namespace files
requirement files.read { action read; resource path(args.path) }
permit read on "/data/**" when context.now.hour < 12 and args.x == 1
permit read on "/paris/**" when context.now.zone == "Europe/Paris" and context.now.hour == 3
forbid read on "/data/late/**" when context.now.hour >= 9
"""


def test_the_time_of_the_call_is_unknown_to_a_query_without_now_as_to_the_catalogue() -> None:
    """Without a ``now`` in the context, the time of the call is unknown, as it is to
    listing (``could_permit``): a permit on the time is a grant whose residual keeps its
    test of ``context.now``, and a forbid on it carves out only under that test. The
    query said "no call can be allowed" (the missing time folded as an error) for a tool
    the catalogue lists, and carved the forbid out "(all of it)"."""
    from sharedos.policy.clock import expand

    policy = compile_source(CLOCK_POLICY, "p.sos")
    ctx = complete_context({"principal": "alice"})
    a = answer_for(query(policy, ctx), "files.read")
    assert a.allowed == policy.could_permit("files.read", ctx) is True
    grants = {g.rule.id: g for g in a.grants}
    assert set(grants) == {"p.sos:3", "p.sos:4"}, a.to_dict()
    assert grants["p.sos:3"].residual.condition == "when context.now.hour < 12 and args.x == 1"
    assert grants["p.sos:3"].residual.reads == ("args.x", "context.now.hour")
    (late,) = grants["p.sos:3"].carve_outs
    assert not late.covers and late.residual.condition == "when context.now.hour >= 9"
    # every call some time allows is allowed by a grant, and a residual decides like its
    # rule at every time tried
    head = CLOCK_POLICY.split("permit", 1)[0]
    for now in (
        "2026-03-29T01:30:00+01:00[Europe/Paris]",  # the hour before the clocks go forward
        "2026-03-29T03:30:00+02:00[Europe/Paris]",
        "2026-10-25T02:30:00+01:00[Europe/Paris]",  # the hour repeated when they go back
        "2026-12-07T10:00:00+00:00[UTC]",
        "2026-12-07T15:00:00+00:00[UTC]",
    ):
        at = {**ctx, "now": expand(now)}
        for path in ("/data/a", "/data/late/a", "/paris/a"):
            for args in ({"x": 1}, {"x": 2}, {}):
                call = {"path": path, **args}
                d = policy.decide("files.read", call, at)
                if d.allowed:
                    assert any(r.id in grants for r in d.rule_ids), (now, call)
                for g in a.grants:
                    if not g.pattern.startswith(path.rsplit("/", 1)[0]):
                        continue
                    again = compile_source(
                        f'{head}permit read on "{g.pattern}" {g.residual.condition}\n', "r.sos"
                    )
                    rules = policy.applying_rules("files.read", call, at)
                    applies = any(r.id == g.rule.id for r in rules)
                    assert (again.applying_rules("files.read", call, at) != ()) == applies
    # a query given the time folds it in: at 10:00 UTC, /paris/** cannot apply
    at = {**ctx, "now": expand("2026-12-07T10:00:00+00:00[UTC]")}
    a = answer_for(query(policy, at), "files.read")
    assert [g.instantiated for g in a.grants] == ["/data/**"]
    assert a.grants[0].residual.condition == "when args.x == 1"
    (late,) = a.grants[0].carve_outs
    assert late.residual.applies == "always" and late.residual.condition is None
