"""could_permit is exact: True iff some arguments exist for which decide allows.

Brute force: for random policies and contexts, decide every call over a
resource/argument space rich enough to hit every pattern, and compare.
"""

from __future__ import annotations

import itertools
import random

from sharedos.policy import compile_source

HEAD = """namespace files
requirement files.read  { action read;  resource path(args.path) }
requirement files.write { action write; resource path(args.path) }
namespace g
requirement g.get  { action get;  resource "{args.owner}/{args.repo}" }
requirement g.post { action post; resource "{args.owner}/{args.repo}" }
"""

PATH_PATTERNS = [
    "/**",
    "/a/**",
    "/a/*",
    "/a/b",
    "/a/*/c",
    "/{context.principal}/**",
    "/a/{context.principal}/**",
    "/a/*.md",
    "/b/**",
    "/a",
    "/**/c",
    "/",
    "/*/b/**",
    "/a/x-{context.tenant}",
]
REPO_PATTERNS = [
    "*/*",
    "acme/*",
    "acme/web",
    "**",
    "{context.principal}/*",
    "*/web",
    "acme/**",
    "*",
    "a/b/c",
]
CONTEXT_CONDITIONS = [
    '"r1" in context.roles',
    'context.tenant == "t1"',
    "context.missing == 1",
    '"r1" in context.roles or context.tenant == "t2"',
]
ARG_CONDITIONS = [
    'args.mode == "x"',
    '"r1" in context.roles and args.mode == "x"',
    'args.mode != "x" or context.missing',
]
# Conditions on the resource are assumed satisfiable (documented approximation,
# tested separately below), so the exactness test draws only on context,
# action and argument conditions.
PERMIT_ONLY = ['action == "read"', 'action != "get"']


def _rule(rng: random.Random, ns: str) -> str:
    forbid = rng.random() < 0.35
    actions = {"files": ["read", "write"], "g": ["get", "post"]}[ns]
    acts = "*" if rng.random() < 0.4 else ", ".join(rng.sample(actions, rng.randint(1, 2)))
    pattern = rng.choice(PATH_PATTERNS if ns == "files" else REPO_PATTERNS)
    pool = CONTEXT_CONDITIONS + ARG_CONDITIONS + ([] if forbid else PERMIT_ONLY)
    cond = ""
    if rng.random() < 0.6:
        cond = f" {rng.choice(['when', 'unless'])} {rng.choice(pool)}"
    return f'{"forbid" if forbid else "permit"} {acts} on "{pattern}"{cond}'


def _policy(rng: random.Random) -> str:
    lines = [HEAD, "namespace files"]
    lines += [_rule(rng, "files") for _ in range(rng.randint(1, 5))]
    lines.append("namespace g")
    lines += [_rule(rng, "g") for _ in range(rng.randint(1, 5))]
    return "\n".join(lines) + "\n"


SEGS = ["a", "b", "c", "x.md", "zz"]
NAMES = ["acme", "web", "zz"]


def _paths(ctx: dict[str, object]) -> list[str]:
    """Every path of depth <= 3 over the pattern literals and this context's values."""
    segs = [*SEGS, f"x-{ctx['tenant']}", str(ctx["principal"])]
    return ["/"] + ["/" + "/".join(p) for n in (1, 2, 3) for p in itertools.product(segs, repeat=n)]


MODES = [{"mode": "x"}, {"mode": "y"}, {}]
CONTEXTS = [
    {"principal": "alice", "tenant": "t1", "roles": ["r1"]},
    {"principal": "alice", "tenant": "t2", "roles": []},
    {"principal": "zz", "tenant": "t3", "roles": [], "missing": 1},
    {"principal": "..", "tenant": "a/b", "roles": ["r1"]},
]


def _brute(policy: object, tool: str, ctx: dict[str, object]) -> bool:
    decide = policy.decide  # type: ignore[attr-defined]
    if tool.startswith("files."):
        space = ({"path": p, **m} for p in _paths(ctx) for m in MODES)
    else:
        names = [*NAMES, str(ctx["principal"])]
        space = ({"owner": o, "repo": r, **m} for o in names for r in names for m in MODES)
    return any(decide(tool, args, ctx).allowed for args in space)


def test_could_permit_agrees_with_decide_on_random_policies() -> None:
    rng = random.Random(20261202)
    checked = positives = 0
    for _ in range(70):
        text = _policy(rng)
        policy = compile_source(text, "rand.sos")
        for ctx in CONTEXTS:
            for tool in ("files.read", "files.write", "g.get", "g.post"):
                expected = _brute(policy, tool, ctx)
                got = policy.could_permit(tool, ctx)
                assert got == expected, f"{tool} {ctx}\n{text}"
                assert policy.could_permit(tool, ctx, context_key=repr(ctx)) == expected
                checked += 1
                positives += expected
    # the generator must exercise both answers
    assert 0.2 < positives / checked < 0.8, positives / checked


def test_shipped_policies_list_what_they_allow(repo_root: object) -> None:
    from pathlib import Path

    from sharedos.policy import compile_paths

    root = Path(str(repo_root))
    policy = compile_paths([root / "rules"])
    users = [
        {"principal": "bob", "tenant": "acme", "roles": []},
        {"principal": "dana", "tenant": "acme", "roles": ["admin"]},
        {"principal": "carol", "tenant": "default", "roles": ["editor", "maintainer"]},
        {"principal": "sam", "tenant": "acme", "roles": ["security"]},
        {"principal": "a/b", "tenant": "acme", "roles": []},
    ]
    base_pool = ["public", "private", "shared", "home", "a", "x.txt"]
    owners = ["sharedos", "python", "x"]
    repos = ["sharedos", "security", "cpython"]
    for ctx in users:
        pool = [*base_pool, str(ctx["principal"])]
        paths = ["/"] + [
            "/" + "/".join(p) for n in (1, 2, 3) for p in itertools.product(pool, repeat=n)
        ]
        for tool in policy.requirements:
            if tool.startswith("files."):
                space = [{"path": p, "root": p} for p in paths]
            else:
                space = [{"owner": o, "repo": r} for o in owners for r in repos]
            expected = any(policy.decide(tool, a, ctx).allowed for a in space)
            assert policy.could_permit(tool, ctx) == expected, (tool, ctx)


def test_unknown_tool_is_never_listed() -> None:
    policy = compile_source(HEAD + 'namespace files\npermit * on "/**"\n', "p.sos")
    assert not policy.could_permit("files.delete", {"principal": "a"})
    assert not policy.could_permit(None, {"principal": "a"})  # type: ignore[arg-type]


def test_forbid_covering_only_part_of_a_permit_keeps_the_tool() -> None:
    text = HEAD + 'namespace files\npermit read on "/a/**"\nforbid read on "/a/*"\n'
    policy = compile_source(text, "p.sos")
    ctx = {"principal": "p"}
    assert policy.could_permit("files.read", ctx)  # /a itself and /a/x/y remain
    assert policy.decide("files.read", {"path": "/a/x/y"}, ctx).allowed
    text = (
        HEAD
        + 'namespace files\npermit read on "/a/**"\nforbid * on "/**" unless "admin" in context.roles\n'
    )
    policy = compile_source(text, "p.sos")
    assert not policy.could_permit("files.read", ctx)
    assert policy.could_permit("files.read", {"principal": "p", "roles": ["admin"]})


def test_resource_conditions_are_assumed_satisfiable() -> None:
    """The documented over-approximation: listed, yet every call is denied. Never the reverse."""
    text = HEAD + 'namespace g\npermit get on "acme/*" when startswith(resource, "/")\n'
    policy = compile_source(text, "p.sos")
    ctx = {"principal": "p"}
    assert policy.could_permit("g.get", ctx)
    assert not any(policy.decide("g.get", {"owner": "acme", "repo": r}, ctx).allowed for r in NAMES)
