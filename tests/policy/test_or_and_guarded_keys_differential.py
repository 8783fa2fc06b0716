"""A seeded differential for the value keys of an ``or`` on several reads (``ANY_OF``)
and of a forbid's later term behind key terms (``GUARDED``).

Families of rules on one prefix, each rule the same shape with other literals:
``or`` of equality, membership, affix and bound tests on different reads (the
context's tenant, roles and attributes, the arguments, ``lower``/``path``/
``segment`` of them or of the resource), mixed with ``and``, ``not``, ``unless``,
nested ``or`` inside ``and``, role tests, and forbids whose earlier terms can err
for some calls and whose later term is a key. Calls carry values that make the
reads fail every way (missing, not an object on the way, roles not a list of
strings, NaN and infinities, booleans for numbers, non-strings for affixes).

Every decision (effect, reason, rules cited, detail) must be the one of the same
policy with value keys off, the same on a first, second and third sight of the
context (the caches), and its reason the one of ``benchmarks/engines/langref``.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from benchmarks.engines.langref import LangReference
from benchmarks.engines.sos_lang import policy_text
from benchmarks.workload_random import (
    DSTAR,
    RESOURCES,
    STAR,
    C,
    Expr,
    L,
    LangRule,
    R,
    RandomWorkload,
    lit_seg,
)
from tests.policy.shortcuts import compile_without, value_entries

STRING_READS = (
    R("context", "tenant"),
    R("context", "attributes", "dept"),
    R("args", "mode"),
    C("lower", R("args", "mode")),
    R("resource"),
    C("segment", R("resource"), L(1)),
    C("path", R("args", "mode")),
)
NUMBER_READS = (R("args", "n"), R("context", "attributes", "level"))
LIST_READS = (R("context", "attributes", "groups"), R("args", "mode"), R("context", "roles"))


def term(rng: random.Random, k: int) -> Expr:
    """One key test whose literal depends on ``k``."""
    c = rng.randrange(10)
    if c in (0, 3, 4, 5):
        ref = rng.choice(STRING_READS)
        if c == 0:
            return ("cmp", "==", ref, L(f"v{k}"))
        if c == 3:
            return ("cmp", "in", ref, ("list", (L(f"v{k}"), L(f"w{k}"))))
        return C("startswith" if c == 4 else "endswith", ref, L(f"v{k}" if c == 4 else f"{k}"))
    if c in (1, 6, 8):
        ref = rng.choice(NUMBER_READS)
        if c == 1:
            return ("cmp", "==", ref, L(k))
        if c == 8:
            return ("cmp", rng.choice(("<", ">")), ref, L(k + 0.5))
        op = rng.choice(("<", "<=", ">", ">="))
        return ("cmp", op, ref, L(k)) if rng.random() < 0.7 else ("cmp", op, L(k), ref)
    if c == 2:
        return ("cmp", "in", L(f"r{k}"), R("context", "roles"))
    if c == 9:
        return C("any_in", R("context", "attributes", "groups"), ("list", (L(f"g{k}"), L("g9"))))
    return ("cmp", "in", L(f"g{k}"), rng.choice(LIST_READS))


def build(seed: int, shape: list[tuple[str, bool]], k: int) -> Expr:
    """A condition of ``shape`` (per ``and`` term: its kind, and whether its literals
    are the same in every rule of the family), its varying literals from ``k``."""
    rng = random.Random(seed)
    parts: list[Expr] = []
    for kind, fixed in shape:
        kk = 0 if fixed else k
        if kind == "test":
            parts.append(term(rng, kk))
        elif kind == "or":
            n = rng.randrange(2, 4)
            parts.append(("or", *(term(rng, 0 if rng.random() < 0.3 else kk) for _ in range(n))))
        elif kind == "role":
            parts.append(("cmp", "in", L("staff" if fixed else f"r{k}"), R("context", "roles")))
        else:  # not a key: a negation, a non-key function, an 'or' nested in an 'and'
            parts.append(
                rng.choice(
                    (
                        ("not", term(rng, kk)),
                        C("contains", R("args", "mode"), L("v")),
                        ("cmp", "!=", R("args", "n"), L(1)),
                        ("and", term(rng, kk), ("or", term(rng, kk), term(rng, 0))),
                    )
                )
            )
    return parts[0] if len(parts) == 1 else ("and", *parts)


def rules(rng: random.Random) -> list[LangRule]:
    """Families of permits and forbids on ``/data``, in a shuffled order."""
    out: list[LangRule] = []
    for effect in ("permit", "forbid"):
        for _ in range(rng.randrange(0 if effect == "forbid" else 1, 3)):
            kinds = ("test", "test", "test", "or", "or", "role", "other")
            shape = [(rng.choice(kinds), rng.random() < 0.5) for _ in range(rng.randrange(1, 5))]
            pick = rng.random()
            if effect == "forbid" and pick < 0.3:  # an 'or' first: an ANY_OF key
                shape = [("or", False), *shape[:2]]
            elif effect == "forbid" and pick < 0.8:
                # key terms the same in every rule, then one that is not: a GUARDED key
                guards = [(rng.choice(("test", "test", "role")), rng.random() < 0.8)]
                guards *= rng.randrange(1, 4)
                shape = [*guards, (rng.choice(("test", "role")), False), *shape[:1]]
            seed = rng.randrange(10**9)
            kind = rng.choice(("when",) * 4 + ("when_unless", "unless"))
            for i in range(rng.randrange(6, 14)):
                k = rng.randrange(6)
                cond = build(seed if rng.random() < 0.9 else seed + i, shape, k)
                when, unless = {
                    "when": (cond, None),
                    "unless": (None, cond),
                    "when_unless": (cond, term(rng, k)),
                }[kind]
                pattern = (lit_seg("data"), DSTAR if rng.random() < 0.8 else STAR)
                rule_id = f"{effect[0]}{len(out)}"
                out.append(LangRule(rule_id, effect, ("read",), True, pattern, when, unless))
    if rng.random() < 0.5:
        out.append(LangRule("all", "permit", ("read",), True, (lit_seg("data"), DSTAR)))
    rng.shuffle(out)
    return out


VALUES: tuple[Any, ...] = (
    "v1",
    "v2",
    "w3",
    "V1",
    "v10",
    "xv1",
    "/data/v1",
    "1",
    1,
    2,
    3.0,
    2.5,
    0,
    -1,
    True,
    False,
    None,
    float("nan"),
    float("inf"),
    ["v1"],
    ["g1", "g2"],
    ["g1", 3],
    ["g9"],
    [],
    {"a": 1},
    "g2",
)
ROLES: tuple[Any, ...] = (
    [],
    ["r1"],
    ["r2", "r3"],
    "r1",
    ["r1", 2],
    None,
    ["staff"],
    ["staff", "r1"],
    ["staff", "r2", 5],
    "staff",
    ["r3", "staff", "r0"],
)


def call(rng: random.Random) -> tuple[str, Any, Any]:
    args: dict[str, Any] = {"path": rng.choice(("/data/x", "/data/v1/y", "/data/v2", "/data/v3"))}
    for name in ("mode", "n"):
        if rng.random() < 0.7:
            args[name] = rng.choice(VALUES)
    if rng.random() < 0.05:
        return "ws.read", args, rng.choice((None, [], "ctx"))
    ctx: dict[str, Any] = {}
    if rng.random() < 0.85:
        ctx["roles"] = rng.choice(ROLES)
    if rng.random() < 0.7:
        ctx["tenant"] = rng.choice(VALUES)
    if rng.random() < 0.7:
        ctx["attributes"] = rng.choice(
            (
                {},
                "x",
                {k: rng.choice(VALUES) for k in ("dept", "level", "groups")},
                {"groups": rng.choice(VALUES), "level": rng.choice(VALUES)},
            )
        )
    return "ws.read", args, ctx


def check(seed: int, n_calls: int) -> int:
    """Decide ``n_calls`` seeded calls on seed's policy every way; the number of groups
    the policy keys by an ``or`` on several reads or a guarded forbid term."""
    rng = random.Random(seed)
    lang = rules(rng)
    wl = RandomWorkload("x", "ws", {"ws.read": "read"}, {"ws.read": RESOURCES["ws.read"]},
                        ("read",), {}, lang)  # fmt: skip
    keyed, plain = compile_without(policy_text(wl), "BUCKET_MIN")
    ref = LangReference.from_workload(wl)
    for j in range(n_calls):
        tool, args, ctx = call(rng)
        got = keyed.decide(tool, args, ctx)
        where = f"seed {seed} call {j}: {args!r} {ctx!r}"
        assert got == plain.decide(tool, args, ctx), where
        key = f"k{j % 3}:{ctx!r}"
        for sight in range(3):
            assert keyed.decide(tool, args, ctx, context_key=key) == got, f"{where} sight {sight}"
        assert got.reason.value == ref.decide(tool, args, ctx), where
    return sum(1 for e in value_entries(keyed) if e[2] == -2)


def test_or_and_guarded_keys_change_no_decision() -> None:
    assert sum(check(seed, 20) for seed in range(24)) >= 8  # the keys are met


@pytest.mark.stress
def test_or_and_guarded_keys_change_no_decision_long() -> None:
    for seed in range(24, 3000):
        check(seed, 40)
