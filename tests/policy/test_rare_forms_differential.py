"""A seeded differential over the language's less-travelled forms.

Other differentials draw mostly strings and small numbers; this one draws the
forms they underuse: the time (``context.now`` members compared with dates,
windows across midnight, zones and offsets, leap days, ``now`` missing or of the
wrong type), numbers (ints and floats, ``-0.0``, ``1e308``, integers past 2**53
and 2**63, booleans beside ``0`` and ``1``), strings (NFC and NFD, case, empty,
with ``/``), the resource functions on paths spelt with ``.``, ``..``, ``//`` and a
trailing ``/``, globs with ``*`` and ``**`` at the start, middle and end, owner
holes (``{context.principal}``) with unsafe values, named conditions that use
other named conditions, action lists, ``unless`` on forbids, errors under
``not`` in permits and forbids, and attributes absent, ``null`` or wrong-typed.

Each decision (effect, reason, cited rules) must be the one of the same policy
with every load-time shortcut off (value keys and rules cited in bulk), the same
on a first, second and third sight of the context, and its reason and cited rules
those of ``benchmarks/engines/langref`` (rules cited by a scan of every rule with
langref's matcher and conditions); a tool some call may use is listed
(``could_permit``), whatever the time.
"""

from __future__ import annotations

import random
import unicodedata
from typing import Any

import pytest

from benchmarks.engines import langref
from benchmarks.engines.langref import LangReference
from benchmarks.engines.sos_lang import policy_text
from benchmarks.workload_random import (
    DSTAR,
    STAR,
    C,
    Expr,
    L,
    LangRule,
    R,
    RandomWorkload,
    glob,
    hole,
    lit_seg,
)
from benchmarks.workload_random import Resource as WResource
from sharedos.policy import compile_source, evaluator
from sharedos.policy.clock import expand
from tests.policy.shortcuts import groups_using

TOOLS = {"ws.read": "read", "ws.write": "write", "ws.repo_get": "repo"}
RESOURCES = {
    "ws.read": WResource("path", "path"),
    "ws.write": WResource("path", "path"),
    "ws.repo_get": WResource(
        "template", absolute=False, segs=((("h", "owner"),), (("h", "repo"),))
    ),
}
NFD = unicodedata.normalize("NFD", "caf\u00e9")
BIG = 2**63 - 1
NUMBERS: tuple[Any, ...] = (
    0,
    -0.0,
    0.0,
    1,
    1.0,
    -1,
    0.5,
    1e308,
    -1e308,
    2**53,
    2**53 + 1,
    float(2**53),
    BIG,
    -(2**63),
    float(2**63),
    5e-324,
    23,
    2026,
    29,
)
STRINGS: tuple[Any, ...] = (
    "",
    "a",
    "A",
    "caf\u00e9",
    "Caf\u00e9",
    "/",
    "a/b",
    "/a/b",
    "/a/b/",
    "2026-02-29",
    "2024-02-29",
    "2026-12-07",
    "sat",
    "mon",
    "UTC",
    "Europe/Paris",
    "1",
    "true",
    "..",
    "*",
)
LITERALS: tuple[Any, ...] = (*NUMBERS, *STRINGS, True, False)
NOW_MEMBERS = (
    "hour",
    "minute",
    "day",
    "month",
    "year",
    "timestamp",
    "weekday",
    "date",
    "zone",
    "iso",
)
NOWS = (
    "2024-02-29T23:30:00+01:00[Europe/Paris]",
    "2024-02-29T22:30:00Z",
    "2026-12-07T00:00:00Z",
    "2026-12-06T23:59:59-10:00[Pacific/Honolulu]",
    "2026-03-29T02:30:00+00:00[Europe/London]",
    "2026-12-05T09:00:00+05:45[Asia/Kathmandu]",
    "1970-01-01T00:00:00Z",
    "2027-01-01T00:00:00+14:00[Pacific/Kiritimati]",
    "1969-12-31T23:59:59.5Z",
    "2026-12-07T09:30:00+05:45:30",
    "9999-12-31T23:59:59+00:00",
)
PRINCIPALS: tuple[Any, ...] = (
    "alice",
    "a/b",
    "*",
    "..",
    ".",
    "",
    7,
    True,
    None,
    1.0,
    "caf\u00e9",
    NFD,
    "a*",
    "Alice",
)
PATHS: tuple[str, ...] = (
    "/a",
    "/a/",
    "/a/b",
    "/a//b/",
    "/a/./b",
    "/a/x/../b",
    "/a/b/c",
    "/a/b/c.txt",
    "/c",
    "/home/alice",
    "/home/alice/",
    "/home/alice/x",
    "/home/a/b/x",
    "/home/*/x",
    "/home/../home/alice/x",
    "/home//alice/x",
    "/home/caf\u00e9/x",
    "/home/" + NFD + "/x",
    "/home/7/x",
    "/home/True/x",
    "/h/xalicey/z",
    "/",
    "//",
    "/..",
    "/.",
    "/a/b/..",
    "/x/c",
    "/x/y/c",
    "/a/c",
    "a/b",
    "/**",
    "/a/*",
)
# pattern segments
PATTERNS: tuple[tuple[Any, ...], ...] = (
    (lit_seg("a"), DSTAR),
    (DSTAR,),
    (STAR,),
    (lit_seg("a"), STAR, lit_seg("c")),
    (DSTAR, lit_seg("c")),
    (lit_seg("a"), DSTAR, lit_seg("c")),
    (lit_seg("a"), DSTAR, STAR),
    (lit_seg("a"), glob(None, ".txt")),
    (lit_seg("a"), DSTAR, glob(None, ".txt")),
    (lit_seg("a"), lit_seg("b")),
    (lit_seg("a"),),
    (DSTAR, DSTAR),
    (STAR, DSTAR),
    (DSTAR, lit_seg("b"), DSTAR),
    (lit_seg("home"), hole("principal"), DSTAR),
    (lit_seg("home"), hole("principal")),
    (lit_seg("home"), hole("principal"), lit_seg("x")),
    (lit_seg("home"), STAR, hole("principal")),
    (lit_seg("h"), glob("x", ("principal",), "y"), DSTAR),
    (lit_seg("h"), glob(("principal",), None), DSTAR),
    (lit_seg("home"), hole("attributes", "dept"), DSTAR),
    (lit_seg("caf\u00e9"), DSTAR),
    (lit_seg("home"), DSTAR, hole("principal"), DSTAR),
)
REL_PATTERNS: tuple[tuple[Any, ...], ...] = (
    (STAR, STAR),
    (hole("principal"), STAR),
    (STAR, hole("principal")),
    (DSTAR,),
    (lit_seg("acme"), DSTAR),
    (glob(("principal",), None), STAR),
)
NOW = ("context", "now")


class Gen:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.names: list[str] = []

    def lit(self) -> Expr:
        return L(self.rng.choice(LITERALS))

    def read(self) -> Expr:
        return self.typed_read()[0]

    def typed_read(self) -> tuple[Expr, str]:
        """A read, and what it holds: "str", "num" or "any" (the checker refuses an
        equality no value can make true)."""
        rng = self.rng
        c = rng.randrange(12)
        if c <= 2:
            m = rng.choice(NOW_MEMBERS)
            return R(*NOW, m), "str" if m in ("weekday", "date", "zone", "iso") else "num"
        if c == 3:
            return R("args", rng.choice(("n", "s", "flag", "path", "owner"))), "any"
        if c == 4:
            return R("context", rng.choice(("principal", "tenant"))), "str"
        if c == 5:
            return R("context", "attributes", rng.choice(("x", "level", "dept"))), "any"
        if c == 6:
            return R("resource"), "str"
        if c == 7:
            return R("action"), "str"
        if c == 8:
            return C("lower", rng.choice((R("args", "s"), R("context", "principal")))), "str"
        if c == 9:
            src = rng.choice((R("resource"), C("path", R("args", "path"))))
            index = rng.choice((L(1), L(2), L(-1), L(-2), L(3), R("args", "n")))
            return C("segment", src, index), "str"
        if c == 10:
            return C("path", rng.choice((R("args", "path"), R("args", "s")))), "str"
        return R("args", "n"), "any"

    def lit_for(self, kind: str) -> Expr:
        if kind == "str":
            return L(self.rng.choice(STRINGS))
        if kind == "num":
            return L(self.rng.choice(NUMBERS))
        return self.lit()

    def number_read(self) -> Expr:
        m = ("hour", "minute", "day", "month", "year", "timestamp")
        return self.rng.choice(
            (
                R(*NOW, self.rng.choice(m)),
                R("args", "n"),
                R("args", "flag"),
                R("context", "attributes", "level"),
            )
        )

    def atom(self) -> Expr:
        rng = self.rng
        c = rng.randrange(14)
        if c <= 3:
            op = rng.choice(("==", "!=", "==", "<", "<=", ">", ">="))
            if op in ("==", "!="):
                left, kind = self.typed_read()
                right = self.lit_for(kind)
            else:
                left, right = self.number_read(), L(rng.choice(NUMBERS))
            return ("cmp", op, left, right) if rng.random() < 0.7 else ("cmp", op, right, left)
        if c == 4:  # a time-of-day window, maybe across midnight
            lo, hi = rng.choice(((22, 6), (9, 18), (23, 0), (0, 24), (18, 9)))
            h = R(*NOW, "hour")
            join = "or" if lo > hi else "and"
            return (join, ("cmp", ">=", h, L(lo)), ("cmp", "<", h, L(hi)))
        if c == 5:
            m = rng.choice(NOW_MEMBERS)
            items = tuple(L(rng.choice(LITERALS)) for _ in range(rng.randrange(0, 4)))
            op = rng.choice(("in", "not in"))
            return ("cmp", op, R(*NOW, m), ("list", items))
        if c == 6:
            path = rng.choice(
                (
                    ("args", "n"),
                    ("args", "s"),
                    ("context", "attributes", "x"),
                    ("context", "now"),
                    ("context", "now", "hour"),
                    ("context", "principal"),
                )
            )
            return ("has", path[0], path[1:])
        if c == 7:
            f = rng.choice(("startswith", "endswith", "contains"))
            s = rng.choice(
                (
                    R("resource"),
                    R("args", "s"),
                    C("path", R("args", "path")),
                    R(*NOW, "date"),
                    R(*NOW, "iso"),
                    C("lower", R("args", "s")),
                )
            )
            return C(f, s, L(rng.choice(STRINGS)))
        if c == 8:
            lst = ("list", tuple(self.lit() for _ in range(rng.randrange(0, 4))))
            f = rng.choice(("any_in", "all_in"))
            src = rng.choice((R("context", "roles"), R("args", "tags"), lst))
            return C(f, src, lst if rng.random() < 0.5 else R("context", "roles"))
        if c == 9:
            return (
                "cmp",
                rng.choice(("in", "not in")),
                self.lit(),
                rng.choice((R("context", "roles"), R("args", "tags"), R("args", "s"))),
            )
        if c == 10:
            cat = ("concat", L("/home/"), R("context", "principal"), L("/x"))
            return ("cmp", "==", R("resource"), cat)
        if c == 11 and self.names:
            return ("named", rng.choice(self.names))
        if c == 12:
            return (
                "cmp",
                "==",
                R("args", rng.choice(("n", "flag"))),
                L(rng.choice((True, False, 1, 0, -0.0))),
            )
        return (
            "cmp",
            rng.choice(("==", "!=")),
            C("lower", R("args", "s")),
            L(rng.choice(("caf\u00e9", "a", "", "ss"))),
        )

    def cond(self, depth: int = 0) -> Expr:
        rng = self.rng
        c = rng.randrange(10)
        if depth >= 2 or c <= 4:
            return self.atom()
        if c <= 6:
            return ("not", self.cond(depth + 1))
        kind = rng.choice(("and", "or"))
        return (kind, *(self.cond(depth + 1) for _ in range(rng.randrange(2, 4))))

    def rules(self) -> tuple[dict[str, Expr], list[LangRule]]:
        rng = self.rng
        named: dict[str, Expr] = {}
        for i in range(rng.randrange(0, 4)):
            name = f"c{i}"
            named[name] = self.cond()
            self.names.append(name)  # a later one may use the earlier ones
        out: list[LangRule] = []
        n = rng.randrange(4, 14)
        for i in range(n):
            effect = rng.choice(("permit", "permit", "forbid"))
            absolute = rng.random() < 0.8
            pattern = rng.choice(PATTERNS if absolute else REL_PATTERNS)
            if absolute:
                actions: tuple[str, ...] | None = rng.choice(
                    (None, ("read",), ("write",), ("read", "write"))
                )
            else:
                actions = rng.choice((None, ("repo",)))
            when = unless = None
            c = rng.random()
            if c < 0.6:
                when = self.cond()
            if 0.4 < c < 0.8:
                unless = self.cond()
            out.append(LangRule(f"r{i}", effect, actions, absolute, pattern, when, unless))
            # a family of six or more rules like it (value keys, bulk citing)
            c = rng.random()
            if c < 0.3:  # a family of six or more rules keyed by one read (value keys)
                op = rng.choice(("==", "<=", ">", "in"))
                read, kind = (
                    self.typed_read() if op in ("==", "in") else (self.number_read(), "num")
                )
                tail = self.cond() if rng.random() < 0.3 else None
                for k in range(rng.randrange(6, 9)):
                    lit = self.lit_for(kind)
                    w: Expr = ("cmp", op, read, lit)
                    if op == "in":
                        w = ("cmp", "in", read, ("list", (lit, self.lit_for(kind))))
                    if tail is not None:
                        w = ("and", w, tail)
                    out.append(
                        LangRule(
                            f"r{i}f{k}",
                            effect,
                            actions,
                            absolute,
                            pattern,
                            w,
                            rng.choice((None, unless)),
                        )
                    )
            elif c < 0.45:  # rules the walk decides alone, cited in bulk
                for k in range(rng.randrange(3, 6)):
                    role = rng.choice(("admin", "a", "b"))
                    pat = rng.choice(
                        (
                            (lit_seg("a"), DSTAR),
                            (DSTAR,),
                            (lit_seg("a"), lit_seg("b"), DSTAR),
                            (lit_seg("home"), DSTAR),
                        )
                    )
                    w2, u2 = rng.choice(
                        (
                            (None, None),
                            (None, ("cmp", "in", L(role), R("context", "roles"))),
                            (("cmp", "in", L(role), R("context", "roles")), None),
                        )
                    )
                    out.append(LangRule(f"r{i}b{k}", effect, actions, True, pat, w2, u2))
        rng.shuffle(out)
        return named, out

    def value(self) -> Any:
        rng = self.rng
        c = rng.random()
        if c < 0.4:
            return rng.choice(NUMBERS)
        if c < 0.75:
            return rng.choice((*STRINGS, NFD, "CAF\u00c9", "ss", "\u00df"))
        if c < 0.85:
            return rng.choice((True, False, None))
        return rng.choice(([], ["a"], [1, True], {"k": 1}, [None]))

    def now(self) -> Any:
        rng = self.rng
        c = rng.random()
        if c < 0.7:
            return expand(rng.choice(NOWS))
        if c < 0.8:
            return None  # absent
        now = expand(rng.choice(NOWS))
        k = rng.choice(list(now))
        now[k] = self.value()  # a member of the wrong type
        return rng.choice((now, "2026-12-07T00:00:00Z", 0, [], {}))

    def call(self) -> tuple[str, Any, Any]:
        rng = self.rng
        tool = rng.choice(("ws.read", "ws.write", "ws.repo_get"))
        args: dict[str, Any] = {}
        if tool == "ws.repo_get":
            args["owner"] = rng.choice((*PRINCIPALS[:8], "acme"))
            args["repo"] = rng.choice(("r", "x", "alice", "caf\u00e9", 7, True, -0.0, 2**64, ""))
        else:
            args["path"] = rng.choice(PATHS)
        for name in ("n", "s", "flag", "tags"):
            if rng.random() < 0.7:
                args[name] = self.value()
        if rng.random() < 0.1:
            args["path"] = rng.choice(PATHS)
        ctx: dict[str, Any] = {}
        if rng.random() < 0.9:
            ctx["principal"] = rng.choice(PRINCIPALS)
        if rng.random() < 0.8:
            ctx["tenant"] = rng.choice(("default", "t", "", NFD))
        if rng.random() < 0.85:
            ctx["roles"] = rng.choice(
                ([], ["admin"], ["a", "admin"], [1, "a"], "admin", None, [True])
            )
        if rng.random() < 0.8:
            ctx["attributes"] = rng.choice(
                (
                    {},
                    {"x": self.value(), "level": self.value(), "dept": self.value()},
                    {"x": None},
                    "x",
                )
            )
        now = self.now()
        if now is not None:
            ctx["now"] = now
        return tool, args, ctx


def compile_plain(source: str) -> Any:
    """``source`` compiled with every load-time shortcut out of reach."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evaluator, "BUCKET_MIN", 10**9)
        mp.setattr(evaluator, "SURE_MIN", 10**9)
        return compile_source(source, "p.sos")


def cited(
    wl: RandomWorkload, ref: LangReference, tool: str, args: Any, ctx: Any
) -> tuple[str, set[str]]:
    """langref's reason, and the rules it says decided: every forbid that applied (for
    ``forbidden``) or every permit that applied (for ``allowed``), by a scan of every rule."""
    reason = ref.decide(tool, args, ctx)
    if reason not in (langref.ALLOWED, langref.FORBIDDEN):
        return reason, set()
    res = wl.resources[tool]
    resource = ref._resource(res, args)
    assert resource is not None
    action = wl.tools[tool]
    if res.absolute:
        segs = resource[1:].split("/") if len(resource) > 1 else []
    else:
        segs = resource.split("/")
    want = "forbid" if reason == langref.FORBIDDEN else "permit"
    out: set[str] = set()
    for rule in wl.rules:
        if rule.effect != want or rule.absolute != res.absolute:
            continue
        if rule.actions is not None and action not in rule.actions:
            continue
        if not langref.match_tail(rule.pattern, segs, 0, ctx, rule.effect == "forbid"):
            continue
        applies = langref.applies_fn(rule, wl.named)
        if applies is None or applies((ctx, args, resource, action)):
            out.add(rule.rule_id)
    return reason, out


def check(seed: int, n_calls: int) -> None:
    """Decide ``n_calls`` seeded calls of seed's policy every way."""
    gen = Gen(seed)
    named, rules = gen.rules()
    wl = RandomWorkload("x", "ws", TOOLS, RESOURCES, ("read", "write", "repo"), named, rules)
    source = policy_text(wl)
    fast = compile_source(source, "p.sos")
    plain = compile_plain(source)
    ref = LangReference.from_workload(wl)
    for j in range(n_calls):
        tool, args, ctx = gen.call()
        where = f"seed {seed} call {j}: {tool} {args!r} {ctx!r}\n{source}"
        got = fast.decide(tool, args, ctx)
        assert got == plain.decide(tool, args, ctx), where
        key = f"k{j % 3}"
        for sight in range(3):
            again = fast.decide(tool, args, ctx, context_key=f"{key}:{ctx!r}")
            assert again == got, f"{where} sight {sight}"
        reason, rules_cited = cited(wl, ref, tool, args, ctx)
        assert got.reason.value == reason, where
        if rules_cited:
            assert {r.id for r in got.rule_ids} == rules_cited, where
        if got.allowed:  # listing: a tool some call may use is listed, whatever the time
            assert fast.could_permit(tool, ctx), where
            assert fast.could_permit(tool, ctx, context_key=f"{key}:{ctx!r}"), where


SEEDS = range(12)


@pytest.mark.parametrize("seed", SEEDS)
def test_rare_forms_decide_as_langref_and_without_shortcuts(seed: int) -> None:
    check(seed, 20)


def test_the_policies_meet_the_shortcuts() -> None:
    """The seeds above compile groups keyed by value and rules cited in bulk."""
    met = 0
    for seed in SEEDS:
        named, rules = Gen(seed).rules()
        wl = RandomWorkload("x", "ws", TOOLS, RESOURCES, ("read", "write", "repo"), named, rules)
        policy = compile_source(policy_text(wl), "p.sos")
        met += groups_using(policy, 4) + groups_using(policy, 5)
    assert met >= 10


@pytest.mark.stress
def test_rare_forms_decide_as_langref_and_without_shortcuts_long() -> None:
    for seed in range(len(SEEDS), 3000):
        check(seed, 60)
