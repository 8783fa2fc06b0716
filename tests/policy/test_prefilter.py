"""What a decision knows without evaluating (``prefilter``) changes no decision.

Role buckets, copies of a rule (``twins``) and context-pattern plans are
shortcuts a compiled program carries; a program stripped of them (every rule
evaluated as written, every context pattern resolved by the general matcher)
must decide every call identically: effect, reason, the rules cited and the
detail.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sharedos.policy import compile_source, evaluator
from sharedos.policy.policyset import PolicySet


def stripped(policy: PolicySet) -> PolicySet:
    """The same program without role keys, buckets, twins or context plans, loaded
    without value keys or rules cited in bulk (``evaluator._split_sure``)."""
    program = copy.deepcopy(policy._program)
    rules = program["rules"]
    n = len(rules["id"])
    rules["rkey"] = [None] * n
    rules["rform"] = [0] * n
    rules["mplan"] = [None] * n
    program["buckets"] = [0] * len(program["groups"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evaluator, "BUCKET_MIN", 10**9)
        mp.setattr(evaluator, "SURE_MIN", 10**9)
        return PolicySet(program)


def decide_all(policy: PolicySet, calls: list[tuple[str, dict[str, Any], Any]]) -> list[Any]:
    out = []
    for i, (tool, args, ctx) in enumerate(calls):
        out.append(policy.decide(tool, args, ctx))
        out.append(policy.decide(tool, args, ctx, context_key=f"k{i % 3}:{ctx!r}"))
    return out


COPIES = """namespace files
requirement files.write { action write; resource path(args.path) }
requirement files.read { action read; resource path(args.path) }
permit write on "/drop/{context.principal}-*"
permit write on "/drop/{context.principal}-*"
permit read on "/drop/**" when "r1" in context.roles
permit write on "/drop/{context.principal}-*"
permit read on "/drop/**" when "r1" in context.roles
forbid write on "/drop/{context.principal}-*x" unless "admin" in context.roles
forbid write on "/drop/{context.principal}-*x" unless "admin" in context.roles
permit read on "/drop/*" when "r2" in context.roles
permit read on "/drop/*" when "r3" in context.roles
permit read on "/drop/*" when "r4" in context.roles
permit read on "/drop/*" when "r5" in context.roles and args.path != "/drop/z"
permit read on "/drop/*" when "r6" in context.roles
permit read on "/drop/*" when "r6" in context.roles
permit read on "/u/{context.principal}.d/*"
permit write on "/drop/x-{context.principal}-*-y*"
"""


def calls_for(principals: list[Any], roles: list[Any]) -> list[tuple[str, dict[str, Any], Any]]:
    paths = [
        "/drop/bob-1",
        "/drop/bob-1x",
        "/drop/bob",
        "/drop/alice-2",
        "/drop/z",
        "/drop/a/b",
        "/u/bob.d/x",
        "/u/bob.dx/x",
        "/drop/x-bob-1-y2",
        "/drop/x-bob--y",
        "/drop/x-bob-1-z",
    ]
    out = []
    for p in principals:
        for r in roles:
            for tool in ("files.write", "files.read"):
                for path in paths:
                    out.append((tool, {"path": path}, {"principal": p, "roles": r}))
    return out


def test_copies_of_a_rule_are_tested_once_and_all_cited() -> None:
    policy = compile_source(COPIES, "copies.sos")
    buckets = policy._program["buckets"]
    assert any(b != 0 and len(b) == 3 for b in buckets)  # the copies were found
    d = policy.decide("files.write", {"path": "/drop/bob-1"}, {"principal": "bob", "roles": []})
    assert d.allowed and [r.line for r in d.rule_ids] == [4, 5, 7]
    d = policy.decide("files.write", {"path": "/drop/bob-1x"}, {"principal": "bob", "roles": []})
    assert not d.allowed and [r.line for r in d.rule_ids] == [9, 10]
    d = policy.decide("files.read", {"path": "/drop/q"}, {"principal": "bob", "roles": ["r6"]})
    assert d.allowed and [r.line for r in d.rule_ids] == [15, 16]


def test_prefilter_changes_no_decision() -> None:
    policy = compile_source(COPIES, "copies.sos")
    calls = calls_for(
        ["bob", "alice", "a/b", "", 7, None, "..", "bob*"],
        [[], ["r1"], ["r6", "admin"], ["r5", "r2"], "r1", [1, "r1"], None, ("r6",)],
    )
    calls.append(("files.write", {"path": "/drop/bob-1"}, {"roles": ["admin"]}))
    calls.append(("files.read", {"path": "/drop/q"}, "not a mapping"))
    assert decide_all(policy, calls) == decide_all(stripped(policy), calls)


def test_a_glob_segment_with_a_hole_fails_closed() -> None:
    policy = compile_source(COPIES, "copies.sos")
    unsafe = {"principal": "a/b", "roles": []}
    # a permit whose hole is unsafe matches nothing; a forbid's matches any one segment
    assert not policy.decide("files.write", {"path": "/drop/a-1"}, unsafe).allowed
    d = policy.decide("files.write", {"path": "/drop/anything"}, unsafe)
    assert d.reason.value == "forbidden" and [r.line for r in d.rule_ids] == [9, 10]


def test_copies_that_differ_in_a_bundle_are_each_evaluated() -> None:
    policy = compile_source(COPIES, "copies.sos")
    program = copy.deepcopy(policy._program)
    ids = program["rules"]["id"]
    # a hand-edited program: the second copy of line 4 now needs a role
    second = ids.index("copies.sos:5")
    program["rules"]["cond"][second] = '["cmp","in",["lit","x"],["ref","context",["roles"]]]'
    program["rules"]["ckind"][second] = 1
    edited = PolicySet(program)
    d = edited.decide("files.write", {"path": "/drop/bob-1"}, {"principal": "bob", "roles": []})
    assert d.allowed and [r.line for r in d.rule_ids] == [4, 7]
    calls = calls_for(["bob"], [[], ["x"]])
    assert decide_all(edited, calls) == decide_all(stripped(edited), calls)


def many_copies_source(copies: int) -> str:
    """Dozens of copies of a few rules, interleaved with each other and with other
    rules, on nested prefixes (a deep path meets several groups at once), in role
    buckets and out of them."""
    lines = [
        "namespace files",
        "requirement files.read { action read; resource path(args.path) }",
        "requirement files.write { action write; resource path(args.path) }",
    ]
    for k in range(copies):
        lines.append(f'@id("home-{k}")')
        lines.append('permit read, write on "/home/{context.principal}/**"')
        lines.append(f'@id("dept-{k}")')
        lines.append('permit read on "/home/**" when context.dept == "d1"')
        lines.append(f'permit read on "/home/bob/r{k % 7}/**" when "r{k % 7}" in context.roles')
        if k % 3 == 0:
            lines.append('forbid write on "/home/*/locked/**" unless "admin" in context.roles')
        if k % 5 == 0:
            lines.append(f'permit read on "/home/bob/**" when "r{k % 7}" in context.roles')
    return "\n".join(lines) + "\n"


def test_a_decision_citing_dozens_of_copies_is_the_one_built_rule_by_rule() -> None:
    # Copies' references are built at load, per family; a decision citing them
    # (alone or with other rules) must be exactly the one built rule by rule:
    # the same references, in program order, and the same detail.
    source = many_copies_source(40)
    policy = compile_source(source, "many.sos")
    assert policy._cited  # families of copies were found and prebuilt
    calls = []
    for path in ("/home/bob/x", "/home/bob/r3/y", "/home/bob/locked/z", "/home/al/x", "/etc/x"):
        for roles in ([], ["r3"], ["r3", "r0", "admin"], ["r1", "r2", "r4", "r5", "r6"]):
            for dept in ("d1", "d2"):
                ctx = {"principal": "bob", "roles": roles, "dept": dept}
                for tool in ("files.read", "files.write"):
                    calls.append((tool, {"path": path}, ctx))
    got = decide_all(policy, calls)
    cited = [d for d in got if len(d.rule_ids) >= 40]
    assert len(cited) > 10  # the calls do cite dozens of copies at once
    # the slow way: no buckets, no copies, each reference built when first cited
    assert got == decide_all(stripped(policy), calls)
    fresh = compile_source(source, "many.sos")
    for (tool, args, ctx), d in zip(calls, got[::2], strict=True):
        again = fresh.decide(tool, args, ctx)
        assert again == d
        ids = [r.id for r in d.rule_ids]
        lines = [r.line for r in d.rule_ids]
        assert lines == sorted(lines)  # program order
        if ids:
            assert d.detail.endswith(" by " + ", ".join(ids))
