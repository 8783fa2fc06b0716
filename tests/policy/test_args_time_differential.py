"""Args-heavy, time-reading policies decide as the docs-based naive reference says.

A generator of another shape than ``test_naive_differential``: every rule of a
namespace shares one resource pattern family (so decisions are made by
conditions, not patterns), conditions read nested argument objects, compare
numbers at their boundaries from either side (ints, floats, big integers
past 2**53, booleans, strings), test membership in lists of mixed types, and
read ``context.now``; contexts carry ``now`` objects made by the clock module.
Each decision is compared (effect, reason, cited rules) keyed and unkeyed, and
wherever the reference allows, ``could_permit`` must list the tool.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from sharedos.policy import compile_source
from sharedos.policy.clock import expand
from tests.policy.naive_reference import REQS, decide, render
from tests.policy.naive_reference import Rule as NRule

SEEDS = range(0, 40)
REQUESTS = 40

NUMS: list[Any] = [0, 1, -1, 1.0, 0.5, 10, 9.999, 2**53, 2**53 + 1, float(2**53), -0.0, 2**63 - 1]
VALS: list[Any] = [*NUMS, True, False, None, "1", "a", "A", "", [1], {"k": 1}, ["a", 1]]
NOWS = [
    "2026-12-07T09:30:00+01:00[Europe/Paris]",
    "2026-12-07T08:59:59Z",
    "2026-12-05T18:00:00Z",
    "2026-12-31T23:59:59-10:00[Pacific/Honolulu]",
    "2027-01-01T00:00:00Z",
]
ARG_PATHS = [["n"], ["meta", "n"], ["meta", "owner", "id"], ["mode"], ["meta", "tags"], ["flag"]]
PATHS = ["/a/b", "/pub/x.txt", "/data/v7", "/pub/../a/B", "/a//b/", "/\u00e9", "/A/b", "rel"]
HOLES: list[Any] = [
    "acme",
    "Acme",
    "ACME",
    "\u00e9",
    "e\u0301",
    "a/b",
    "..",
    "",
    7,
    "%2e",
    "İ",
    "r",
]
NOW_MEMBERS = {
    "hour": [0, 8, 9, 17, 18, 23],
    "minute": [0, 59],
    "day": [1, 5, 7, 31],
    "month": [1, 12],
    "year": [2026, 2027],
    "timestamp": [1798761600, 1796632200],
    "weekday": ["mon", "sat", "sun"],
    "date": ["2026-12-07"],
    "zone": ["UTC", "Europe/Paris"],
}


class Gen:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def lit(self) -> tuple:
        v = self.rng.choice([x for x in VALS if not isinstance(x, (list, dict)) and x is not None])
        return ("lit", v)

    def num(self) -> tuple:
        return ("lit", self.rng.choice(NUMS))

    def argref(self) -> tuple:
        return ("ref", "args", self.rng.choice(ARG_PATHS))

    def nowref(self) -> tuple[tuple, str]:
        m = self.rng.choice(sorted(NOW_MEMBERS))
        return ("ref", "context", ["now", m]), m

    def atom(self) -> tuple:
        r = self.rng.random()
        rng = self.rng
        if r < 0.2:
            op = rng.choice(["<", "<=", ">", ">=", "==", "!="])
            a, b = self.argref(), self.num()
            return ("cmp", op, a, b) if rng.random() < 0.5 else ("cmp", op, b, a)
        if r < 0.35:
            ref, m = self.nowref()
            v = rng.choice(NOW_MEMBERS[m])
            if isinstance(v, str):
                if rng.random() < 0.5:
                    return ("in", ref, ("list", [("lit", x) for x in NOW_MEMBERS[m]]))
                return ("cmp", rng.choice(["==", "!="]), ref, ("lit", v))
            return ("cmp", rng.choice(["<", "<=", ">", ">=", "==", "!="]), ref, ("lit", v))
        if r < 0.5:
            items = [self.lit() for _ in range(rng.randint(0, 4))]
            return (rng.choice(["in", "notin"]), self.argref(), ("list", items))
        if r < 0.6:
            return ("has", "args", rng.choice(ARG_PATHS))
        if r < 0.7:
            return ("cmp", rng.choice(["==", "!="]), self.argref(), self.lit())
        if r < 0.78:
            return (
                "call",
                rng.choice(["startswith", "endswith", "contains"]),
                [
                    rng.choice(
                        [("ref", "args", ["mode"]), ("call", "lower", [("ref", "args", ["mode"])])]
                    ),
                    ("lit", rng.choice(["a", "A", "", "x"])),
                ],
            )
        if r < 0.86:
            return ("in", ("lit", rng.choice(["a", 1, True])), ("ref", "args", ["meta", "tags"]))
        if r < 0.88:
            return ("in", ("lit", rng.choice(["admin", "dev"])), ("ref", "context", ["roles"]))
        if r < 0.91:
            lit = ("lit", rng.choice(["acme", "acme/r", "/a/b", "i", "e\u0301", "b"]))
            return ("cmp", "==", ("call", "lower", [("res",)]), lit)
        if r < 0.94:
            seg = ("call", "segment", [("res",), ("lit", rng.choice([1, 2, -1, -2]))])
            return ("in", seg, ("list", [("lit", x) for x in ("a", "acme", "b", "r", "pub")]))
        return ("cmp", "==", ("ref", "context", ["tenant"]), ("lit", rng.choice(["t1", "default"])))

    def expr(self, depth: int = 2) -> tuple:
        r = self.rng.random()
        if depth and r < 0.3:
            return (
                self.rng.choice(["and", "or"]),
                [self.expr(depth - 1) for _ in range(self.rng.randint(2, 3))],
            )
        if depth and r < 0.4:
            return ("not", self.expr(depth - 1))
        return self.atom()

    def value(self, depth: int = 0) -> Any:
        r = self.rng.random()
        if depth < 2 and r < 0.15:
            return {
                k: self.value(depth + 1) for k in self.rng.sample(["n", "owner", "id", "tags"], 2)
            }
        if r < 0.25:
            return [
                self.rng.choice(["a", 1, True, "b", 1.0]) for _ in range(self.rng.randint(0, 3))
            ]
        return self.rng.choice(VALS)

    def args(self) -> dict[str, Any]:
        a: dict[str, Any] = {}
        for k in ("n", "mode", "flag"):
            if self.rng.random() < 0.7:
                a[k] = self.value()
        if self.rng.random() < 0.8:
            meta: dict[str, Any] = {}
            for k in ("n", "tags"):
                if self.rng.random() < 0.7:
                    meta[k] = self.value()
            if self.rng.random() < 0.6:
                meta["owner"] = {"id": self.value()} if self.rng.random() < 0.8 else self.value()
            a["meta"] = meta
        a["path"] = self.rng.choice(PATHS)
        a["target"] = self.rng.choice(PATHS)
        for k in ("owner", "repo", "name"):
            if self.rng.random() < 0.95:
                a[k] = self.rng.choice(HOLES)
        return a

    def ctx(self) -> dict[str, Any]:
        c: dict[str, Any] = {
            "principal": "alice",
            "tenant": self.rng.choice(["t1", "default"]),
            "roles": self.rng.sample(["admin", "dev", "x"], self.rng.randint(0, 2)),
            "attributes": {},
        }
        if self.rng.random() < 0.9:
            c["now"] = expand(self.rng.choice(NOWS))
        return c

    def policy(self) -> tuple[str, list[NRule], dict[str, dict[str, tuple]]]:
        rules: list[NRule] = []
        named: dict[str, dict[str, tuple]] = {"files": {}, "gh": {}}
        lines: list[str] = []
        n = 0
        for ns, pat in (("files", "/**"), ("gh", "*/*")):
            lines.append(f"namespace {ns}")
            lines.extend(
                f"requirement {r.tool} {{ action {r.action}; resource "
                + (f"path(args.{r.arg})" if r.kind == "path" else json.dumps(r.template))
                + " }"
                for r in REQS
                if r.ns == ns
            )
            if self.rng.random() < 0.5:
                e = self.expr(1)
                named[ns]["office"] = e
                lines.append(f"condition office = {render(e)}")
            for _ in range(self.rng.randint(2, 10)):
                n += 1
                eff = self.rng.choice(["permit", "permit", "forbid", "approval"])
                acts = None if self.rng.random() < 0.5 else [self.rng.choice(["read", "write"])]
                if ns == "files" and acts == ["admin"]:
                    acts = None
                w = self.expr() if self.rng.random() < 0.8 else None
                if named[ns] and self.rng.random() < 0.3:
                    w = ("and", [("named", "office"), w]) if w else ("named", "office")
                u = self.expr(1) if self.rng.random() < 0.3 else None
                rid = f"r{n}"
                acts_s = "*" if acts is None else ", ".join(acts)
                head = (
                    f'require approval by role "boss" for {acts_s} on "{pat}"'
                    if eff == "approval"
                    else f'{eff} {acts_s} on "{pat}"'
                )
                text = f'@id("{rid}") {head}'
                if w is not None:
                    text += f" when {render(w)}"
                if u is not None:
                    text += f" unless {render(u)}"
                lines.append(text)
                rules.append(NRule(rid, eff, ns, acts, pat, pat, w, u))
        return "\n".join(lines) + "\n", rules, named


@pytest.mark.parametrize("seed", SEEDS)
def test_args_and_time_conditions_agree_with_the_reference(seed: int) -> None:
    gen = Gen(seed)
    source, rules, named = gen.policy()
    policy = compile_source(source, "p.sos")
    pool = [gen.ctx() for _ in range(3)]
    for i in range(REQUESTS):
        req = gen.rng.choice(REQS)
        args = gen.args()
        ctx = pool[gen.rng.randrange(len(pool))]
        want = decide(rules, named, req.tool, args, ctx)
        key = json.dumps({k: v for k, v in ctx.items() if k != "now"}, sort_keys=True)
        for k in (None, key):
            d = policy.decide(req.tool, args, ctx, context_key=k)
            got = (d.effect.value, d.reason.value, frozenset(r.id for r in d.rule_ids))
            assert got == want, (
                f"seed {seed} request {i} key={k is not None}: {req.tool} {args!r} {ctx!r}\n{source}"
            )
        if want[0] != "deny":
            assert policy.could_permit(req.tool, ctx), f"seed {seed}: {req.tool} {ctx!r}\n{source}"
