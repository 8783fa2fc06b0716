"""Decisions on a workload nobody tuned for (issue 27's shape), three ways.

A seeded generator of its own (not ``workload_random``, not ``naive_reference.Gen``):
rules on directory prefixes at random depths that differ only by a role
condition, forbids ``unless "ROLE" in context.roles`` on prefixes that overlap
them, owner homes by principal (``/home/{context.principal}/**``), approval
rules, and every condition form (in-lists, numeric bounds, string functions,
``segment``, ``any_in``/``all_in``, ``has``, the time ``context.now``, tenant and
attribute tests, named conditions, ``not``/``or``). Requests walk deep paths
that match several prefixes at once, with near-miss siblings (``p1``/``p10``),
``..``, ``.``, ``//`` and trailing slashes.

Each decision (effect, reason and the rules cited) is compared with the
documented semantics (``naive_reference.decide``, written from the docs), for
the compiled policy with and without a context key and after a bundle save and
load; allow/deny is compared with the indexed reference engine of
``benchmarks/engines`` on the rules it can express (mode ``reference`` keeps
only those). ``could_permit`` is checked both ways on policies whose conditions
read only the context (``context-only``) or the context and equality tests of
the time (``time``: every distinguishable hour of a week is tried): a tool is
listed iff some path of a complete witness set is allowed at some time; with
every form (``every-form``) only one way (an allowed call's tool is listed).
More seeds: ``SOS_PREFIX_SEEDS=2000``.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from benchmarks.engines.reference import ReferenceEngine
from benchmarks.workload import Rule as WRule
from sharedos.policy import compile_source, load_bundle, save_bundle
from sharedos.policy.clock import expand
from tests.policy.naive_reference import Rule, decide, render

SEEDS = range(int(os.environ.get("SOS_PREFIX_SEEDS", "40")))
REQUESTS = 60
SEGS = ["p1", "p10", "src", "lib", "docs", "a", "b"]
LEAVES = ["x.md", "y.py", ".ssh", "pub", "zz"]
USERS = ["alice", "bob", "carol"]
ROLES = [f"r{i}" for i in range(8)]
ACTIONS = ["read", "write", "delete"]
TOOLS = {"files.read": "read", "files.write": "write", "files.delete": "delete"}
DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
HOURS = [9, 12, 17, 3]  # the last one no condition mentions
#: every (day, hour) a time condition can tell apart: Mon 2026-12-07T00:00Z + d days + h hours
WEEK = [expand(1796601600 + 86400 * d + 3600 * h) for d in range(7) for h in HOURS]
ZONES = ["UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo"]
HEADER = """namespace files
requirement files.read { action read; resource path(args.path) }
requirement files.write { action write; resource path(args.path) }
requirement files.delete { action delete; resource path(args.target) }
"""


def _ref(root: str, *names: str) -> tuple:
    return ("ref", root, list(names))


def _lit(v: Any) -> tuple:
    return ("lit", v)


def _role(r: str) -> tuple:
    return ("in", _lit(r), _ref("context", "roles"))


class PrefixGen:
    def __init__(self, seed: int, mode: str) -> None:
        self.rng = random.Random(f"{seed}-{mode}")
        self.ctx_only = mode != "every-form"
        self.ref_only = mode == "reference"
        self.timed = mode == "time"
        self.n = 0
        rng = self.rng
        self.prefixes: list[list[str]] = []
        for _ in range(rng.randint(2, 6)):
            base = self.prefixes and rng.random() < 0.6
            p = list(rng.choice(self.prefixes)) if base else []
            p += [rng.choice(SEGS) for _ in range(rng.randint(1, 3))]
            self.prefixes.append(p[:6])
        self.named: dict[str, tuple] = {}

    # ---------------------------------------------------------------- conditions
    def time_cond(self) -> tuple:
        """A test of one member of the time that listing can weigh exactly (no ordering)."""
        rng = self.rng
        member, values = rng.choice([("weekday", DAYS), ("hour", HOURS[:-1])])
        ref = _ref("context", "now", member)
        k = rng.randrange(4)
        if k == 0:
            return ("cmp", "==", ref, _lit(rng.choice(values)))
        if k == 1:
            return ("cmp", "!=", ref, _lit(rng.choice(values)))
        if k == 2:
            return ("in", ref, ("list", [_lit(v) for v in rng.sample(values, 2)]))
        return ("notin", ref, ("list", [_lit(v) for v in rng.sample(values, 2)]))

    def ctx_cond(self) -> tuple:
        rng = self.rng
        if self.timed and rng.random() < 0.4:
            return self.time_cond()
        k = rng.randrange(9)
        if k < 3:
            return _role(rng.choice(ROLES))
        if k == 3:
            return ("cmp", "==", _ref("context", "tenant"), _lit(rng.choice(["t1", "t2"])))
        if k == 4:
            return (
                "cmp",
                rng.choice([">=", "<", "<="]),
                _ref("context", "attributes", "level"),
                _lit(rng.randint(0, 4)),
            )
        if k == 5:
            return (
                "call",
                "any_in",
                [_ref("context", "roles"), ("list", [_lit(r) for r in rng.sample(ROLES, 2)])],
            )
        if k == 6:
            return (
                "call",
                "all_in",
                [("list", [_lit(r) for r in rng.sample(ROLES, 2)]), _ref("context", "roles")],
            )
        if k == 7:
            return (
                "cmp",
                "==",
                ("call", "lower", [_ref("context", "principal")]),
                _lit(rng.choice(USERS)),
            )
        return ("notin", _lit(rng.choice(ROLES)), _ref("context", "roles"))

    def any_cond(self) -> tuple:
        rng = self.rng
        if self.ctx_only or rng.random() < 0.4:
            c = self.ctx_cond()
        else:
            k = rng.randrange(11)
            if k == 0:
                c = (
                    "in",
                    _ref("args", "mode"),
                    ("list", [_lit(m) for m in rng.sample(["a", "b", "c"], 2)]),
                )
            elif k == 1:
                c = (
                    "cmp",
                    rng.choice(["<=", ">", "<"]),
                    _ref("args", "size"),
                    _lit(rng.choice([0, 10, 100])),
                )
            elif k == 2:
                c = (
                    "call",
                    "startswith",
                    [("res",), _lit("/" + "/".join(rng.choice(self.prefixes)))],
                )
            elif k == 3:
                c = ("call", "endswith", [("res",), _lit(rng.choice([".md", ".py"]))])
            elif k == 4:
                c = (
                    "cmp",
                    "==",
                    ("call", "segment", [("res",), _lit(rng.choice([1, 2, -1]))]),
                    _lit(rng.choice(SEGS)),
                )
            elif k == 5:
                c = ("has", "args", ["mode"])
            elif k == 6:
                c = (
                    "cmp",
                    rng.choice([">=", "<"]),
                    _ref("context", "now", "hour"),
                    _lit(rng.randint(6, 20)),
                )
            elif k == 7:
                c = (
                    "in",
                    _ref("context", "now", "weekday"),
                    ("list", [_lit(d) for d in rng.sample(["mon", "tue", "wed", "sat", "sun"], 2)]),
                )
            elif k == 8:
                c = ("cmp", "<", _ref("context", "now", "timestamp"), _lit(1796632200))
            elif k == 9:
                c = ("cmp", "==", ("act",), _lit(rng.choice(ACTIONS)))
            else:
                c = ("call", "contains", [_ref("args", "mode"), _lit("a")])
        r = rng.random()
        if r < 0.1:
            c = ("not", c)
        elif r < 0.2:
            c = ("or", [c, self.ctx_cond()])
        elif r < 0.3:
            c = ("and", [self.ctx_cond(), c])
        elif r < 0.4 and self.named:
            c = ("named", rng.choice(sorted(self.named)))
        return c

    def key_term(self, read: str, i: int) -> tuple:
        rng = self.rng
        strs = ["a", "b", "c", "A", "ab", "", "t1", "1"]
        nums: list[Any] = [0, 1, 2, 1.0, 10, 10.5, 9007199254740993]
        if read == "tenant":
            return ("cmp", "==", _ref("context", "tenant"), _lit(rng.choice(strs + nums)))
        if read == "mode_in":
            return (
                "in",
                _ref("args", "mode"),
                ("list", [_lit(v) for v in rng.sample(strs + nums, 2)]),
            )
        if read == "size_eq":
            return ("cmp", "==", _ref("args", "size"), _lit(rng.choice(nums)))
        if read == "lower":
            return ("cmp", "==", ("call", "lower", [_ref("args", "mode")]), _lit(rng.choice(strs)))
        if read == "groups":
            return (
                "in",
                _lit(rng.choice(["g1", "g2", "g3", ""])),
                _ref("context", "attributes", "groups"),
            )
        if read == "any_in":
            return (
                "call",
                "any_in",
                [
                    _ref("context", "attributes", "groups"),
                    ("list", [_lit(g) for g in rng.sample(["g1", "g2", "g3", ""], 2)]),
                ],
            )
        if read == "starts":
            return ("call", "startswith", [_ref("args", "mode"), _lit(rng.choice(strs))])
        if read == "ends":
            return (
                "call",
                "endswith",
                [
                    ("call", "path", [_ref("args", "path")]),
                    _lit(rng.choice([".md", "", "x.md", "py"])),
                ],
            )
        if read == "seg":
            return (
                "cmp",
                "==",
                (
                    "call",
                    "segment",
                    [("call", "path", [_ref("args", "path")]), _lit(rng.choice([1, 2, -1]))],
                ),
                _lit(rng.choice(SEGS + LEAVES)),
            )
        if read == "order":
            op = rng.choice(["<=", "<", ">=", ">"])
            n = rng.choice(nums)
            if rng.random() < 0.3:
                return ("cmp", op, _lit(n), _ref("args", "size"))
            return ("cmp", op, _ref("args", "size"), _lit(n))
        if read == "level":
            return (
                "cmp",
                rng.choice(["<=", ">="]),
                _ref("context", "attributes", "level"),
                _lit(rng.randint(0, 5)),
            )
        if read == "or":
            a, b = rng.sample(strs, 2)
            return (
                "or",
                [
                    ("cmp", "==", _ref("args", "mode"), _lit(a)),
                    ("cmp", "==", _ref("args", "mode"), _lit(b)),
                ],
            )
        raise AssertionError(read)

    def family(self, specs: list[Any], acts: Any) -> None:
        rng = self.rng
        read = rng.choice(
            [
                "tenant",
                "mode_in",
                "size_eq",
                "lower",
                "groups",
                "any_in",
                "starts",
                "ends",
                "seg",
                "order",
                "level",
                "or",
            ]
        )
        pat = self.pattern(rng.choice(self.prefixes))
        a = acts()
        eff = rng.choice(["permit", "forbid", "permit"])
        for i in range(rng.randint(6, 12)):
            if rng.random() < 0.15:
                eff = rng.choice(["permit", "forbid"])
            c = self.key_term(read, i)
            r = rng.random()
            if r < 0.2:
                c = ("and", [c, self.ctx_cond()])
            elif r < 0.3:
                c = ("and", [self.ctx_cond(), c])
            if rng.random() < 0.8:
                specs.append((eff, a, pat, c, None))
            else:
                specs.append((eff, a, pat, None, c))

    # ---------------------------------------------------------------- patterns
    def pattern(self, prefix: list[str]) -> str:
        rng = self.rng
        base = "/" + "/".join(prefix)
        return rng.choice(
            [
                base,
                base + "/**",
                base + "/**",
                base + "/*",
                base + "/*.md",
                base + "/src*",
                base + "/**/x.md",
            ]
        )

    def policy(self) -> tuple[str, list[Rule], list[WRule] | None]:
        rng = self.rng
        lines: list[str] = []
        for j in range(rng.randint(0, 2)):
            nm = f"c{j}"
            e = self.ctx_cond() if self.ctx_only else self.any_cond()
            self.named[nm] = e
            lines.append(f"condition {nm} = {render(e)}")
        specs: list[tuple[str, list[str] | None, str, tuple | None, tuple | None]] = []

        def acts() -> list[str] | None:
            return None if rng.random() < 0.3 else rng.sample(ACTIONS, rng.randint(1, 2))

        # role ladders: one prefix, rules that differ only by the role
        for _ in range(rng.randint(1, 3)):
            pat = self.pattern(rng.choice(self.prefixes))
            a = acts()
            eff = rng.choice(["permit", "permit", "forbid"])
            for r in rng.choices(ROLES, k=rng.randint(2, 10)):
                k = rng.random()
                if k < 0.5:
                    specs.append((eff, a, pat, _role(r), None))
                elif k < 0.6:
                    specs.append((eff, a, pat, ("notin", _lit(r), _ref("context", "roles")), None))
                elif k < 0.7:
                    specs.append((eff, a, pat, None, ("not", _role(r))))
                elif k < 0.8:
                    specs.append((eff, a, pat, _role(r), _role(rng.choice(ROLES))))
                elif k < 0.9:
                    specs.append((eff, a, pat, ("and", [_role(r), self.ctx_cond()]), None))
                else:
                    specs.append((eff, a, pat, ("and", [self.ctx_cond(), _role(r)]), None))
            if rng.random() < 0.3:
                specs.append(rng.choice(specs))  # a twin
        # forbids unless a role, on overlapping prefixes
        for _ in range(rng.randint(1, 3)):
            pat = self.pattern(rng.choice(self.prefixes))
            specs.append(("forbid", acts(), pat, None, _role(rng.choice(ROLES))))
        # owner homes
        if rng.random() < 0.7:
            specs.append(("permit", None, "/home/{context.principal}/**", None, None))
            specs.append(
                (
                    "forbid",
                    acts(),
                    "/home/{context.principal}/.ssh/**",
                    None,
                    _role(rng.choice(ROLES)),
                )
            )
            specs.append(
                (
                    "permit",
                    ["read"],
                    "/home/*/pub/**",
                    self.ctx_cond() if rng.random() < 0.5 else None,
                    None,
                )
            )
        # families of value-keyed rules on one prefix (enough for the engine's buckets)
        for _ in range(rng.randint(0, 2) if not self.ctx_only else 0):
            self.family(specs, acts)
        # time windows: a permit and the forbids over it that test the same member
        for _ in range(rng.randint(1, 2) if self.timed else 0):
            prefix = rng.choice(self.prefixes)
            a = acts()
            specs.append(("permit", a, self.pattern(prefix), self.time_cond(), None))
            for _ in range(rng.randint(1, 2)):
                tc = self.time_cond()
                w, u = (tc, None) if rng.random() < 0.5 else (None, tc)
                specs.append(("forbid", a, "/" + "/".join(prefix[:-1] or prefix) + "/**", w, u))
        # anything else
        for _ in range(rng.randint(1, 6)):
            eff = rng.choice(["permit", "permit", "forbid", "approval"])
            w = self.any_cond() if rng.random() < 0.7 else None
            u = self.any_cond() if rng.random() < 0.25 else None
            specs.append((eff, acts(), self.pattern(rng.choice(self.prefixes)), w, u))
        rng.shuffle(specs)
        if self.ref_only:  # only what the indexed reference engine can express
            specs = [sp for sp in specs if _to_reference([], "r", *sp) is not None]
        rules: list[Rule] = []
        wrules: list[WRule] | None = []
        for eff, a, pat, w, u in specs:
            self.n += 1
            rid = f"r{self.n}"
            act_s = "*" if a is None else ", ".join(a)
            head = f'@id("{rid}")\n'
            if eff == "approval":
                head += f'require approval by role "maint" for {act_s} on "{pat}"'
            else:
                head += f'{eff} {act_s} on "{pat}"'
            if w is not None:
                head += " when " + render(w)
            if u is not None:
                head += " unless " + render(u)
            lines.append(head)
            rules.append(Rule(rid, eff, "files", a, pat, "", w, u))
            wrules = _to_reference(wrules, rid, eff, a, pat, w, u)
        return HEADER + "\n".join(lines) + "\n", rules, wrules

    # ---------------------------------------------------------------- requests
    def ctx(self) -> dict[str, Any]:
        rng = self.rng
        c: dict[str, Any] = {
            "principal": rng.choice(USERS),
            "tenant": rng.choice(["t1", "t2", "default"]),
            "roles": rng.sample(ROLES, rng.randint(0, 3)),
            "attributes": {"level": rng.randint(0, 5)} if rng.random() < 0.8 else {},
        }
        if rng.random() < 0.1:
            c["principal"] = rng.choice(["Alice", "", "a/b", "*"])
        if rng.random() < 0.1:
            c["roles"] = rng.choice(["r1", ["r1", 3], None, ["r1", "r1"], [["r1"]], {"r1": 1}])
        if rng.random() < 0.7:
            c["attributes"]["groups"] = rng.choice(
                [["g1"], ["g1", "g2"], [], ["g3", 3], "g1", [""], None]
            )
        if rng.random() < 0.2:
            c["tenant"] = rng.choice(["t1", 1, 1.0, True, None, "1", "", "a"])
        if self.timed and rng.random() < 0.8:
            c["now"] = rng.choice(WEEK)
        if not self.ctx_only and rng.random() < 0.8:
            ts = 1796632200 + rng.randint(-400_000, 400_000)
            c["now"] = expand(ts)
            if rng.random() < 0.5:
                from datetime import UTC, datetime

                z = rng.choice(ZONES)
                from sharedos.policy.clock import now_value, zone

                c["now"] = now_value(datetime.fromtimestamp(ts, UTC).astimezone(zone(z)), z)
        return c

    def path(self, ctx: dict[str, Any]) -> str:
        rng = self.rng
        if rng.random() < 0.25:
            who = ctx["principal"] if rng.random() < 0.6 else rng.choice(USERS)
            segs = ["home", str(who)]
        else:
            segs = list(rng.choice(self.prefixes))
            if rng.random() < 0.2:  # near-miss sibling
                i = rng.randrange(len(segs))
                segs[i] = {"p1": "p10", "p10": "p1"}.get(segs[i], segs[i] + "x")
        for _ in range(rng.randint(0, 4)):
            segs.append(rng.choice(SEGS + LEAVES))
        p = "/" + "/".join(segs)
        r = rng.random()
        if r < 0.05:
            p = p.replace("/", "//", 1)
        elif r < 0.1:
            p = p + "/"
        elif r < 0.15:
            p = p + "/../" + rng.choice(SEGS)
        elif r < 0.18:
            p = p + "/./x.md"
        return p

    def args(self, tool: str, path: str) -> dict[str, Any]:
        rng = self.rng
        a: dict[str, Any] = {"target" if tool == "files.delete" else "path": path}
        if rng.random() < 0.7:
            a["mode"] = rng.choice(
                ["a", "b", "c", "ab", "A", "", "1", 1, 1.0, True, None, ["a"], 3]
            )
        if rng.random() < 0.7:
            a["size"] = rng.choice(
                [
                    0,
                    -0.0,
                    1,
                    1.0,
                    2,
                    5,
                    10,
                    10.0,
                    11,
                    10.5,
                    100,
                    101,
                    True,
                    False,
                    None,
                    "7",
                    "10",
                    2**64,
                    9007199254740992.0,
                    9007199254740993,
                    1e300,
                ]
            )
        return a

    def witnesses(self, rules: list[Rule], principal: Any) -> list[str]:
        """Paths that reach every allowable region of these patterns (fresh segments)."""
        out: set[str] = set()
        for r in rules:
            if r.effect != "permit":
                continue
            for fill in ("", "zz", "zz/zz"):
                p = r.pattern.replace("{context.principal}", str(principal))
                p = p.replace("/**", "/" + fill if fill else "")
                p = p.replace("*.md", "zz.md").replace("src*", "srczz").replace("*", "zz")
                out.add(p or "/")
        return sorted(out)


def _to_reference(
    wrules: list[WRule] | None,
    rid: str,
    eff: str,
    a: list[str] | None,
    pat: str,
    w: tuple | None,
    u: tuple | None,
) -> list[WRule] | None:
    """The rule in the reference engine's language, or None when it has no such form."""
    if wrules is None or eff == "approval" or (w is not None and u is not None):
        return None
    c = w if w is not None else u
    cond: tuple | None = None
    if c is not None:
        if c[0] == "in" and c[1][0] == "lit" and c[2] == _ref("context", "roles"):
            cond = ("role", c[1][1])
        elif c[0] == "cmp" and c[1] == "==" and c[2] == _ref("context", "tenant"):
            cond = ("tenant", c[3][1])
        else:
            return None
    segs: list[tuple[str, ...]] = []
    for s in pat.split("/")[1:]:
        if s == "**":
            segs.append(("dstar",))
        elif s == "*":
            segs.append(("star",))
        elif s == "{context.principal}":
            segs.append(("principal",))
        elif "*" in s:
            pre, suf = s.split("*")
            segs.append(("glob", pre, suf))
        else:
            segs.append(("lit", s))
    if any(s == ("dstar",) for s in segs[:-1]):
        return None
    actions = tuple(ACTIONS) if a is None else tuple(a)
    wrules.append(WRule(rid, eff, actions, a is None, tuple(segs), cond, u is not None))
    return wrules


def _got(policy: Any, tool: str, args: Any, ctx: Any, key: str | None) -> tuple[Any, ...]:
    d = policy.decide(tool, args, ctx, context_key=key)
    return (d.effect.value, d.reason.value, frozenset(r.id for r in d.rule_ids))


@pytest.mark.parametrize("mode", ["reference", "context-only", "time", "every-form"])
@pytest.mark.parametrize("seed", SEEDS)
def test_prefix_workload_agrees_with_the_documented_semantics(
    seed: int, mode: str, tmp_path: Path
) -> None:
    gen = PrefixGen(seed, mode)
    ctx_only = gen.ctx_only
    source, rules, wrules = gen.policy()
    policy = compile_source(source, "p.sos")
    save_bundle(policy, tmp_path / "b.json")
    loaded = load_bundle(tmp_path / "b.json")
    reference = None if wrules is None else ReferenceEngine(TOOLS, wrules)
    pool = [gen.ctx() for _ in range(5)]
    for i in range(REQUESTS):
        ctx = pool[gen.rng.randrange(len(pool))]
        tool = gen.rng.choice(sorted(TOOLS))
        args = gen.args(tool, gen.path(ctx))
        want = decide(rules, {"files": gen.named}, tool, args, ctx)
        key = json.dumps({k: v for k, v in ctx.items() if k != "now"}, sort_keys=True)
        where = f"seed {seed} request {i}: {tool} {args!r} {ctx!r}\n{source}"
        for name, engine, k in (
            ("compiled", policy, None),
            ("compiled, keyed", policy, key),
            ("bundle, keyed", loaded, key),
        ):
            assert _got(engine, tool, args, ctx, k) == want, f"({name}) {where}"
        # the reference reads roles with Python's `in`: only a list of strings is its input
        # (the kernel's AccessContext always gives one)
        roles = ctx.get("roles")
        typed = type(roles) is list and all(type(r) is str for r in roles)
        if reference is not None and tool != "files.delete" and typed:
            assert reference.decide(tool, args, ctx) == (want[0] == "allow"), f"(reference) {where}"
    for ctx in pool:
        key = json.dumps({k: v for k, v in ctx.items() if k != "now"}, sort_keys=True)
        for tool in sorted(TOOLS):
            arg = "target" if tool == "files.delete" else "path"
            paths = gen.witnesses(rules, ctx["principal"])
            times = WEEK if gen.timed else [ctx.get("now")]
            some = any(
                decide(
                    rules, {"files": gen.named}, tool, {arg: p}, {**ctx, "now": now} if now else ctx
                )[0]
                != "deny"
                for now in times
                for p in paths
            )
            if gen.timed:
                ctx = {k: v for k, v in ctx.items() if k != "now"}  # unknown at listing
            for name, engine in (("compiled", policy), ("bundle", loaded)):
                listed = engine.could_permit(tool, ctx, context_key=key)
                if ctx_only:
                    assert listed == some, f"({name}) seed {seed}: {tool} {ctx!r} {paths}\n{source}"
                elif some:
                    assert listed, f"({name}) seed {seed}: {tool} {ctx!r}\n{source}"
