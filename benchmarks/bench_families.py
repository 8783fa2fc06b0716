"""Rule families: many rules on a few prefixes that differ only by one condition shape.

An independent workload can put hundreds of rules on one directory prefix
that differ only by a tenant, an argument, a role or a threshold. For each
shape below this script writes N rules (default 10,000) on 20 prefixes, each
guarded by the shape with a value drawn from 500, decides 1,000 requests
with SharedOS and with ``engines/langref.py`` (the indexed reference for the
whole language, which answers allow/deny and stops at the first permit that
applies), checks that both give the same answer on every request, and prints
p50 of a warm pass and the p99 of the first pass (each request's first
decision after the load) for both, and SharedOS p50 ÷ the reference's.

SharedOS must cite *every* rule that applied (``docs/policy-language.md``,
"Decisions"); a verdict-only engine does not. Shapes under which hundreds
of rules apply to one call (``args.size <= K`` with K all over the range)
therefore cost SharedOS work in proportion to the rules it cites.

Usage: ``python benchmarks/bench_families.py [--rules 10000] [--json out.json]``
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.engines.langref import LangReference  # noqa: E402
from benchmarks.engines.sos_lang import policy_text  # noqa: E402
from benchmarks.workload import Request  # noqa: E402
from benchmarks.workload_random import (  # noqa: E402
    ACTIONS,
    DSTAR,
    NAMED,
    NAMESPACE,
    RESOURCES,
    STAR,
    TOOLS,
    C,
    Expr,
    L,
    LangRule,
    R,
    RandomWorkload,
    glob,
    lit_seg,
    role,
)
from sharedos.policy import compile_source  # noqa: E402

N_VALUES = 500
N_PREFIXES = 20


def _v(k: int) -> str:
    return f"v{k}"


#: shape name -> (what it is, the condition of the rule with value k)
SHAPES: dict[str, tuple[str, Callable[[int], Expr]]] = {
    "tenant": ('context.tenant == "vK"', lambda k: ("cmp", "==", R("context", "tenant"), L(_v(k)))),
    "arg-in": (
        'args.mode in ["vK", "vK+1"]',
        lambda k: ("cmp", "in", R("args", "mode"), ("list", (L(_v(k)), L(_v(k + 1))))),
    ),
    "arg-number": ("args.n == K", lambda k: ("cmp", "==", R("args", "n"), L(k))),
    "role": ('"vK" in context.roles', lambda k: role(_v(k))),
    "role-and-dept": (
        '"staff" in context.roles and context.attributes.dept == "vK"',
        lambda k: (
            "and",
            role("staff"),
            ("cmp", "==", R("context", "attributes", "dept"), L(_v(k))),
        ),
    ),
    "any-role": (
        'any_in(context.roles, ["vK", "vK+1"])',
        lambda k: C("any_in", R("context", "roles"), ("list", (L(_v(k)), L(_v(k + 1))))),
    ),
    "role-or": (
        '"vK" in context.roles or "vK+1" in context.roles',
        lambda k: ("or", role(_v(k)), role(_v(k + 1))),
    ),
    "group-held": (
        '"vK" in context.attributes.groups',
        lambda k: ("cmp", "in", L(_v(k)), R("context", "attributes", "groups")),
    ),
    "lower": (
        'lower(args.mode) == "vK"',
        lambda k: ("cmp", "==", C("lower", R("args", "mode")), L(_v(k))),
    ),
    "startswith": (
        'startswith(args.mode, "vK")',
        lambda k: C("startswith", R("args", "mode"), L(_v(k))),
    ),
    "threshold": ("args.size <= K", lambda k: ("cmp", "<=", R("args", "size"), L(k))),
    # not condition shapes: what a pattern fixes past a wildcard (``pattern_workload``),
    # rules on every level of a deep tree (``deep_workload``)
    "wildcard": ('pattern "/data/pJ/*/vK/**", no condition', lambda k: L(True)),
    "extension": ('pattern "/data/pJ/*.vK", no condition', lambda k: L(True)),
    "from-end": ('pattern "/data/pJ/**/vK", no condition', lambda k: L(True)),
    "anywhere": ('pattern "/data/pJ/**/vK/**", no condition', lambda k: L(True)),
    "glob-head": ('pattern "/data/pJ/*/vK*/**", no condition', lambda k: L(True)),
    "deep-extension": ('pattern "/data/pJ/**/*.vK", no condition', lambda k: L(True)),
    "deep-forbids": (
        'forbids unless "gK" in context.roles, permits when "rK", 6 deep',
        lambda k: role(_v(k)),
    ),
}


def _permits(
    n_rules: int,
    family: str,
    pattern: Callable[[int], tuple[Any, ...]],
    condition: Callable[[int], Expr | None],
) -> RandomWorkload:
    """A workload of ``n_rules`` read permits (rule i: ``pattern(i)``, ``condition(i)``),
    no requests yet."""
    rules = [
        LangRule(f"r{i}", "permit", ("read",), True, pattern(i), condition(i), family=family)
        for i in range(n_rules)
    ]
    return RandomWorkload(
        "families", NAMESPACE, dict(TOOLS), dict(RESOURCES), ACTIONS, dict(NAMED), rules
    )


def workload(shape: str, n_rules: int, seed: int = 3) -> RandomWorkload:
    """``n_rules`` permits of one shape on ``N_PREFIXES`` prefixes, and 1,000 requests."""
    rng = random.Random(f"families:{shape}:{n_rules}:{seed}")
    cond = SHAPES[shape][1]
    wl = _permits(
        n_rules,
        shape,
        lambda i: (lit_seg("data"), lit_seg(f"p{i % N_PREFIXES}"), DSTAR),
        lambda i: cond(rng.randrange(N_VALUES)),
    )
    for j in range(1000):
        k = rng.randrange(N_VALUES)
        ctx = {
            "principal": f"u{j}",
            "tenant": _v(k),
            "roles": [_v(k), "staff"] if j % 2 else [_v(k)],
            "attributes": {"dept": _v(k), "groups": [_v(k), _v(k + 3)]},
        }
        args = {
            "path": f"/data/p{rng.randrange(N_PREFIXES)}/x/y.txt",
            "mode": _v(rng.randrange(N_VALUES)),
            "size": rng.randrange(N_VALUES),
            "n": rng.randrange(N_VALUES),
        }
        wl.requests.append(Request("ws.read", args, ctx, f"key{j}", shape))
    return wl


#: per pattern shape: rule i's segments after ``/data/pJ`` for value K, and a request's
#: path after ``/data/pJ`` for value K and caller j
PATTERN_SHAPES: dict[str, tuple[Callable[[str], tuple[Any, ...]], Callable[[str, int], str]]] = {
    "wildcard": (lambda v: (STAR, lit_seg(v), DSTAR), lambda v, j: f"u{j % 50}/{v}/x.txt"),
    "extension": (lambda v: (glob(None, "." + v),), lambda v, j: f"f{j % 50}.{v}"),
    "from-end": (lambda v: (DSTAR, lit_seg(v)), lambda v, j: f"u{j % 50}/a/{v}"),
    "anywhere": (lambda v: (DSTAR, lit_seg(v), DSTAR), lambda v, j: f"u{j % 50}/{v}/a/b.txt"),
    "glob-head": (lambda v: (STAR, glob(v, None), DSTAR), lambda v, j: f"u{j % 50}/{v}-{j % 3}/a"),
    "deep-extension": (lambda v: (DSTAR, glob(None, "." + v)), lambda v, j: f"u{j % 50}/a/f.{v}"),
}


def pattern_workload(shape: str, n_rules: int, seed: int = 3) -> RandomWorkload:
    """``n_rules`` permits ``/data/pJ/<shape's segments for vK>`` (no condition) on
    ``N_PREFIXES`` prefixes: the index reaches ``/data/pJ`` and a wildcard hides the
    ``vK`` that tells them apart; requests with values drawn from a wider range."""
    rng = random.Random(f"families:{shape}:{n_rules}:{seed}")
    rest, request = PATTERN_SHAPES[shape]
    wl = _permits(
        n_rules,
        shape,
        lambda i: (
            lit_seg("data"),
            lit_seg(f"p{i % N_PREFIXES}"),
            *rest(_v(rng.randrange(N_VALUES))),
        ),
        lambda i: None,
    )
    for j in range(1000):
        path = f"/data/p{rng.randrange(N_PREFIXES)}/" + request(
            _v(rng.randrange(N_VALUES + 100)), j
        )
        ctx = {"principal": f"u{j}", "roles": []}
        wl.requests.append(Request("ws.read", {"path": path}, ctx, f"key{j}", shape))
    return wl


def deep_workload(n_rules: int, seed: int = 7) -> RandomWorkload:
    """Rules on every level of a tree six deep (fan-out 3): one in ten a forbid ``unless
    "gK" in context.roles`` (five guard roles), the rest permits needing one of 200
    roles; requests on leaves six deep, each meeting dozens of forbids on its way
    (the shape of issue 27's harness)."""
    rng = random.Random(f"families:deep:{n_rules}:{seed}")
    rules = []
    for i in range(n_rules):
        prefix = tuple(lit_seg(f"d{rng.randrange(3)}") for _ in range(rng.randrange(1, DEEP + 1)))
        if rng.random() < 0.1:
            guard = role(f"g{rng.randrange(5)}")
            rules.append(
                LangRule(f"f{i}", "forbid", ("read",), True, (*prefix, DSTAR), None, unless=guard)
            )
        else:
            r = role(f"r{rng.randrange(200)}")
            rules.append(LangRule(f"p{i}", "permit", ("read",), True, (*prefix, DSTAR), r))
    wl = RandomWorkload(
        "deep", NAMESPACE, dict(TOOLS), dict(RESOURCES), ACTIONS, dict(NAMED), rules
    )
    for j in range(1000):
        path = "/" + "/".join(f"d{rng.randrange(3)}" for _ in range(DEEP)) + "/f.txt"
        # each of the five guard roles held by four callers in five (all five: one in three)
        roles = [f"r{rng.randrange(200)}" for _ in range(rng.choice((1, 3, 3, 30)))]
        roles += [f"g{k}" for k in range(5) if rng.random() < 0.8]
        ctx = {"principal": f"u{j}", "roles": roles}
        wl.requests.append(Request("ws.read", {"path": path}, ctx, f"key{j}", "deep"))
    return wl


DEEP = 6


def _timed(call: Callable[[Request], bool], reqs: list[Request]) -> tuple[float, float, list[bool]]:
    """(warm p50 µs, first-pass p99 µs, answers)."""
    perf = time.perf_counter_ns
    gc.collect()
    first: list[int] = []
    answers: list[bool] = []
    for r in reqs:
        t = perf()
        answers.append(call(r))
        first.append(perf() - t)
    warm: list[int] = []
    for _ in range(3):
        for r in reqs:
            t = perf()
            call(r)
            warm.append(perf() - t)
    first.sort()
    warm.sort()
    return warm[len(warm) // 2] / 1e3, first[int(0.99 * len(first)) - 1] / 1e3, answers


def run_shape(shape: str, n_rules: int) -> dict[str, Any]:
    """Both engines on one shape; raises ``SystemExit`` on any disagreement."""
    if shape == "deep-forbids":
        wl = deep_workload(n_rules)
    elif shape in PATTERN_SHAPES:
        wl = pattern_workload(shape, n_rules)
    else:
        wl = workload(shape, n_rules)
    ref = LangReference.from_workload(wl)
    policy = compile_source(policy_text(wl), "families.sos")

    def sos(r: Request) -> bool:
        return bool(policy.decide(r.tool, r.args, r.context, context_key=r.context_key).allowed)

    def lang(r: Request) -> bool:
        return ref.allowed(r.tool, r.args, r.context)

    s50, s99, s_ans = _timed(sos, wl.requests)
    r50, r99, r_ans = _timed(lang, wl.requests)
    if s_ans != r_ans:
        bad = next(i for i, (a, b) in enumerate(zip(s_ans, r_ans, strict=True)) if a != b)
        req = wl.requests[bad]
        raise SystemExit(
            f"disagreement on {shape}: {req.args} {req.context}: {s_ans[bad]} vs {r_ans[bad]}"
        )
    return {
        "shape": shape,
        "condition": SHAPES[shape][0],
        "rules": n_rules,
        "allowed": sum(s_ans),
        "sharedos_p50_us": s50,
        "sharedos_first_p99_us": s99,
        "reference_p50_us": r50,
        "reference_first_p99_us": r99,
        "ratio": s50 / r50,
    }


def main(argv: list[str] | None = None) -> int:
    """Every shape, one table; exit 1 on a disagreement."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", type=int, default=10_000)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--json", type=Path, default=None)
    opts = ap.parse_args(argv)
    rows = []
    print(
        f"{'shape':14s} {'condition (value K of 500)':58s} {'allowed':>7s} "
        f"{'SOS p50':>9s} {'SOS 1st p99':>11s} {'ref p50':>9s} {'ref 1st p99':>11s} {'SOS/ref':>8s}"
    )
    for shape in opts.shapes.split(","):
        row = run_shape(shape, opts.rules)
        rows.append(row)
        print(
            f"{shape:14s} {row['condition']:58s} {row['allowed']:7d} "
            f"{row['sharedos_p50_us']:8.2f}u {row['sharedos_first_p99_us']:10.1f}u "
            f"{row['reference_p50_us']:8.2f}u {row['reference_first_p99_us']:10.1f}u {row['ratio']:7.2f}x",
            flush=True,
        )
    print(
        f"{opts.rules:,} rules per shape (on {N_PREFIXES} prefixes; deep-forbids: a tree "
        f"{DEEP} deep); every answer agreed"
    )
    if opts.json is not None:
        opts.json.write_text(json.dumps({"rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
