"""Decision semantics: default deny, forbid overrides, scoping, interpolation, conditions."""

from __future__ import annotations

import itertools
import random

import pytest

from sharedos.outcomes import Effect, ReasonCode
from sharedos.policy import compile_source

FILES = """namespace files
requirement files.read   { action read;   resource path(args.path) }
requirement files.write  { action write;  resource path(args.path) }
requirement files.search { action search; resource path(args.root) }
"""

ALICE = {"principal": "alice", "tenant": "t1", "roles": ["staff"], "attributes": {"team": "blue"}}


def _reason(policy_text: str, tool: str, args: object, ctx: object = ALICE) -> ReasonCode:
    return compile_source(policy_text, "p.sos").decide(tool, args, ctx).reason  # type: ignore[arg-type]


def test_default_deny() -> None:
    d = compile_source(FILES, "p.sos").decide("files.read", {"path": "/a"}, ALICE)
    assert (d.effect, d.reason, d.rule_ids) == (Effect.DENY, ReasonCode.NO_MATCHING_PERMIT, ())
    assert d.resource == "/a" and d.action == "read" and d.namespace == "files"


def test_permit_allows_with_rule_ids_and_spans() -> None:
    policy = compile_source(
        FILES + '@id("pub")\npermit read on "/public/**"\npermit read on "/public/*"\n', "p.sos"
    )
    d = policy.decide("files.read", {"path": "/public/a.txt"}, ALICE)
    assert d.effect is Effect.ALLOW and d.reason is ReasonCode.ALLOWED
    assert [(r.id, r.file, r.line, r.col, r.effect) for r in d.rule_ids] == [
        ("pub", "p.sos", 6, 1, "permit"),
        ("p.sos:7", "p.sos", 7, 1, "permit"),
    ]
    assert "pub" in d.detail


def test_forbid_overrides_permit() -> None:
    text = FILES + 'permit read on "/**"\n@id("no-secrets")\nforbid read on "/secrets/**"\n'
    policy = compile_source(text, "p.sos")
    d = policy.decide("files.read", {"path": "/secrets/k"}, ALICE)
    assert d.reason is ReasonCode.FORBIDDEN
    assert [r.id for r in d.rule_ids] == ["no-secrets"] and d.rule_ids[0].effect == "forbid"
    assert policy.decide("files.read", {"path": "/other"}, ALICE).allowed


def test_rule_order_never_matters() -> None:
    rules = [
        'permit read on "/**"',
        'forbid read on "/a/**" unless "admin" in context.roles',
        'permit write on "/a/{context.principal}/**"',
        'forbid * on "/a/locked"',
        'permit search on "/a/*" when context.tenant == "t1"',
        '@id("x")\npermit read, write on "/b/*.md"',
    ]
    calls = [
        (tool, {"path": p, "root": p}, ctx)
        for tool in ("files.read", "files.write", "files.search")
        for p in ("/a/x", "/a/alice/f", "/a/locked", "/b/r.md", "/b/r.txt", "/c")
        for ctx in (ALICE, {**ALICE, "roles": ["admin"]}, {**ALICE, "tenant": "t2"})
    ]
    baseline = None
    rng = random.Random(4)
    orders = list(itertools.permutations(range(len(rules))))
    for order in rng.sample(orders, 12):
        policy = compile_source(FILES + "\n".join(rules[i] for i in order) + "\n", "p.sos")
        got = [
            (d.effect, d.reason, sorted(r.id for r in d.rule_ids if r.id == "x"))
            for d in (policy.decide(t, a, c) for t, a, c in calls)
        ]
        if baseline is None:
            baseline = got
        assert got == baseline


def test_unknown_tool_is_unavailable() -> None:
    policy = compile_source(FILES + 'permit * on "/**"\n', "p.sos")
    for tool in ("files.delete", "read", "", "files.read ", "a" * 500, "files.read\x00"):
        d = policy.decide(tool, {"path": "/a"}, ALICE)
        assert d.reason is ReasonCode.TOOL_UNAVAILABLE and d.effect is Effect.DENY
    d = policy.decide(None, {}, ALICE)  # type: ignore[arg-type]
    assert d.reason is ReasonCode.TOOL_UNAVAILABLE


def test_traversal_is_matched_after_canonicalization() -> None:
    text = FILES + 'permit read on "/public/**"\nforbid read on "/private/**"\n'
    policy = compile_source(text, "p.sos")
    d = policy.decide("files.read", {"path": "/public/../private/a.txt"}, ALICE)
    assert (d.reason, d.resource) == (ReasonCode.FORBIDDEN, "/private/a.txt")
    d = policy.decide("files.read", {"path": "//public//./x/"}, ALICE)
    assert (d.reason, d.resource) == (ReasonCode.ALLOWED, "/public/x")
    d = policy.decide("files.read", {"path": "/public/%2e%2e/private/a.txt"}, ALICE)
    assert (d.reason, d.resource) == (ReasonCode.ALLOWED, "/public/%2e%2e/private/a.txt")


@pytest.mark.parametrize(
    "args",
    [
        {"path": "/public/../../etc"},
        {"path": "public/a"},
        {"path": "/public/a\x00.txt"},
        {"path": "/public/\na"},
        {"path": 7},
        {"path": None},
        {"path": ["/public/a"]},
        {},
        None,
        "not a mapping",
        {"other": "/public/a"},
    ],
)
def test_unresolvable_resources(args: object) -> None:
    policy = compile_source(FILES + 'permit * on "/**"\n', "p.sos")
    d = policy.decide("files.read", args, ALICE)  # type: ignore[arg-type]
    assert d.reason is ReasonCode.UNRESOLVABLE_RESOURCE and d.resource is None


def test_search_resolves_its_root_argument() -> None:
    policy = compile_source(FILES + 'permit search on "/docs/**"\n', "p.sos")
    assert policy.decide("files.search", {"root": "/docs", "path": "/nope"}, ALICE).allowed
    assert not policy.decide("files.search", {"path": "/docs"}, ALICE).allowed


def test_namespace_scoping() -> None:
    text = (
        FILES
        + """
namespace github
requirement github.read { action read; resource "{args.owner}/{args.repo}" }
permit read on "**"
"""
    )
    policy = compile_source(text, "p.sos")
    # 'permit read on "**"' is in namespace github: it does not govern files.read
    assert policy.decide("github.read", {"owner": "o", "repo": "r"}, ALICE).allowed
    assert (
        policy.decide("files.read", {"path": "/x"}, ALICE).reason is ReasonCode.NO_MATCHING_PERMIT
    )
    assert policy.decide("files.read", {"path": "/x"}, ALICE).namespace == "files"


def test_namespace_spans_files() -> None:
    from sharedos.policy import compile_sources

    policy = compile_sources(
        [("a.sos", FILES), ("b.sos", 'namespace files\npermit write on "/w/**"\n')]
    )
    assert policy.decide("files.write", {"path": "/w/x"}, ALICE).allowed


def test_star_means_every_action_of_the_namespace() -> None:
    policy = compile_source(FILES + 'permit * on "/all/**"\n', "p.sos")
    for tool in ("files.read", "files.write", "files.search"):
        assert policy.decide(tool, {"path": "/all/x", "root": "/all/x"}, ALICE).allowed


# -------------------------------------------------------------- patterns


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("/a/*", "/a/b", True),
        ("/a/*", "/a", False),
        ("/a/*", "/a/b/c", False),
        ("/a/**", "/a", True),
        ("/a/**", "/a/b/c/d", True),
        ("/a/**", "/ab", False),
        ("/a/**/z", "/a/z", True),
        ("/a/**/z", "/a/b/c/z", True),
        ("/a/**/z", "/a/b/c/y", False),
        ("/**", "/", True),
        ("/", "/", True),
        ("/", "/a", False),
        ("/a/*.md", "/a/x.md", True),
        ("/a/*.md", "/a/.md", True),
        ("/a/*.md", "/a/x.txt", False),
        ("/a/*.md", "/a/b/x.md", False),
        ("/a/pre*", "/a/prefix", True),
        ("/a/pre*", "/a/pre", True),
        ("/a/pre*", "/a/pr", False),
        ("/a/a*b", "/a/ab", True),
        ("/a/a*b", "/a/a", False),
        ("/a/a*b", "/a/aXbY", False),
        ("/a/*-*.md", "/a/x-y.md", True),
        ("/a/*-*.md", "/a/xy.md", False),
        ("/a/b", "/a/b", True),
        ("/a/b", "/a/b/c", False),
        ("/*/b/**", "/x/b/y", True),
        ("/*/b/**", "/x/c/y", False),
        ("/a.b/[x]/(y)", "/a.b/[x]/(y)", True),
        ("/a.b/[x]", "/aXb/[x]", False),
    ],
)
def test_glob_semantics(pattern: str, path: str, matches: bool) -> None:
    policy = compile_source(FILES + f'permit read on "{pattern}"\n', "p.sos")
    assert policy.decide("files.read", {"path": path}, ALICE).allowed is matches


@pytest.mark.parametrize(
    ("principal", "path", "allowed"),
    [
        ("alice", "/home/alice/x", True),
        ("alice", "/home/alice", True),
        ("alice", "/home/bob/x", False),
        ("a/b", "/home/a/b/x", False),
        ("..", "/home/../x", False),
        ("..", "/x", False),
        (".", "/home/x", False),
        ("", "/home/x", False),
        ("*", "/home/*/x", False),
        ("*", "/home/bob/x", False),
        ("**", "/home/bob/x", False),
        ("a\x00b", "/home/a/x", False),
        (None, "/home/None/x", False),
        (["alice"], "/home/alice/x", False),
        (7, "/home/7/x", True),
    ],
)
def test_interpolation_never_widens_a_permit(principal: object, path: str, allowed: bool) -> None:
    policy = compile_source(FILES + 'permit read on "/home/{context.principal}/**"\n', "p.sos")
    ctx = {**ALICE, "principal": principal}
    assert policy.decide("files.read", {"path": path}, ctx).allowed is allowed
    assert (
        policy.decide("files.read", {"path": path}, ctx, context_key=repr(principal)).allowed
        is allowed
    )


def test_interpolation_with_a_missing_context_value_permits_nothing() -> None:
    policy = compile_source(FILES + 'permit read on "/t/{context.attributes.team}/**"\n', "p.sos")
    assert policy.decide("files.read", {"path": "/t/blue/x"}, ALICE).allowed
    assert not policy.decide("files.read", {"path": "/t/blue/x"}, {"principal": "p"}).allowed


def test_unsafe_interpolation_in_a_forbid_fails_closed() -> None:
    text = FILES + 'permit read on "/**"\nforbid read on "/t/{context.tenant}/**"\n'
    policy = compile_source(text, "p.sos")
    assert policy.decide("files.read", {"path": "/x"}, ALICE).allowed
    assert policy.decide("files.read", {"path": "/t/t1/x"}, ALICE).reason is ReasonCode.FORBIDDEN
    # a tenant of '..', '*' or none cannot be matched safely: the forbid's
    # segment matches any segment (fail closed), its literal prefix still holds
    for ctx in ({**ALICE, "tenant": ".."}, {**ALICE, "tenant": "*"}, {"principal": "p"}):
        for key in (None, repr(ctx)):
            assert (
                policy.decide("files.read", {"path": "/t/t1/x"}, ctx, context_key=key).reason
                is ReasonCode.FORBIDDEN
            )
            assert (
                policy.decide("files.read", {"path": "/t/other"}, ctx, context_key=key).reason
                is ReasonCode.FORBIDDEN
            )
            assert policy.decide("files.read", {"path": "/x"}, ctx, context_key=key).allowed


def test_template_resources() -> None:
    text = """namespace github
requirement github.get_issue { action read; resource "{args.owner}/{args.repo}" }
requirement github.pr { action read_pr; resource "/repos/{args.owner}/{args.repo}/pulls/{args.number}" }
permit read on "acme/*"
permit read_pr on "/repos/acme/**"
"""
    policy = compile_source(text, "g.sos")
    d = policy.decide("github.get_issue", {"owner": "acme", "repo": "web", "number": 1}, ALICE)
    assert (d.allowed, d.resource) == (True, "acme/web")
    assert not policy.decide("github.get_issue", {"owner": "evil", "repo": "web"}, ALICE).allowed
    d = policy.decide("github.pr", {"owner": "acme", "repo": "web", "number": 12}, ALICE)
    assert (d.allowed, d.resource) == (True, "/repos/acme/web/pulls/12")
    for bad in ("", ".", "..", "a/b", "a\x00", "a\nb", None, True, 1.5, ["x"]):
        d = policy.decide("github.get_issue", {"owner": "acme", "repo": bad}, ALICE)
        assert d.reason is ReasonCode.UNRESOLVABLE_RESOURCE, bad
    assert (
        policy.decide("github.get_issue", {"owner": "acme"}, ALICE).reason
        is ReasonCode.UNRESOLVABLE_RESOURCE
    )


# ------------------------------------------------------------ conditions


@pytest.mark.parametrize(
    ("condition", "allowed"),
    [
        ('"staff" in context.roles', True),
        ('"admin" in context.roles', False),
        ('"admin" not in context.roles', True),
        ('context.tenant == "t1"', True),
        ('context.tenant != "t1"', False),
        ('context.attributes.team == "blue"', True),
        ('context.tenant in ["t1", "t2"]', True),
        # 'in' is list membership only: a string or object on the right is an
        # error (indeterminate), never a substring or key test
        ('"ali" in context.principal', False),
        ('"ali" not in context.principal', False),
        ('"team" in context.attributes', False),
        ('contains(context.principal, "ali")', True),
        ('contains(context.principal, "bob")', False),
        ('lower("ALICE") == context.principal', True),
        ("args.size < 4 and args.size >= 3 and not (args.size > 3)", True),
        ("args.size <= 2", False),
        ("args.flag < 2", False),  # booleans are not numbers: an error
        ("args.mode < 2", False),
        ('"/d/" + "x.txt" == resource', True),
        ('"/d/" + args.size == resource', False),  # '+' joins strings only
        ('segment(resource, 1) == "d" and segment(resource, -1) == "x.txt"', True),
        ('segment(resource, 3) == "x"', False),  # out of range: an error
        ('any_in(["x", "staff"], context.roles)', True),
        ('all_in(["x", "staff"], context.roles)', False),
        ("all_in([], context.roles)", True),
        ('action == "read"', True),
        ('resource == "/d/x.txt"', True),
        ('startswith(resource, "/d/")', True),
        ('endswith(resource, ".txt")', True),
        ('endswith(resource, ".md")', False),
        ('path(args.path) == "/d/x.txt"', True),
        ('args.mode == "fast"', True),
        ('args.mode == "slow" or args.size == 3', True),
        ("args.size == 3 and args.flag", True),
        ("not args.flag", False),
        ("args.size == 3.0", True),
        ("args.flag == 1", False),  # booleans never equal numbers
        ('context.roles == ["staff"]', True),
        ("(true or false) and not false", True),
        # errors are indeterminate: a permit does not apply
        ('context.missing == "x"', False),
        ('"x" in context.tenant.deeper', False),
        ("args.missing", False),
        ("args.mode", False),  # not a boolean
        ('"a" in args.size', False),
        ('path(args.mode) == "/x"', False),
        # short-circuit: the error on the right is never reached
        ('"staff" in context.roles or context.missing', True),
        ('"admin" in context.roles and context.missing', False),
    ],
)
def test_condition_semantics(condition: str, allowed: bool) -> None:
    text = FILES + f'permit read on "/d/**" when {condition}\n'
    policy = compile_source(text, "p.sos")
    args = {"path": "/d/x.txt", "mode": "fast", "size": 3, "flag": True}
    assert policy.decide("files.read", args, ALICE).allowed is allowed
    assert policy.decide("files.read", args, ALICE, context_key="alice").allowed is allowed


def test_unless_inverts() -> None:
    policy = compile_source(
        FILES + 'permit read on "/d/**" unless "staff" in context.roles\n', "p.sos"
    )
    assert not policy.decide("files.read", {"path": "/d/x"}, ALICE).allowed
    assert policy.decide("files.read", {"path": "/d/x"}, {**ALICE, "roles": []}).allowed


def test_a_forbid_whose_condition_errors_applies() -> None:
    text = (
        FILES
        + 'permit read on "/**"\nforbid read on "/**" unless context.attributes.clearance == "high"\n'
    )
    policy = compile_source(text, "p.sos")
    high = {**ALICE, "attributes": {"clearance": "high"}}
    assert policy.decide("files.read", {"path": "/x"}, high).allowed
    assert policy.decide("files.read", {"path": "/x"}, ALICE).reason is ReasonCode.FORBIDDEN


def test_context_only_conditions_are_cached_per_context_key() -> None:
    policy = compile_source(
        FILES + 'permit read on "/d/**" when "staff" in context.roles\n', "p.sos"
    )
    staff_key = "alice|staff"
    assert policy.decide("files.read", {"path": "/d/x"}, ALICE, context_key=staff_key).allowed
    # same key: the cached verdict is reused (the key is the caller's promise)
    assert policy.decide("files.read", {"path": "/d/y"}, ALICE, context_key=staff_key).allowed
    other = {**ALICE, "roles": []}
    assert not policy.decide("files.read", {"path": "/d/x"}, other, context_key="alice|").allowed
    assert not policy.decide("files.read", {"path": "/d/x"}, other).allowed


def test_hostile_values_never_raise() -> None:
    class Weird(dict):  # type: ignore[type-arg]
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("boom")

        __hash__ = None  # type: ignore[assignment]

    policy = compile_source(
        FILES + 'permit read on "/d/**" when args.x == context.roles\n', "p.sos"
    )
    d = policy.decide("files.read", {"path": "/d/a", "x": Weird()}, ALICE)
    assert d.effect is Effect.DENY


def test_decisions_are_values() -> None:
    policy = compile_source(FILES + 'permit read on "/d/**"\n', "p.sos")
    a = policy.decide("files.read", {"path": "/d/a"}, ALICE)
    b = policy.decide("files.read", {"path": "/d/./a"}, ALICE)
    assert a == b
    with pytest.raises(AttributeError):
        a.effect = Effect.DENY  # type: ignore[misc]
    assert a.to_dict()["rule_ids"][0]["line"] == 5


def test_many_rules_sharing_a_prefix_agree_with_and_without_the_context_cache() -> None:
    rules = (
        "\n".join(f'permit read on "/data/**" when "r{i}" in context.roles' for i in range(30))
        + '\nforbid read on "/data/locked/**" unless "r7" in context.roles\n'
    )
    policy = compile_source(FILES + rules, "p.sos")
    for roles in ([], ["r5"], ["r29", "x"], ["r7"], ["r7", "r8"]):
        ctx = {**ALICE, "roles": roles}
        for path in ("/data/a", "/data/locked/b", "/other"):
            plain = policy.decide("files.read", {"path": path}, ctx)
            cached = policy.decide("files.read", {"path": path}, ctx, context_key=repr(roles))
            again = policy.decide("files.read", {"path": path}, ctx, context_key=repr(roles))
            assert plain == cached == again
            assert plain.allowed is (
                bool(roles)
                and roles != ["x"]
                and path != "/other"
                and ("locked" not in path or "r7" in roles)
            )


def test_context_cache_is_bounded() -> None:
    from sharedos.policy.policyset import CONTEXT_CACHE_SIZE

    policy = compile_source(
        FILES + 'permit read on "/d/**" when "staff" in context.roles\n', "p.sos"
    )
    for i in range(CONTEXT_CACHE_SIZE * 3):
        policy.decide("files.read", {"path": "/d/x"}, ALICE, context_key=f"user-{i}")
    assert len(policy._contexts) <= CONTEXT_CACHE_SIZE


def test_kept_decisions_are_bounded_and_stay_right(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decisions kept for reuse (by tool and cited rule, or by a tuple of rules) never
    exceed the bound, and a decision made after the store is dropped is the same."""
    from sharedos.policy import evaluator

    monkeypatch.setattr(evaluator, "DECISION_CACHE_SIZE", 16)
    policy = compile_source(
        FILES
        + 'permit read on "/d/**"\n'
        + 'permit read on "/d/both/**"\n'
        + 'forbid read on "/d/no/**"\n',
        "p.sos",
    )

    def kept() -> int:
        by_tool = sum(
            len(per)
            for plan in policy._tools.values()
            for kept in (plan.decided, plan.decided_multi)
            for per in kept.values()
        )
        return by_tool + len(policy._decisions)

    first = {}
    for i in range(100):
        for path in (f"/d/{i}", f"/d/both/{i}", f"/d/no/{i}", f"/e/{i}"):
            first[path] = policy.decide("files.read", {"path": path}, ALICE)
            assert kept() <= 16
    for path, decision in first.items():
        again = policy.decide("files.read", {"path": path}, ALICE)
        assert again == decision
        assert again.allowed is (path.startswith("/d/") and not path.startswith("/d/no/"))
    assert [r.line for r in first["/d/both/1"].rule_ids] == [5, 6]


def test_kept_decisions_for_one_resource_and_first_rule_are_told_apart() -> None:
    """Decisions are kept by tool, first rule cited and resource; callers whose
    decisions on one resource share the first rule but cite different rules after
    it (or none after it) each get their own decision, in any order, again and again."""
    source = (
        FILES
        + 'permit read on "/d/**"\n'
        + 'permit read on "/d/**" when "a" in context.roles\n'
        + 'permit read on "/d/**" when "b" in context.roles\n'
        + 'forbid read on "/d/x/**" unless "c" in context.roles\n'
        + 'forbid read on "/d/x/**" when "a" in context.roles\n'
    )
    policy = compile_source(source, "p.sos")
    contexts = [{"roles": r} for r in ([], ["a"], ["b"], ["a", "b"], ["b", "a"], ["c"], ["a", "c"])]
    for order in (contexts, contexts[::-1], contexts[1::2] + contexts[::2]):
        for _ in range(2):
            for ctx in order:
                for path in ("/d/1", "/d/x/1"):
                    for key in (None, repr(ctx)):
                        got = policy.decide("files.read", {"path": path}, ctx, context_key=key)
                        fresh = compile_source(source, "p.sos")
                        assert got == fresh.decide("files.read", {"path": path}, ctx)
    lines = lambda ctx, path: [  # noqa: E731
        r.line for r in policy.decide("files.read", {"path": path}, ctx).rule_ids
    ]
    assert lines({"roles": []}, "/d/1") == [5]
    assert lines({"roles": ["b", "a"]}, "/d/1") == [5, 6, 7]
    assert lines({"roles": ["a"]}, "/d/x/1") == [8, 9]
    assert lines({"roles": ["a", "c"]}, "/d/x/1") == [9]


def test_concurrent_decisions_agree() -> None:
    import threading

    policy = compile_source(
        FILES
        + 'permit read on "/home/{context.principal}/**"\n'
        + 'forbid read on "/home/{context.principal}/secret/**" unless "admin" in context.roles\n',
        "p.sos",
    )
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(300):
                user = f"u{(n + i) % 7}"
                ctx = {"principal": user, "roles": ["admin"] if i % 2 else []}
                key = f"{user}|{i % 2}"
                d = policy.decide(
                    "files.read", {"path": f"/home/{user}/secret/x"}, ctx, context_key=key
                )
                assert d.allowed is bool(i % 2)
                assert policy.could_permit("files.read", ctx, context_key=key)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_hostile_context_and_key_never_raise() -> None:
    class Exploding(dict):  # type: ignore[type-arg]
        def __contains__(self, key: object) -> bool:
            raise RuntimeError("boom")

        def __getitem__(self, key: object) -> object:
            raise RuntimeError("boom")

    text = (
        FILES
        + 'permit read on "/home/{context.principal}/**"\n'
        + 'forbid read on "/t/{context.tenant}/**"\n'
        + 'permit read on "/t/**" when "staff" in context.roles\n'
    )
    policy = compile_source(text, "p.sos")
    for ctx in (Exploding(), {"principal": Exploding(), "roles": Exploding()}):
        for key in (None, ["unhashable"], "k1"):
            for path in ("/home/alice/x", "/t/x/y"):
                d = policy.decide("files.read", {"path": path}, ctx, context_key=key)  # type: ignore[arg-type]
                assert d.effect is Effect.DENY
            assert policy.could_permit("files.read", ctx, context_key=key) in (True, False)  # type: ignore[arg-type]


def test_policies_reading_the_turn_id_are_not_cached_across_turns() -> None:
    # AccessContext.cache_key leaves the turn id out on purpose; a rule that
    # reads it must therefore be evaluated afresh for every turn.
    policy = compile_source(
        FILES + 'permit read on "/d/**" when context.turn_id == "turn-1"\n', "p.sos"
    )
    one = {**ALICE, "turn_id": "turn-1"}
    two = {**ALICE, "turn_id": "turn-2"}
    assert policy.decide("files.read", {"path": "/d/x"}, one, context_key="alice").allowed
    assert not policy.decide("files.read", {"path": "/d/x"}, two, context_key="alice").allowed
    assert policy.could_permit("files.read", one, context_key="alice")
    assert not policy.could_permit("files.read", two, context_key="alice")
    cached = compile_source(FILES + 'permit read on "/d/**" when context.tenant == "t1"\n', "p.sos")
    assert cached.program["reads_turn_id"] is False


# The compiled forms of `x in [constant strings]`, `x <= number` and boolean
# operands have fast paths; they must decide exactly what the general forms do,
# errors included (a permit whose condition errors does not apply, a forbid does).
_ODD_VALUES: list[object] = [
    "create",
    "delete",
    "",
    1,
    0,
    True,
    False,
    None,
    1.5,
    10,
    11,
    10.0,
    ["create"],
    {"a": 1},
]


@pytest.mark.parametrize("effect", ["permit", "forbid"])
@pytest.mark.parametrize(
    ("fast", "general"),
    [
        ('args.v in ["create", "append"]', 'args.v in ["create", "app" + "end"]'),
        ('args.v not in ["create", "append"]', 'not (args.v in ["create", "app" + "end"])'),
        ("args.v <= 10", "10 >= args.v"),
        ("args.v > 10", "10 < args.v"),
        ("args.v < 10.5", "10.5 > args.v"),
        ("args.v >= 10", "10 <= args.v"),
        (
            'args.v == "create" and args.v in ["create"]',
            'args.v == "create" and args.v in [lower("CREATE")]',
        ),
        ('not (args.v in ["create"])', 'not (args.v in [lower("CREATE")])'),
        ('args.v in ["create"] or args.v > 10', 'args.v in [lower("CREATE")] or 10 < args.v'),
    ],
)
def test_fast_condition_forms_decide_like_the_general_forms(
    effect: str, fast: str, general: str
) -> None:
    base = FILES + ('permit write on "/**"\n' if effect == "forbid" else "")
    fast_policy = compile_source(base + f'{effect} write on "/d/**" when {fast}\n', "p.sos")
    general_policy = compile_source(base + f'{effect} write on "/d/**" when {general}\n', "q.sos")
    for value in [*_ODD_VALUES, "missing"]:
        args: dict[str, object] = {"path": "/d/x"}
        if value != "missing":
            args["v"] = value
        got = fast_policy.decide("files.write", args, ALICE)
        want = general_policy.decide("files.write", args, ALICE)
        assert (got.effect, got.reason) == (want.effect, want.reason), (fast, value)


def test_rules_sharing_comparisons_keep_their_own_values() -> None:
    # Compiled comparisons are shared between the rules of a program that repeat
    # one; 1, 1.0, true and "1" are different comparisons and must stay apart.
    text = FILES + "".join(
        f'permit write on "/{name}/**" when args.v == {value}\n'
        for name, value in [("int", "1"), ("bool", "true"), ("str", '"1"'), ("int2", "1")]
    )
    policy = compile_source(text, "p.sos")
    for value in (1, True, "1", 1.0, 2):
        got = {
            name: policy.decide("files.write", {"path": f"/{name}/x", "v": value}, ALICE).allowed
            for name in ("int", "bool", "str", "int2")
        }
        assert got == {
            "int": value == 1 and type(value) is not bool,
            "bool": value is True,
            "str": value == "1",
            "int2": value == 1 and type(value) is not bool,
        }, value
    # the same condition, one closure (as decisions compile it, and as a decoded rule does)
    assert policy._cols.applies[3] is policy._cols.applies[0] is not None
    assert policy.rule(3).compile_condition(policy._table.memo) is policy._cols.applies[0]


def test_actions_sharing_one_decision_trie_keep_their_own_rules() -> None:
    """The actions of a namespace share one trie; below the deepest prefix of one
    action's own rules a node (there for another action) must give that action the
    rules of its deepest prefix, never the children of a shallower node."""
    policy = compile_source(
        FILES
        + 'permit read on "/a/**"\n'
        + 'permit read on "/a/c/**"\n'
        + 'forbid read on "/a/c/secret/**"\n'
        + 'permit write on "/a/b/c/**"\n'
        + 'forbid write on "/a/b/c/secret/**"\n',
        "p.sos",
    )
    cases = {
        ("files.read", "/a/b/c/d"): True,  # read's deepest prefix is /a
        ("files.read", "/a/b/c/secret/x"): True,  # the read forbid is under /a/c, not here
        ("files.read", "/a/c/secret/x"): False,
        ("files.write", "/a/b/c/d"): True,
        ("files.write", "/a/b/c/secret/x"): False,
        ("files.write", "/a/c/d"): False,  # write's own rules are under /a/b/c only
        ("files.write", "/a/b/cc"): False,
        ("files.search", "/a/b/c/d"): False,  # no rule of its action at all
    }
    for (tool, path), allowed in cases.items():
        key = "root" if tool == "files.search" else "path"
        assert policy.decide(tool, {key: path}, ALICE).allowed is allowed, (tool, path)


def test_decisions_built_by_slots_equal_the_dataclass() -> None:
    """``new_decision`` / ``new_rule_ref`` (the evaluator's faster builders) make the
    same values as the dataclasses' constructors, field for field."""
    from sharedos.policy.decision import Decision, RuleRef, new_decision, new_rule_ref

    ref = new_rule_ref("r1", "p.sos", 3, 1, "permit")
    assert ref == RuleRef("r1", "p.sos", 3, 1, "permit") and ref.to_dict()["line"] == 3
    args = (Effect.ALLOW, ReasonCode.ALLOWED, "files.read", "files", "read", "/a", (ref,), "d")
    built = new_decision(*args)
    assert built == Decision(*args) and hash(built) == hash(Decision(*args))
    assert built.approval is None and built.allowed
    with pytest.raises(AttributeError):
        built.effect = Effect.DENY  # type: ignore[misc]


def test_references_built_in_bulk_equal_the_dataclass() -> None:
    """``new_rule_refs`` (every rule's reference, at load) makes, rule for rule, the
    values ``RuleRef`` makes: each a distinct, frozen, hashable object."""
    from sharedos.policy.decision import RuleRef, new_rule_refs

    fields = [
        (f"r{i}", f"f{i % 3}.sos", i + 1, i % 7 + 1, ("permit", "forbid", "approval")[i % 3])
        for i in range(50)
    ]
    built = new_rule_refs(*(list(column) for column in zip(*fields, strict=True)))  # type: ignore[arg-type]
    assert built == [RuleRef(*f) for f in fields]  # type: ignore[arg-type]
    assert [hash(r) for r in built] == [hash(RuleRef(*f)) for f in fields]  # type: ignore[arg-type]
    assert len({id(r) for r in built}) == 50 and new_rule_refs([], [], [], [], []) == []
    with pytest.raises(AttributeError):
        built[0].line = 9  # type: ignore[misc]


def test_the_load_builds_every_reference_a_decision_cites() -> None:
    """A rule's reference is built by the load, once: decisions citing the rule (alone
    or with others, on any resource) hold that very object, equal to the one a
    decoded rule record has."""
    policy = compile_source(
        FILES
        + 'permit read on "/d/**"\n'
        + '@id("second")\n'
        + 'permit read on "/d/x/**"\n'
        + 'forbid write on "/d/**"\n',
        "p.sos",
    )
    refs = list(policy._cols.refs)
    assert [r.id for r in refs] == ["p.sos:5", "second", "p.sos:8"]
    assert [r.effect for r in refs] == ["permit", "permit", "forbid"]
    one = policy.decide("files.read", {"path": "/d/a"}, ALICE)
    two = policy.decide("files.read", {"path": "/d/x/a"}, ALICE)
    deny = policy.decide("files.write", {"path": "/d/x/a"}, ALICE)
    assert one.rule_ids[0] is refs[0] and one.rule_ids == (policy.rule(0).ref,)
    assert two.rule_ids[0] is refs[0] and two.rule_ids[1] is refs[1]
    assert deny.rule_ids == (refs[2],) and deny.detail.endswith("forbidden by p.sos:8")
    assert list(policy._cols.refs) == refs  # none built or replaced since
    policy.prepare()  # the decoded records share them too
    assert all(policy.rule(i).ref is ref for i, ref in enumerate(refs))
