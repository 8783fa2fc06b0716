"""Property test of ``diff``: on random pairs of policies,

* every counterexample it reports decides differently when both policies are
  compiled again from source and decide it (not the analysis's own objects);
* every request of a brute-force sample that decides differently falls into
  a group the report has (same tool, action, pattern and kind) when the
  analysis is complete, and the verdict is never "unchanged" when one does.

The sample space is rich enough to hit every pattern, condition and
interpolation the generator uses; it stays inside the kernel's contexts
(principal, tenant, roles, attributes), which is the space ``diff`` speaks for.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharedos.policy import clock, compile_source
from sharedos.policy.analysis.compare import Comparer, Request
from sharedos.policy.analysis.diff import diff_policies

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
    "/alice/**",
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
    "alice/web",
]
CONDITIONS = [
    '"r1" in context.roles',
    'context.tenant == "t1"',
    '"r1" in context.roles or context.tenant == "t2"',
    'contains(context.tenant, "1")',
    'lower(context.principal) == "alice"',
    'any_in(["r1", "r9"], context.roles)',
    'all_in(["r1"], context.roles)',
    "context.attributes.level >= 3",
    'context.attributes.team == "web"',
    'args.mode == "x"',
    '"r1" in context.roles and args.mode == "x"',
    'args.mode != "x" or context.tenant == "t2"',
    "args.n < 3",
    "args.flag",
    'startswith(resource, "/a/b")',
    'endswith(resource, ".md")',
    'segment(resource, 1) == "a"',
    "segment(resource, -1) == context.principal",
    'resource == "acme/web"',
    'action == "read"',
    'args.mode in ["x", "z"]',
    'startswith(args.name, "ab")',
    '"t" in args.tags',
    "args.owner in context.attributes.orgs",
    "args.owner == context.principal",
    "segment(resource, 2) in context.attributes.folders",
    "not (args.flag == true) and context.attributes.level < 2",
    # issue 23's constructs: presence, canonical paths, the caseless key, strict
    # equality at depth, the clock
    "has args.mode",
    "not has args.flag",
    'has args.mode and args.mode == "x"',
    'startswith(path(args.dst), "/a/")',
    'segment(path(args.dst), 1) == "b"',
    'lower(args.name) == "ab"',
    "args.v == [1]",
    "args.v == [true]",
    "args.v == context.attributes.v",
    "context.now.hour >= 9",
    'context.now.weekday in ["sat", "sun"]',
    "context.now.timestamp < 1798761600",
    # forms the analysis does not reduce: it must say so, never "no change"
    'args.mode + "1" == "x1"',
    "lower(args.mode) == lower(context.tenant)",
]

SEGS = ["a", "b", "c", "x.md", "zz", "alice", "web", "acme", "x-t1", "bc"]
#: the host always gives the time to a policy that reads it: Saturday morning and
#: Monday early before the cutoff, a Monday noon after it
NOWS = [
    clock.expand("2026-12-05T10:00:00Z"),
    clock.expand("2026-12-07T08:30:00Z"),
    clock.expand("2027-01-04T12:00:00Z"),
]
CONTEXTS: list[dict[str, Any]] = [
    {"principal": p, "tenant": t, "roles": r, "attributes": a, "now": now}
    for p, t, r, a, now in itertools.product(
        ["alice", "zz", "ALICE", "a/b", ".."],
        ["t1", "t2", "default"],
        [[], ["r1"], ["r9"], ["r1", "r9"]],
        [
            {},
            {"level": 3, "team": "web", "orgs": ["acme"], "folders": ["b", "web"], "v": [1]},
            {"level": 1, "orgs": [], "v": [True]},
        ],
        NOWS,
    )
]
ARGS = [
    {**({"mode": m} if m else {}), **({"n": n} if n is not None else {}), **f, **x, **d, **v}
    for m in ("x", "y", "z", None)
    for n in (2, 5, None)
    for f in ({}, {"flag": True})
    for x in (
        {},
        {"name": "abc", "tags": ["t"]},
        {"name": "zz", "tags": []},
        {"name": "AB"},
        {"name": "\uff21b"},  # a fullwidth A: lower() is "ab"
    )
    for d in ({}, {"dst": "/a/x"}, {"dst": "/b/c"}, {"dst": "/a/../b"}, {"dst": "rel"})
    for v in ({}, {"v": [1]}, {"v": [True]})
]


@st.composite
def rule(draw: st.DrawFn, ns: str) -> str:
    forbid = draw(st.booleans())
    actions = {"files": ["read", "write"], "g": ["get", "post"]}[ns]
    acts = draw(
        st.one_of(
            st.just("*"),
            st.lists(st.sampled_from(actions), min_size=1, max_size=2, unique=True).map(", ".join),
        )
    )
    pattern = draw(st.sampled_from(PATH_PATTERNS if ns == "files" else REPO_PATTERNS))
    cond = ""
    shape = draw(st.sampled_from(["", "when", "unless", "both"]))
    if shape in ("when", "unless"):
        cond = f" {shape} {draw(st.sampled_from(CONDITIONS))}"
    elif shape == "both":
        cond = (
            f" when {draw(st.sampled_from(CONDITIONS))} unless {draw(st.sampled_from(CONDITIONS))}"
        )
    return f'{"forbid" if forbid else "permit"} {acts} on "{pattern}"{cond}'


@st.composite
def rules(draw: st.DrawFn) -> list[tuple[str, str]]:
    out = [("files", r) for r in draw(st.lists(rule("files"), min_size=1, max_size=4))]
    out += [("g", r) for r in draw(st.lists(rule("g"), min_size=1, max_size=4))]
    return out


#: Requirement sets a pair may switch between: a changed resource expression, a tool
#: removed, a tool added, a template with text beside a hole.
HEADS = [
    HEAD,
    HEAD.replace("files.write { action write; resource path(args.path) }",
                 "files.write { action write; resource path(args.file) }"),
    HEAD.replace('requirement g.post { action post; resource "{args.owner}/{args.repo}" }\n', ""),
    HEAD + "namespace files\nrequirement files.list { action read; resource path(args.path) }\n",
    HEAD.replace('g.get  { action get;  resource "{args.owner}/{args.repo}" }',
                 'g.get  { action get;  resource "{args.owner}/x-{args.repo}" }'),
]  # fmt: skip


def source(items: list[tuple[str, str]], head: str = HEAD) -> str:
    lines = [head]
    for ns in ("files", "g"):
        lines.append(f"namespace {ns}")
        lines += [r for n, r in items if n == ns]
    return "\n".join(lines) + "\n"


@st.composite
def pair(draw: st.DrawFn) -> tuple[str, str]:
    old = draw(rules())
    new = list(old)
    old_head = draw(st.sampled_from(HEADS))
    new_head = draw(st.sampled_from([old_head, *HEADS]))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["add", "drop", "replace", "flip"]))
        if op == "add" or not new:
            ns = draw(st.sampled_from(["files", "g"]))
            new.append((ns, draw(rule(ns))))
        elif op == "drop":
            new.pop(draw(st.integers(0, len(new) - 1)))
        elif op == "replace":
            i = draw(st.integers(0, len(new) - 1))
            new[i] = (new[i][0], draw(rule(new[i][0])))
        else:
            i = draw(st.integers(0, len(new) - 1))
            ns, text = new[i]
            new[i] = (
                ns,
                text.replace("permit", "forbid", 1)
                if text.startswith("permit")
                else text.replace("forbid", "permit", 1),
            )
    return source(old, old_head), source(new, new_head)


def sample(tool: str) -> list[dict[str, Any]]:
    if tool.startswith("files."):
        paths = ["/"] + [
            "/" + "/".join(p) for n in (1, 2, 3) for p in itertools.product(SEGS[:8], repeat=n)
        ]
        picked = [*paths[::7], "/a/b", "/alice/x.md"]
        return [
            *({"path": p} for p in picked),
            *({"file": p} for p in picked[::3]),
            *({"path": p, "file": q} for p, q in zip(picked[::5], picked[1::5], strict=False)),
            {"path": "relative"},
        ]
    names = ["acme", "web", "alice", "zz", "x-web"]
    return [{"owner": o, "repo": r} for o in names for r in names]


TOOLS = ("files.read", "files.write", "files.list", "g.get", "g.post")
#: Requests sampled per pair of policies.
SAMPLE_SIZE = 3000


def sampled(seed: str, n: int) -> list[Request]:
    """``n`` requests drawn from the brute-force space (deterministic for one pair)."""
    rng = random.Random(seed)
    bases = {tool: sample(tool) for tool in TOOLS}
    out = []
    for _ in range(n):
        tool = rng.choice(TOOLS)
        args = {**rng.choice(bases[tool]), **rng.choice(ARGS)}
        out.append(Request(tool, args, rng.choice(CONTEXTS)))
    return out


def compiles(text: str) -> Any:
    return compile_source(text, "p.sos")


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(pair())
def test_diff_reports_only_real_changes_and_misses_none(texts: tuple[str, str]) -> None:
    old_text, new_text = texts
    try:
        old, new = compiles(old_text), compiles(new_text)
    except Exception:  # the generator can write a rule the checker refuses
        return
    report = diff_policies(old, new, max_examples=0)
    # 1. every counterexample decides differently under freshly compiled policies
    fresh = Comparer(compiles(old_text), compiles(new_text))
    for group in report.groups:
        for change in group.examples:
            again = fresh.compare_one(change.request)
            assert again is not None, change.to_dict()
            assert again.kind == change.kind
    # 2. sampled requests that decide differently are in a reported group
    keys = {(g.tool, g.action, g.pattern, g.kind) for g in report.groups}
    for request in sampled(old_text + new_text, SAMPLE_SIZE):
        change = fresh.compare_one(request)
        if change is None:
            continue
        assert report.verdict != "unchanged", (request, change.kind)
        if report.complete:
            key = (request.tool, change.action, change.pattern, change.kind)
            assert key in keys, (request.to_dict(), key, sorted(keys, key=repr))
