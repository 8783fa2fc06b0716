"""Rules a walk decides alone, cited in bulk (``evaluator._split_sure``), change no decision.

``forbid * on "/p/**" unless "r3" in context.roles`` applies to everything
under /p unless r3 is held; ``permit read on "/p/**"`` applies to all of it;
``permit read on "/p/**" when "r3" in context.roles`` in r3's bucket applies
whenever its bucket is read. Groups with a few such rules cite them in bulk.
The decisions must be exactly those of the same program read row by row:
effect, reason, every rule cited (copies included) and the detail, for roles
held and not, roles that are not a list of strings (every rule as written),
copies of rules, and deep paths under several such prefixes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharedos.policy.policyset import PolicySet
from tests.budget import examples
from tests.policy.shortcuts import compile_without, decide_all, groups_using
from tests.policy.test_prefilter import stripped

HEADER = """namespace files
requirement files.read { action read; resource path(args.path) }
requirement files.write { action write; resource path(args.path) }
"""


def compile_both(source: str) -> tuple[PolicySet, PolicySet]:
    """The policy, and the same policy with the shortcut under test off."""
    return compile_without(source, "SURE_MIN")


def sure_groups(policy: PolicySet) -> int:
    return groups_using(policy, 5)


def test_forbids_unless_a_role_are_cited_in_bulk_unless_the_role_is_held() -> None:
    source = HEADER + 'permit read on "/p/**"\n'
    source += "".join(f'forbid read on "/p/**" unless "r{k}" in context.roles\n' for k in range(6))
    source += 'forbid read on "/p/**" unless "r2" in context.roles\n'  # a copy of line 7
    bulk, rows = compile_both(source)
    assert sure_groups(bulk) >= 1 and sure_groups(rows) == 0
    call = ("files.read", {"path": "/p/x/y"})
    d = bulk.decide(*call, {"roles": ["r2", "r4"]})
    assert not d.allowed and [r.line for r in d.rule_ids] == [5, 6, 8, 10]
    assert d == rows.decide(*call, {"roles": ["r2", "r4"]})
    for roles in ([], ["r0", "r1", "r2", "r3", "r4", "r5"], "r1", None, ["r1", 1], ("r3",)):
        ctx = {"roles": roles}
        assert bulk.decide(*call, ctx) == rows.decide(*call, ctx)
    assert bulk.decide(*call, {"roles": [f"r{k}" for k in range(6)]}).allowed


ROLES = ("r1", "r2", "r3")
FAMILY_ROLES = tuple(f"r{k}" for k in range(1, 9))
PREFIXES = ("/p/**", "/p/**", "/p/q/**", "/p/q/r/**", "/p/*", "/p/q/*.md")


@st.composite
def rule(draw: Any) -> str:
    effect = draw(st.sampled_from(("permit", "forbid")))
    actions = draw(st.sampled_from(("read", "read", "write", "read, write", "*")))
    prefix = draw(st.sampled_from(PREFIXES))
    r = draw(st.sampled_from(ROLES))
    cond = draw(
        st.sampled_from(
            (
                "",
                "",
                f'when "{r}" in context.roles',
                f'when "{r}" in context.roles',
                f'unless "{r}" in context.roles',
                f'unless "{r}" in context.roles',
                f'when "{r}" in context.roles and args.n > 1',
                f'unless "{r}" in context.roles or args.n > 1',
                "when args.n > 1",
                f'when "{r}" not in context.roles',  # the role forms negated
                f'when not ("{r}" in context.roles)',
                f'unless "{r}" not in context.roles',
                f'unless not ("{r}" in context.roles)',
                f'when not ("{r}" not in context.roles)',  # no role form
            )
        )
    )
    return f'{effect} {actions} on "{prefix}" {cond}'.rstrip()


@st.composite
def family(draw: Any, effect: str, prefix: str) -> list[str]:
    """Rules of one effect on one prefix: unconditional, needing a role, or unless one."""
    out = []
    for _ in range(draw(st.integers(min_value=0, max_value=16))):
        r = draw(st.sampled_from(FAMILY_ROLES))  # enough distinct rules for a role bucket
        cond = draw(
            st.sampled_from(
                (
                    "",
                    f'when "{r}" in context.roles',
                    f'unless "{r}" in context.roles',
                    f'when "{r}" not in context.roles',  # `unless "{r}" in ...`, written so
                    f'unless not ("{r}" in context.roles)',  # `when "{r}" in ...`
                )
            )
        )
        out.append(f'{effect} read on "{prefix}" {cond}'.rstrip())
    return out


@st.composite
def policy_source(draw: Any) -> str:
    rules = draw(family("permit", "/p/**")) + draw(family("forbid", "/p/**"))
    rules += draw(family(draw(st.sampled_from(("permit", "forbid"))), "/p/q/**"))
    rules += draw(st.lists(rule(), min_size=1, max_size=12))
    copies = draw(st.lists(st.sampled_from(rules), max_size=4))  # rules repeated verbatim
    return HEADER + "\n".join(draw(st.permutations(rules + copies))) + "\n"


@st.composite
def call(draw: Any) -> tuple[str, Any, Any]:
    path = draw(st.sampled_from(("/p", "/p/x", "/p/q", "/p/q/a.md", "/p/q/r/s/t", "/z")))
    args: dict[str, Any] = {"path": path}
    if draw(st.booleans()):
        args["n"] = draw(st.sampled_from((0, 2, "2")))
    roles = draw(
        st.one_of(
            st.sampled_from(([], ["r1"], ["r2", "r3"], "r1", None, ["r1", 2])),
            st.lists(st.sampled_from(FAMILY_ROLES), max_size=8),
        )
    )
    ctx: dict[str, Any] = {} if roles is None else {"roles": roles}
    return draw(st.sampled_from(("files.read", "files.write"))), args, ctx


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy_source(), st.lists(call(), min_size=1, max_size=20))
def test_rules_cited_in_bulk_change_no_decision(source: str, calls: list[Any]) -> None:
    bulk, rows = compile_both(source)
    assert decide_all(bulk, calls) == decide_all(rows, calls)
    # and no shortcut at all (role forms, the negated ones included): every rule as written
    assert decide_all(bulk, calls) == decide_all(stripped(bulk), calls)


def test_a_negated_role_test_is_the_role_form_of_the_other_kind() -> None:
    source = HEADER + "".join(
        f'forbid read on "/p/**" when "g{k}" not in context.roles\n' for k in range(4)
    )
    source += "".join(
        f'forbid read on "/p/**" when not ("h{k}" in context.roles)\n' for k in range(4)
    )
    source += 'permit read on "/p/**" unless "r1" not in context.roles\n'
    bulk, _ = compile_both(source)
    assert sure_groups(bulk) == 1  # the eight forbids are cited in bulk, like `unless`
    held = ["g0", "g1", "g2", "g3", "h0", "h1", "h2", "h3"]
    assert bulk.decide("files.read", {"path": "/p/x"}, {"roles": [*held, "r1"]}).allowed
    assert not bulk.decide("files.read", {"path": "/p/x"}, {"roles": held}).allowed
    d = bulk.decide("files.read", {"path": "/p/x"}, {"roles": ["g0", "h1", "r1"]})
    assert not d.allowed and [r.line for r in d.rule_ids] == [5, 6, 7, 8, 10, 11]
    for roles in ("g0", None, [1]):  # not a list of strings: every test errs, forbids apply
        d = bulk.decide("files.read", {"path": "/p/x"}, {"roles": roles})
        assert not d.allowed and len(d.rule_ids) == 8


def test_a_caller_holding_many_roles_reads_the_buckets_by_the_group_roles() -> None:
    # more roles held than the group has: the decision walks the group's roles instead
    source = HEADER + "".join(
        f'permit read on "/p/**" when "r{k}" in context.roles\n'
        f'forbid write on "/p/**" unless "r{k}" in context.roles\n'
        for k in range(1, 7)
    )
    bulk, rows = compile_both(source)
    assert sure_groups(bulk) == 2
    many = [f"x{k}" for k in range(20)]
    calls = [
        (tool, {"path": "/p/a"}, {"roles": roles})
        for tool in ("files.read", "files.write")
        for roles in (["r2", *many], ["r2", "r5", *many], many, ["r1"], [])
    ]
    assert decide_all(bulk, calls) == decide_all(rows, calls)
    d = bulk.decide("files.read", {"path": "/p/a"}, {"roles": ["r2", "r5", *many]})
    assert d.allowed and [r.line for r in d.rule_ids] == [4 + 2, 4 + 8]
    d = bulk.decide("files.write", {"path": "/p/a"}, {"roles": ["r2", "r5", *many]})
    assert not d.allowed and [r.line for r in d.rule_ids] == [5, 9, 11, 15]


def test_the_applying_unless_rules_kept_per_set_of_roles_held_stay_exact() -> None:
    # a deep path meets the same guard roles at every level: each group remembers the
    # unless-rules that apply for each set of them held (at most UNLESS_MEMO sets);
    # every set, first met or remembered, and past the bound, decides as row by row
    from itertools import combinations

    import pytest

    from sharedos.policy import evaluator

    source = HEADER + 'permit read on "/p/**"\n'
    for depth, prefix in enumerate(("/p/**", "/p/q/**", "/p/q/r/**")):
        source += "".join(
            f'forbid read on "{prefix}" unless "g{(k + depth) % 5}" in context.roles\n'
            for k in range(4)
        )
    subsets = [list(c) for n in range(6) for c in combinations([f"g{k}" for k in range(5)], n)]
    calls = [
        ("files.read", {"path": path}, {"roles": [*roles, "other"]})
        for path in ("/p/x", "/p/q/x", "/p/q/r/x")
        for roles in subsets + subsets[::-1]
    ]
    for memo in (evaluator.UNLESS_MEMO, 2):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(evaluator, "UNLESS_MEMO", memo)
            bulk, rows = compile_both(source)
            assert sure_groups(bulk) >= 3
            assert decide_all(bulk, calls) == decide_all(rows, calls)
