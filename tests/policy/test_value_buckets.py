"""Rules kept by the value they test (``prefilter.value_buckets``) change no decision.

A group of rules on one prefix that differ only by ``context.tenant == "t3"``
or ``args.mode in ["a", "b"]`` is read by the value the call holds, not rule
by rule. The decisions must be exactly those of the same policy with the
buckets turned off (every rule evaluated as written): effect, reason, the
rules cited and the detail, for values of every type, missing and unreadable
references (where a forbid's condition errs, so it applies), conjunctions,
``unless`` and rules in role buckets at the same time.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharedos.policy.policyset import PolicySet
from tests.budget import examples
from tests.policy.shortcuts import compile_without, decide_all, groups_using

HEADER = """namespace files
requirement files.read { action read; resource path(args.path) }
requirement files.write { action write; resource path(args.path) }
"""


def compile_both(source: str) -> tuple[PolicySet, PolicySet]:
    """The policy, and the same policy with the shortcut under test off."""
    return compile_without(source, "BUCKET_MIN")


def value_bucketed(policy: PolicySet) -> int:
    return groups_using(policy, 4)


TENANTS = (
    "\n".join(f'permit read on "/data/**" when context.tenant == "t{k}"' for k in range(12)) + "\n"
)


def test_a_family_by_tenant_is_read_by_the_tenant_held() -> None:
    keyed, plain = compile_both(HEADER + TENANTS)
    assert value_bucketed(keyed) == 1 and value_bucketed(plain) == 0
    d = keyed.decide("files.read", {"path": "/data/x"}, {"tenant": "t7"})
    assert d.allowed and [r.line for r in d.rule_ids] == [4 + 7]
    for tenant in ("t12", "T7", 7, None, ["t7"], {"t7": 1}, True):
        assert not keyed.decide("files.read", {"path": "/data/x"}, {"tenant": tenant}).allowed
    assert not keyed.decide("files.read", {"path": "/data/x"}, {}).allowed


def test_an_unreadable_value_makes_each_forbid_of_the_family_apply() -> None:
    # a forbid whose condition errs applies (fail closed), bucket or not
    source = HEADER + 'permit read on "/data/**"\n'
    source += "".join(
        f'forbid read on "/data/**" when context.attributes.dept == "d{k}"\n' for k in range(8)
    )
    keyed, plain = compile_both(source)
    assert value_bucketed(keyed) == 1
    for ctx in ({}, {"attributes": "not an object"}, {"attributes": {}}):
        d = keyed.decide("files.read", {"path": "/data/x"}, ctx)
        assert not d.allowed and len(d.rule_ids) == 8
        assert d == plain.decide("files.read", {"path": "/data/x"}, ctx)
    d = keyed.decide("files.read", {"path": "/data/x"}, {"attributes": {"dept": "d3"}})
    assert not d.allowed and [r.line for r in d.rule_ids] == [5 + 3]
    assert keyed.decide("files.read", {"path": "/data/x"}, {"attributes": {"dept": 3}}).allowed


# ------------------------------------------------------------------ property

REFS = ("context.tenant", "args.mode", "context.attributes.dept", "args.n")
LISTS = ("context.attributes.groups", "args.tags")
WORDS = ("a", "b", "c", "d", "e", "t1", "t2", "t3")
NUMBERS = ("1", "2", "2.0", "3.5", "-1")


@st.composite
def condition(draw: Any, main: str, role: str | None = None) -> str:
    """A rule's ``when``/``unless``: mostly a key term on ``main`` (so that groups reach
    the bucket size); with ``role``, often that role test too, before or after it (the
    rules then sit in one large role bucket, which value keys narrow)."""
    ref = draw(st.sampled_from((main,) * 12 + REFS + LISTS))
    word = draw(st.sampled_from(WORDS))
    lit = draw(st.sampled_from((f'"{word}"',) * 3 + NUMBERS + ("true",)))
    if ref in LISTS:
        other_word = draw(st.sampled_from(WORDS[:3]))
        key = draw(
            st.sampled_from(
                (f'"{word}" in {ref}',) * 5
                + (f"{lit} in {ref}", f'"{word}" not in {ref}')
                + (f'any_in({ref}, ["{word}", "{other_word}"])',) * 3
                + (
                    f'any_in(["{other_word}", "{word}", "{word}"], {ref})',
                    f'any_in({ref}, ["{word}"])',
                    f'any_in({ref}, ["{word}", {lit}])',  # a literal not a string: no key
                    f'all_in({ref}, ["{word}", "{other_word}"])',  # not a key
                    f'"{word}" in {ref} or "{other_word}" in {ref}',
                    f'"{word}" in {ref} or any_in({ref}, ["{other_word}", "{word}"])',
                    f'"{word}" in {ref} or args.n > 2',  # another read: not a key
                )
            )
        )
    else:
        key = draw(
            st.sampled_from(
                (
                    f"{ref} == {lit}",
                    f"{ref} == {lit}",
                    f'{ref} == "{word}"',
                    f"{lit} == {ref}",
                    f'{ref} in ["{word}", "{draw(st.sampled_from(WORDS))}"]',
                    f"{ref} in [{lit}, {draw(st.sampled_from(NUMBERS))}]",
                    f'{ref} in ["{word}", true]',  # a boolean: never a key
                    f"{ref} != {lit}",  # not a key
                    f'{ref} == "{word}" or {ref} == {lit}',
                    f'{ref} == "{word}" or {ref} in ["{draw(st.sampled_from(WORDS))}", "a"]',
                    f'{ref} == "{word}" or "{word}" in context.roles',  # two reads: no key
                )
            )
        )
    other = draw(
        st.sampled_from(
            (
                "",
                "",
                "",
                "args.n > 2",
                '"r1" in context.roles',
                "has args.n",
                'lower(args.mode) == "a"',
            )
        )
    )
    if role is not None and draw(st.integers(0, 9)) < 7:
        test = f'"{role}" in context.roles'
        key = f"{test} and {key}" if draw(st.booleans()) else f"{key} and {test}"
    if not other:
        return f"when {key}"
    form = draw(st.sampled_from(("and_first", "and_last", "unless", "when_unless")))
    if form == "and_first":
        return f"when {key} and {other}"
    if form == "and_last":
        return f"when {other} and {key}"
    if form == "unless":
        return f"unless {key}"
    return f"when {key} unless {other}"


@st.composite
def policy_source(draw: Any) -> str:
    """A family of rules on one prefix keyed (mostly) by one reference, in both
    effects, among other rules: the shape value buckets are for, and its edges."""
    lines = [HEADER.rstrip("\n")]
    main = draw(st.sampled_from(REFS + LISTS))
    role = draw(st.sampled_from((None, "r1")))
    for effect in ("permit", "forbid"):
        for _ in range(draw(st.integers(min_value=0 if effect == "forbid" else 6, max_value=14))):
            lines.append(f'{effect} read on "/data/**" {draw(condition(main, role))}')
    for _ in range(draw(st.integers(min_value=0, max_value=6))):
        effect = draw(st.sampled_from(("permit", "forbid")))
        actions = draw(st.sampled_from(("read", "write", "read, write", "*")))
        prefix = draw(st.sampled_from(("/data/**", "/data/x/**", "/data/*")))
        lines.append(f'{effect} {actions} on "{prefix}" {draw(condition(main))}')
    order = draw(st.permutations(lines[1:]))
    return "\n".join([lines[0], *order]) + "\n"


VALUES = st.one_of(
    st.sampled_from(WORDS),
    st.sampled_from(("A", "", "t3", "2")),
    st.integers(-1, 3),
    st.sampled_from((2.0, 3.5, -1.0, float("nan"), float("inf"))),
    st.booleans(),
    st.none(),
    st.lists(st.sampled_from(WORDS), max_size=3),
    # several words of one any_in rule held at once: the rule is cited once
    st.lists(st.sampled_from(WORDS[:3]), min_size=2, max_size=4),
    st.lists(st.one_of(st.sampled_from(WORDS), st.integers(0, 2), st.none()), max_size=3),
    st.dictionaries(st.sampled_from(WORDS), st.integers(0, 1), max_size=2),
)


@st.composite
def call(draw: Any) -> tuple[str, Any, Any]:
    args: dict[str, Any] = {"path": draw(st.sampled_from(("/data/x", "/data/x/y", "/data/z")))}
    for name in ("mode", "n", "tags"):
        if draw(st.booleans()):
            args[name] = draw(VALUES)
    roles = ([], ["r1"], ["r1"], ["r2", "r1"], "r1", None)
    ctx: dict[str, Any] = {"roles": draw(st.sampled_from(roles))}
    if draw(st.booleans()):
        ctx["tenant"] = draw(VALUES)
    attrs = draw(st.sampled_from(("absent", "value", "value", "not an object")))
    if attrs == "value":
        ctx["attributes"] = {
            name: draw(VALUES) for name in ("dept", "groups") if draw(st.booleans())
        }
    elif attrs == "not an object":
        ctx["attributes"] = draw(VALUES)
    return draw(st.sampled_from(("files.read", "files.write"))), args, ctx


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy_source(), st.lists(call(), min_size=1, max_size=20))
def test_value_buckets_change_no_decision(source: str, calls: list[Any]) -> None:
    keyed, plain = compile_both(source)
    assert decide_all(keyed, calls) == decide_all(plain, calls)


def test_the_property_meets_bucketed_groups() -> None:
    # the generator above does produce groups read by value (else it tests nothing)
    source = HEADER + "".join(
        f'permit read on "/data/**" when args.mode in ["a", "b{k}"] and args.n > 2\n'
        for k in range(6)
    )
    keyed, _ = compile_both(source)
    assert value_bucketed(keyed) == 1
    assert keyed.decide("files.read", {"path": "/data/x", "mode": "a", "n": 3}, {}).allowed
    d = keyed.decide("files.read", {"path": "/data/x", "mode": "b4", "n": 3}, {})
    assert d.allowed and [r.line for r in d.rule_ids] == [4 + 4]
    assert not keyed.decide("files.read", {"path": "/data/x", "mode": "b4", "n": 2}, {}).allowed


def test_value_keys_narrow_a_large_role_bucket() -> None:
    # every rule needs "staff": one role bucket of 8; the department narrows it to one
    source = HEADER + "".join(
        f'permit read on "/data/**" when "staff" in context.roles and '
        f'context.attributes.dept == "d{k}"\n'
        for k in range(8)
    )
    keyed, plain = compile_both(source)
    assert value_bucketed(keyed) == 1
    calls = [
        ("files.read", {"path": "/data/x"}, {"roles": roles, "attributes": attrs})
        for roles in (["staff"], [], ["other"], "staff", None)
        for attrs in ({"dept": "d3"}, {"dept": "d9"}, {}, "x", {"dept": 3})
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)
    d = keyed.decide("files.read", {"path": "/data/x"}, calls[0][2])
    assert d.allowed and [r.line for r in d.rule_ids] == [4 + 3]


def test_numbers_are_keys_and_what_they_cannot_decide_is_evaluated_as_written() -> None:
    from decimal import Decimal

    source = HEADER + 'permit read on "/data/**"\n'
    source += "".join(f'forbid read on "/data/**" when args.level == {k}\n' for k in range(8))
    keyed, plain = compile_both(source)
    assert value_bucketed(keyed) == 1

    def forbids(level: Any) -> list[int]:
        d = keyed.decide("files.read", {"path": "/data/x", "level": level}, {})
        assert d == plain.decide("files.read", {"path": "/data/x", "level": level}, {})
        return [r.line for r in d.rule_ids] if not d.allowed else []

    assert forbids(2) == forbids(2.0) == forbids(Decimal(2)) == [5 + 2]
    for level in (True, False, "2", None, [2], {"2": 2}, 2.5, -1):
        assert forbids(level) == []  # not equal to any: no forbid applies
    for level in (float("nan"), float("inf")):
        assert forbids(level) == list(range(5, 13))  # comparing errs: every forbid applies
    d = keyed.decide("files.read", {"path": "/data/x"}, {})  # missing: errs too
    assert not d.allowed and len(d.rule_ids) == 8


def test_membership_of_a_string_in_a_list_is_a_key() -> None:
    source = HEADER + "".join(
        f'permit read on "/data/**" when "g{k}" in context.attributes.groups\n' for k in range(8)
    )
    keyed, plain = compile_both(source)
    assert value_bucketed(keyed) == 1
    calls = [
        ("files.read", {"path": "/data/x"}, {"attributes": {"groups": groups}})
        for groups in (["g1", "g3", "g1"], [], ["g9"], ("g2",), "g1", ["g1", 1, None], None, {})
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)
    d = keyed.decide(*calls[0])
    assert d.allowed and [r.line for r in d.rule_ids] == [4 + 1, 4 + 3]


# ----------------------------------------- keys read through a function, affixes, order

AFFIXES = ("t", "t1", "a", "", "/data/", "/data/t1", "x")
BOUNDS = ("0", "1", "2", "2.0", "3.5", "-1", "9223372036854775807", "1e300")


@st.composite
def keyed_term(draw: Any, form: str, ref: str) -> str:
    """One key term of ``form`` on ``ref`` (or, now and then, one that is not a key)."""
    word = draw(st.sampled_from((*WORDS, "ss")))  # each its own lower form
    affix = draw(st.sampled_from(AFFIXES))
    bound = draw(st.sampled_from(BOUNDS))
    op = draw(st.sampled_from(("<", "<=", ">", ">=")))
    terms = {
        "lower": (
            f'lower({ref}) == "{word.lower()}"',
            f'"{word.lower()}" == lower({ref})',
            f'lower({ref}) in ["{word.lower()}", "b"]',
        ),
        "path": (f'path({ref}) == "/data/{word}"', f'startswith(path({ref}), "{affix}")'),
        "segment": (
            f'segment(path({ref}), 1) == "{word}"',
            f'segment({ref}, -1) == "{word}"',
            f'lower(segment(path({ref}), 2)) in ["{word}", "t1"]',
        ),
        "startswith": (f'startswith({ref}, "{affix}")',),
        "endswith": (f'endswith({ref}, "{affix}")',),
        "order": (f"{ref} {op} {bound}", f"{bound} {op} {ref}"),
    }[form]
    others = (f'contains({ref}, "t")', f'startswith("{affix}", {ref})')
    if ref != "resource":
        others += (f"{ref} != {bound}",)
    return draw(st.sampled_from(terms * 6 + others))


@st.composite
def keyed_policy(draw: Any) -> str:
    """A family on one prefix keyed by one read of ``form``, in both effects, with
    conjunctions, ``unless`` and role buckets, among other rules."""
    form = draw(st.sampled_from(("lower", "path", "segment", "startswith", "endswith", "order")))
    ref = draw(st.sampled_from(("args.mode", "context.tenant", "context.attributes.dept")))
    if form in ("path", "segment", "startswith", "endswith") and draw(st.booleans()):
        ref = "resource"
    if form == "order":
        ref = draw(st.sampled_from(("args.n", "context.attributes.dept")))
    role = draw(st.sampled_from((None, "r1")))
    lines = [HEADER.rstrip("\n")]
    for effect in ("permit", "forbid"):
        for _ in range(draw(st.integers(min_value=0 if effect == "forbid" else 6, max_value=14))):
            key = draw(keyed_term(form, ref))
            if role is not None and draw(st.integers(0, 9)) < 5:
                key = f'"{role}" in context.roles and {key}'
            shape = draw(st.sampled_from(("when", "when", "when", "and", "unless", "when_unless")))
            cond = {
                "when": f"when {key}",
                "and": f"when {key} and args.n != 1",
                "unless": f"unless {key}",
                "when_unless": f'when {key} unless "r2" in context.roles',
            }[shape]
            prefix = draw(st.sampled_from(("/data/**",) * 4 + ("/data/x/**", "/data/*")))
            lines.append(f'{effect} read on "{prefix}" {cond}')
    order = draw(st.permutations(lines[1:]))
    return "\n".join([lines[0], *order]) + "\n"


READ_VALUES = st.one_of(
    VALUES,
    st.sampled_from(
        (
            "t12",
            "at1",
            "T1",
            "Ａ",
            "ß",
            "SS",
            "/data/t1",
            "/data/t1/../a",
            "/data/./b",
            "relative/t1",
            "/data//t1",
            "/data/a/t1",
            "/data/SS/b",
            "x" * 50,
        )
    ),
    st.integers(-3, 4),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from((10**21, 10**21 + 1, -(10**30))),
)


@st.composite
def read_call(draw: Any) -> tuple[str, Any, Any]:
    paths = ("/data/x", "/data/x/y", "/data/z", "/data/t1/a", "/data/b/t1", "/data/./ss/t")
    args: dict[str, Any] = {"path": draw(st.sampled_from(paths))}
    for name in ("mode", "n"):
        if draw(st.booleans()):
            args[name] = draw(READ_VALUES)
    ctx: dict[str, Any] = {"roles": draw(st.sampled_from(([], ["r1"], ["r2", "r1"], None)))}
    if draw(st.booleans()):
        ctx["tenant"] = draw(READ_VALUES)
    if draw(st.booleans()):
        ctx["attributes"] = draw(
            st.one_of(st.fixed_dictionaries({"dept": READ_VALUES}), READ_VALUES)
        )
    return draw(st.sampled_from(("files.read", "files.write"))), args, ctx


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keyed_policy(), st.lists(read_call(), min_size=1, max_size=20))
def test_function_affix_and_order_keys_change_no_decision(source: str, calls: list[Any]) -> None:
    keyed, plain = compile_both(source)
    assert decide_all(keyed, calls) == decide_all(plain, calls)


def test_an_order_family_keeps_a_slice_of_its_bounds() -> None:
    source = HEADER + "".join(
        f'permit read on "/data/**" when args.size <= {k}\n' for k in range(10)
    )
    source += "".join(f'forbid read on "/data/**" when {k} < args.size\n' for k in range(20, 28))
    keyed, plain = compile_both(source)
    assert value_bucketed(keyed) == 2  # one group of permits, one of forbids

    def cited(size: Any) -> list[int]:
        d = keyed.decide("files.read", {"path": "/data/x", "size": size}, {})
        assert d == plain.decide("files.read", {"path": "/data/x", "size": size}, {})
        return [r.line for r in d.rule_ids]

    assert cited(7) == [4 + 7, 4 + 8, 4 + 9]
    assert cited(6.5) == [4 + 7, 4 + 8, 4 + 9]
    assert cited(-5) == list(range(4, 14))
    assert cited(10) == []  # no permit: denied, nothing cited
    assert cited(23) == [14, 15, 16]  # the forbids with k < 23
    for size in (True, "7", None, [7], float("nan"), float("inf")):
        d = keyed.decide("files.read", {"path": "/data/x", "size": size}, {})
        assert not d.allowed  # errs: no permit applies, every forbid does
        assert d == plain.decide("files.read", {"path": "/data/x", "size": size}, {})


def test_lower_and_affix_families_are_read_by_the_value_held() -> None:
    source = HEADER + "".join(
        f'permit read on "/data/**" when lower(args.mode) == "m{k}"\n' for k in range(8)
    )
    source += "".join(
        f'permit write on "/data/**" when startswith(path(args.path), "/data/t{k}")\n'
        for k in range(8)
    )
    source += "".join(
        f'permit read on "/other/**" when endswith(context.tenant, "-{k}")\n' for k in range(8)
    )
    keyed, plain = compile_both(source)
    assert value_bucketed(keyed) == 3 and value_bucketed(plain) == 0
    d = keyed.decide("files.read", {"path": "/data/x", "mode": "Ｍ3"}, {})
    assert d.allowed and [r.line for r in d.rule_ids] == [4 + 3]
    d = keyed.decide("files.write", {"path": "/data/t1/../t12/x"}, {})
    assert d.allowed and [r.line for r in d.rule_ids] == [12 + 1]
    d = keyed.decide("files.read", {"path": "/other/x"}, {"tenant": "acme-7"})
    assert d.allowed and [r.line for r in d.rule_ids] == [20 + 7]
    calls = [
        (tool, {"path": path, "mode": mode}, {"tenant": tenant})
        for tool in ("files.read", "files.write")
        for path in ("/data/t3", "/data/t30", "/data/x", "/data/t1/../t2", "/other/x")
        for mode in ("M1", "m1", 1, None, "m10")
        for tenant in ("x-1", "-1", "x-11", 1)
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)


def test_the_key_that_narrows_most_is_chosen_whatever_the_order_it_is_met_in() -> None:
    from sharedos.policy.prefilter import EQUALS, HOLDS, value_buckets

    roles = ((HOLDS, "context", ("roles",), None), ("staff",))
    dept = [((EQUALS, "context", ("attributes", "dept"), None), (f"d{k}",)) for k in range(8)]
    for keys in (
        {i: [roles, dept[i]] for i in range(8)},
        {i: [dept[i], roles] for i in range(8)},
    ):
        chosen = value_buckets(list(range(8)), keys)
        assert chosen is not None
        read, by_value, taken = chosen
        assert read[2] == ("attributes", "dept") and len(by_value) == 8 and taken == set(range(8))


def test_a_role_and_value_family_is_keyed_by_the_value_under_every_hash_seed() -> None:
    # the choice once followed a set's iteration order, so the string hash seed decided
    # whether 10,000 such rules were read by department (4 µs) or one by one (250 µs)
    import os
    import subprocess
    import sys

    script = (
        "from sharedos.policy import compile_source\n"
        "from tests.policy.shortcuts import value_entries\n"
        f"src = {HEADER!r} + ''.join(\n"
        '    f\'permit read on "/data/**" when "staff" in context.roles and \'\n'
        "    f'context.attributes.dept == \"d{k}\"\\n' for k in range(12))\n"
        "p = compile_source(src, 'p.sos')\n"
        "print(max((len(entry[1]) for entry in value_entries(p)), default=0))\n"
    )
    for seed in ("0", "1", "2", "3"):
        out = subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == "12", (seed, out.stdout, out.stderr)


ANY_REFS = ("args.tags", "context.attributes.groups", "context.roles")


@st.composite
def any_in_family(draw: Any) -> tuple[str, str]:
    """A family of ``any_in`` rules on one list reference, in both effects and orders,
    with literals that overlap from rule to rule: ``(source, the reference)``."""
    ref = draw(st.sampled_from(ANY_REFS))
    lines = [HEADER.rstrip("\n")]
    for effect, low, high in (("permit", 6, 12), ("forbid", 0, 8)):
        for _ in range(draw(st.integers(low, high))):
            words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
            listed = "[" + ", ".join(f'"{w}"' for w in words) + "]"
            term = draw(
                st.sampled_from(
                    (
                        f"any_in({ref}, {listed})",
                        f"any_in({listed}, {ref})",
                        "(" + " or ".join(f'"{w}" in {ref}' for w in words) + ")",
                        f'(any_in({ref}, {listed}) or "e" in {ref})',
                    )
                )
            )
            extra = draw(
                st.sampled_from(("", "", " and args.n > 1", ' unless "r9" in context.roles'))
            )
            lines.append(f'{effect} read on "/data/**" when {term}{extra}')
    return "\n".join(lines) + "\n", ref


HELD = st.one_of(
    st.lists(st.sampled_from(WORDS), max_size=4),
    st.lists(st.sampled_from(WORDS), max_size=4).map(tuple),
    st.sampled_from(("a", None, 3, {"a": 1})),
    st.lists(st.one_of(st.sampled_from(WORDS), st.integers(0, 2), st.none()), max_size=3),
)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    any_in_family(),
    st.lists(st.tuples(HELD, st.sampled_from((None, 0, 2))), min_size=1, max_size=12),
)
def test_any_in_keys_change_no_decision(family: tuple[str, str], held: list[Any]) -> None:
    source, ref = family
    keyed, plain = compile_both(source)
    calls = []
    for value, n in held:
        args: dict[str, Any] = {"path": "/data/x"}
        ctx: dict[str, Any] = {"roles": ["r1"]}
        if n is not None:
            args["n"] = n
        if ref == "args.tags":
            args["tags"] = value
        elif ref == "context.roles":
            ctx["roles"] = value
        else:
            ctx["attributes"] = {"groups": value}
        calls.append(("files.read", args, ctx))
    assert decide_all(keyed, calls) == decide_all(plain, calls)


def test_any_of_several_strings_held_is_a_key_and_cites_each_rule_once() -> None:
    source = HEADER + "".join(
        f'permit read on "/data/**" when any_in(context.roles, ["g{k}", "g{k + 1}", "all"])\n'
        for k in range(8)
    )
    source += "".join(
        f'forbid read on "/data/**" when any_in(["banned{j}", "g20"], context.roles)\n'
        for j in range(6)
    )
    keyed, plain = compile_both(source)
    assert value_bucketed(keyed) == 2
    calls = [
        ("files.read", {"path": "/data/x"}, {"roles": roles})
        for roles in (
            ["g3", "g4"],
            ["g3", "g4", "g3", "all"],
            ["all"],
            [],
            ["g9"],
            ("g2",),
            "g1",
            ["g1", 1, None],
            None,
            ["g20", "g1"],
        )
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)
    d = keyed.decide(*calls[0])  # g3 and g4 both name rule 4 (k=3): cited once
    assert d.allowed and [r.line for r in d.rule_ids] == [4 + 2, 4 + 3, 4 + 4]
    assert [r.line for r in keyed.decide(*calls[2]).rule_ids] == list(range(4, 12))
    assert not keyed.decide(*calls[-1]).allowed


def test_an_or_of_tests_on_one_read_is_one_key() -> None:
    source = HEADER + "".join(
        f'permit read on "/data/**" when "g{k}" in context.roles or "g{k + 1}" in context.roles\n'
        for k in range(8)
    )
    source += "".join(
        f'forbid read on "/data/**" when context.tenant == "x{k}" or context.tenant == "y"\n'
        for k in range(6)
    )
    keyed, plain = compile_both(source)
    assert value_bucketed(keyed) == 2
    calls = [
        ("files.read", {"path": "/data/x"}, {"roles": roles, "tenant": tenant})
        for roles in (["g3", "g4"], ["g0"], [], "g1", ["g1", 2], None)
        for tenant in ("x2", "y", "z", 3, None, ["y"])
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)
    d = keyed.decide("files.read", {"path": "/data/x"}, {"roles": ["g3", "g4"], "tenant": "z"})
    assert d.allowed and [r.line for r in d.rule_ids] == [4 + 2, 4 + 3, 4 + 4]
    d = keyed.decide("files.read", {"path": "/data/x"}, {"roles": ["g3"], "tenant": "y"})
    assert not d.allowed and len(d.rule_ids) == 6


def test_an_or_across_two_reads_is_keyed_by_both() -> None:
    # "staff" or a tenant of its own: the rule applies to staff whatever the tenant (a
    # key on the tenant alone would lose it; the key reads both)
    source = HEADER + "".join(
        f'permit read on "/data/**" when "staff" in context.roles or context.tenant == "t{k}"\n'
        for k in range(8)
    )
    keyed, plain = compile_both(source)
    assert value_bucketed(keyed) == 1
    calls = [
        ("files.read", {"path": "/data/x"}, {"roles": roles, "tenant": tenant})
        for roles in (["staff"], [], "staff")
        for tenant in ("t2", "zz", None)
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)
    d = keyed.decide("files.read", {"path": "/data/x"}, {"roles": ["staff"], "tenant": "zz"})
    assert d.allowed and len(d.rule_ids) == 8


def _cpu_per_call(policy: PolicySet, calls: list[tuple[str, Any, Any, str]]) -> float:
    """Best-of-five CPU seconds per keyed decision of ``calls`` (warm: each decided once)."""
    import time

    for tool, args, ctx, key in calls:
        policy.decide(tool, args, ctx, context_key=key)
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(4):
            for tool, args, ctx, key in calls:
                policy.decide(tool, args, ctx, context_key=key)
        best = min(best, (time.process_time() - t0) / (4 * len(calls)))
    return best


def test_a_caller_holding_thousands_of_roles_pays_for_the_groups_values_not_its_roles() -> None:
    # families keyed by any_in(context.roles, [...]) and by "gK" in context.attributes.groups
    # on every level of a deep path: each group read the caller's whole list (a type check
    # of every element, a set of it) for every decision, so 20,000 roles held cost ~300x
    # what 3 do (5 ms a decision); the strings are read once per list, kept with the
    # context, and a group looks up the smaller of its values and the caller's
    source = HEADER
    for depth in range(1, 9):
        prefix = "/d/" + "/".join(f"s{j}" for j in range(depth)) + "/**"
        source += "".join(
            f'permit read on "{prefix}" when any_in(context.roles, ["r{depth}{k}", "x{k}"])\n'
            for k in range(6)
        )
        source += "".join(
            f'forbid read on "{prefix}" when "g{depth}{k}" in context.attributes.groups\n'
            for k in range(6)
        )
    keyed, plain = compile_both(source)
    assert value_bucketed(keyed) == 16 and value_bucketed(plain) == 0
    path = "/d/" + "/".join(f"s{j}" for j in range(8)) + "/f"
    many = [f"m{j}" for j in range(20_000)]
    few_ctx = {"roles": ["r30", "x9"], "attributes": {"groups": ["g99"]}}
    many_ctx = {"roles": [*many, "r30", "x9"], "attributes": {"groups": [*many, "g99"]}}
    calls = [
        ("files.read", {"path": path}, ctx)
        for ctx in (
            few_ctx,
            many_ctx,
            {"roles": [*many, "r55"], "attributes": {"groups": [*many, "g72"]}},
            {"roles": [*many, 5], "attributes": {"groups": many}},
            {"roles": many, "attributes": {"groups": (*many, None)}},
        )
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)
    few = _cpu_per_call(keyed, [("files.read", {"path": path}, few_ctx, "few")])
    lots = _cpu_per_call(keyed, [("files.read", {"path": path}, many_ctx, "many")])
    assert lots < 10 * few, (lots, few)  # before: ~300x


def _calls_made(policy: PolicySet, tool: str, args: Any, ctx: Any) -> int:
    """How many Python functions one decision calls (work, counted, not timed)."""
    import sys

    count = 0

    def tick(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(tick)
    try:
        policy.decide(tool, args, ctx)
    finally:
        sys.setprofile(None)
    return count


def test_an_or_over_several_reads_is_read_by_the_values_held() -> None:
    # `when context.tenant == "tK" or "rK" in context.roles` on one prefix: every rule
    # was evaluated as written (one condition per rule per decision, 190x the indexed
    # reference at 10,000 rules); now by the tenant and the roles held
    rules = "".join(
        f'permit read on "/data/**" when context.tenant == "t{k}" or "r{k}" in context.roles\n'
        for k in range(300)
    )
    keyed, plain = compile_both(HEADER + rules)
    assert value_bucketed(keyed) == 1
    ctx = {"tenant": "t7", "roles": ["r3", "r7", "x"]}
    d = keyed.decide("files.read", {"path": "/data/x"}, ctx)
    assert d.allowed and [r.line for r in d.rule_ids] == [4 + 3, 4 + 7]
    assert d == plain.decide("files.read", {"path": "/data/x"}, ctx)
    # the work of one decision does not grow with the rules the caller cannot meet
    assert _calls_made(keyed, "files.read", {"path": "/data/y"}, ctx) < 60
    assert _calls_made(plain, "files.read", {"path": "/data/y"}, ctx) > 300
    calls = [
        ("files.read", {"path": "/data/x"}, {"tenant": tenant, "roles": roles})
        for tenant in ("t5", "t300", 5, 5.0, float("nan"), None, ["t5"], True)
        for roles in (["r5"], ["r9", "r5", "r1"], [], "r5", ["r5", 1], None)
    ] + [("files.read", {"path": "/data/x"}, {}), ("files.read", {"path": "/data/x"}, None)]
    assert decide_all(keyed, calls) == decide_all(plain, calls)


def test_an_or_over_several_reads_in_forbids_fails_closed_as_written() -> None:
    # a forbid's first term; an unreadable read (no tenant, roles not a list of strings)
    # makes every rule be tested as written, so a forbid whose condition errs applies
    source = HEADER + 'permit read on "/data/**"\n'
    source += "".join(
        f'forbid read on "/data/**" when (args.n == {k} or "r{k}" in context.roles) '
        f"and args.n > 2\n"
        for k in range(8)
    )
    source += "".join(
        f'permit read on "/data/**" when "g{k}" in context.attributes.groups or '
        f'lower(args.mode) == "m{k}" or context.tenant in ["t{k}", "u{k}"]\n'
        for k in range(8)
    )
    keyed, plain = compile_both(source)
    assert value_bucketed(keyed) == 2
    calls = [
        ("files.read", {"path": "/data/x", **args}, ctx)
        for args in ({"n": 3}, {"n": 3.0, "mode": "M3"}, {"n": float("inf")}, {"n": "3"}, {})
        for ctx in (
            {"roles": ["r1"], "tenant": "u2", "attributes": {"groups": ["g4"]}},
            {"roles": ["r3", "r4"]},
            {"roles": "r3", "tenant": 1},
            {"roles": [], "attributes": {"groups": ["g1", 2]}},
            {"roles": [], "attributes": "x"},
            {},
        )
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)


def test_an_or_of_bounds_affixes_and_roles_is_read_by_the_values_held() -> None:
    # `clearance >= N or "rK" in roles`, `startswith(args.mode, "qK") or ...`: each term
    # its own read (two bounds or two prefixes of one rule on one read: each rule once)
    source = HEADER + "".join(
        f'permit read on "/data/**" when context.attributes.clearance >= {k + 3} or '
        f'"r{k}" in context.roles or context.attributes.clearance < {-k}\n'
        for k in range(8)
    )
    source += "".join(
        f'forbid read on "/data/**" when startswith(args.mode, "q{k}") or '
        f'startswith(args.mode, "q{k}x") or endswith(args.mode, "{k}z") or args.n > {k}\n'
        for k in range(8)
    )
    keyed, plain = compile_both(source)
    assert value_bucketed(keyed) == 2
    d = keyed.decide(
        "files.read", {"path": "/data/x", "mode": "q3x", "n": 0}, {"roles": [], "attributes": {}}
    )
    assert not d.allowed and [r.line for r in d.rule_ids] == [12 + 3]
    calls = [
        ("files.read", {"path": "/data/x", **args}, ctx)
        for args in (
            {"n": -1},
            {"n": 3, "mode": "q1"},
            {"n": -5, "mode": "q2x5z"},
            {"n": -5, "mode": "q7xz"},
            {"n": -5, "mode": 7},
            {"n": float("nan")},
            {"n": True},
            {},
        )
        for ctx in (
            {"roles": ["r1"], "attributes": {"clearance": 5}},
            {"roles": ["r3", "r4"], "attributes": {"clearance": -4.5}},
            {"roles": [], "attributes": {"clearance": 2}},
            {"roles": [], "attributes": {"clearance": "5"}},
            {"roles": "r3", "attributes": {"clearance": 9}},
            {"roles": ["r1"]},
        )
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)


def test_a_forbid_keyed_behind_key_terms_only_when_they_cannot_err() -> None:
    # `forbid ... when args.n > 2 and "rK" in context.roles`: the role is the forbid's
    # key when `args.n` is a finite number (the first term then cannot err, so the
    # `and` reaches the role test or stops, false); any other n tests every forbid as
    # written (it errs: each forbid applies)
    source = HEADER + 'permit read on "/data/**"\n'
    source += "".join(
        f'forbid read on "/data/**" when args.n > {k % 3} and lower(args.mode) == "m" '
        f'and "r{k}" in context.roles\n'
        for k in range(300)
    )
    keyed, plain = compile_both(source)
    assert value_bucketed(keyed) == 1
    ctx = {"roles": ["r4", "r5", "x"]}
    d = keyed.decide("files.read", {"path": "/data/x", "n": 1.5, "mode": "M"}, ctx)
    assert not d.allowed and [r.line for r in d.rule_ids] == [5 + 4]
    assert _calls_made(keyed, "files.read", {"path": "/data/y", "n": 3, "mode": "M"}, ctx) < 60
    assert _calls_made(plain, "files.read", {"path": "/data/y", "n": 3, "mode": "M"}, ctx) > 300
    calls = [
        ("files.read", {"path": "/data/x", **args}, {"roles": roles})
        for args in (
            {"n": 3, "mode": "m"},
            {"n": 1, "mode": "M"},
            {"n": 3, "mode": 5},
            {"n": 3},
            {"n": float("nan"), "mode": "m"},
            {"n": "3", "mode": "m"},
            {"n": True, "mode": "m"},
            {"mode": "m"},
        )
        for roles in (["r5"], ["r1", "r2"], [], "r5", ["r5", 1], None)
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)
