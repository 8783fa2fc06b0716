"""The third, randomized workload (issue 27): every pattern and condition form, seeded.

``acl`` and ``interp`` (``workload.py``) are shapes the engine was tuned on.
This one is drawn afresh from a seed, so no engine can be tuned to one
instance of it, and it stresses what they do not:

- **many rules on one directory prefix that differ only by a role**
  (``permit read on "/data/d3/d7/**" when "r12" in context.roles``), on
  prefixes at random depths, so that a deep request path meets several
  prefixes (and every rule of each) at once;
- **rules on one prefix that differ only by a value** the caller or the call
  carries (``when context.tenant == "t3"``, ``when args.size == 4096``,
  ``when "g2" in context.attributes.groups``), some also needing a role;
- **forbids ``unless "ROLE" in context.roles``** on prefixes that overlap
  the permits' (ancestors, descendants and siblings of them);
- owner homes and team folders by principal (``/home/{context.principal}/**``,
  ``/teams/t3/{context.principal}/**``), holes of other context values
  (``{context.tenant}``, ``{context.attributes.dept}``), a hole inside a
  segment (``/drop/{context.principal}-*``);
- every other pattern form: ``*``, ``pre*suf``, ``a*b*c``, ``**`` in the middle
  (``/srv/**/secret/*``), exact paths, and relative patterns over a template
  resource (``"{args.owner}/{args.repo}"``);
- every condition form of the language: ``in`` / ``not in`` over roles and
  literal lists, ``==`` / ``!=`` (also of two objects: ``args.meta ==
  context.attributes.meta``), ``< <= > >=``, ``has``, ``and`` / ``or`` / ``not``,
  ``+``, each function (``startswith``, ``endswith``, ``contains``, ``lower``,
  ``path(args.x)`` in an expression, ``segment``, ``any_in``, ``all_in``),
  ``context.now`` comparisons, ``when ... unless ...`` on one rule, and named
  conditions (``condition staff = ...``);
- requests from a **large population of callers** (most contexts are seen
  once or twice: a per-context cache cannot carry the decision), with
  optional arguments that are sometimes absent (so ``has`` guards matter and
  unguarded reads fail closed), now and then a non-canonical path, an
  unsafe principal, or a destination that ``path()`` refuses.

The model is engine-neutral like the other workloads: rules are plain tuples
(pattern segments, an expression tree) that each adapter translates into its
own language; the expression tree is the one ``tests/policy/
test_reference_semantics.py`` uses, so its meaning is the reference page's.
Requests are balanced (half allowed, half denied, labelled by the
independent reference ``engines/langref.py``, then checked against every
engine). Context paths are those of ``context.now`` as the host supplies it
(``docs/policy-language.md``, "The time"), computed here with ``zoneinfo``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

# ------------------------------------------------------------------ the model
# Expressions (tuples):
#   ("lit", v)  ("list", (e, ...))  ("ref", root, (name, ...))  ("has", root, (name, ...))
#   ("call", f, (e, ...))  ("cmp", op, l, r)  ("and", e, e, ...)  ("or", e, e, ...)
#   ("not", e)  ("concat", e, e, ...)  ("named", name)
Expr = tuple[Any, ...]

# Pattern segments:
#   ("lit", text)                     exactly that segment
#   ("star",)                         one segment
#   ("dstar",)                        any number of segments, zero included
#   ("glob", (piece, ...))            one segment of pieces: ("t", text), ("w",) a
#                                     wildcard, ("h", (name, ...)) a context value
Seg = tuple[Any, ...]


@dataclass(frozen=True)
class LangRule:
    """One permit or forbid of the full language."""

    rule_id: str
    effect: str  # "permit" | "forbid"
    actions: tuple[str, ...] | None  # None: "*"
    absolute: bool
    pattern: tuple[Seg, ...]
    when: Expr | None = None
    unless: Expr | None = None
    family: str = ""


@dataclass(frozen=True)
class Resource:
    """A requirement's resource: ``path(args.NAME)`` or a template over arguments."""

    kind: str  # "path" | "template"
    arg: str = ""
    absolute: bool = True
    # template segments: each a tuple of pieces ("t", text) / ("h", argname)
    segs: tuple[tuple[tuple[str, str], ...], ...] = ()


NAMESPACE = "ws"
ACTIONS = ("read", "write", "delete", "list", "share", "repo", "ticket")
PATH_ACTIONS = ("read", "write", "delete", "list", "share")
TOOLS: dict[str, str] = {
    "ws.read": "read",
    "ws.write": "write",
    "ws.delete": "delete",
    "ws.list": "list",
    "ws.share": "share",
    "ws.repo_get": "repo",
    "ws.ticket_get": "ticket",
}
RESOURCES: dict[str, Resource] = {
    **{t: Resource("path", "path") for t, a in TOOLS.items() if a in PATH_ACTIONS},
    "ws.repo_get": Resource("template", absolute=False, segs=((("h", "owner"),), (("h", "repo"),))),
    "ws.ticket_get": Resource(
        "template",
        absolute=True,
        segs=((("t", "tickets"),), (("h", "queue"),), (("t", "t-"), ("h", "id"))),
    ),
}
#: Named conditions (``condition NAME = EXPR``), expanded where used.
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def R(root: str, *path: str) -> Expr:
    """A reference expression."""
    return ("ref", root, tuple(path))


def L(value: Any) -> Expr:
    """A literal expression."""
    return ("lit", value)


def role(name: str) -> Expr:
    """``"name" in context.roles``."""
    return ("cmp", "in", L(name), R("context", "roles"))


def C(func: str, *args: Expr) -> Expr:
    """A function call."""
    return ("call", func, tuple(args))


def lit_seg(text: str) -> Seg:
    """A literal pattern segment."""
    return ("lit", text)


def hole(*path: str) -> Seg:
    """A whole-segment hole ``{context.PATH}``."""
    return ("glob", (("h", tuple(path)),))


STAR: Seg = ("star",)
DSTAR: Seg = ("dstar",)


def glob(*pieces: Any) -> Seg:
    """A glob segment: strings are text, ``None`` a wildcard, tuples context holes."""
    out: list[tuple[Any, ...]] = []
    for p in pieces:
        if p is None:
            out.append(("w",))
        elif isinstance(p, tuple):
            out.append(("h", p))
        else:
            out.append(("t", p))
    return ("glob", tuple(out))


NAMED: dict[str, Expr] = {
    "staff": ("or", role("staff"), role("admin")),
    "office_hours": (
        "and",
        ("cmp", ">=", R("context", "now", "hour"), L(8)),
        ("cmp", "<", R("context", "now", "hour"), L(19)),
    ),
    "trusted": (
        "and",
        ("named", "staff"),
        ("cmp", ">=", R("context", "attributes", "clearance"), L(3)),
    ),
}


# ------------------------------------------------------------------ workload


@dataclass
class RandomWorkload:
    """Rules, named conditions and requests of one ``random`` run (engine-neutral)."""

    name: str
    namespace: str
    tools: dict[str, str]
    resources: dict[str, Resource]
    actions: tuple[str, ...]
    named: dict[str, Expr]
    rules: list[LangRule]
    requests: list[Any] = field(default_factory=list)
    seed: int = 0
    features: dict[str, Any] = field(default_factory=dict)
    kind: str = "lang"

    @property
    def n_rules(self) -> int:
        """Number of permit/forbid rules."""
        return len(self.rules)

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary."""
        families: dict[str, int] = {}
        for r in self.rules:
            families[r.family] = families.get(r.family, 0) + 1
        return {
            "name": self.name,
            "rules": self.n_rules,
            "requests": len(self.requests),
            "labelled_allow": sum(1 for r in self.requests if r.shape.startswith("allow")),
            "near_misses": sum(1 for r in self.requests if r.near_miss),
            "seed": self.seed,
            "families": families,
            "contexts": len({r.context_key for r in self.requests}),
        }


# ---------------------------------------------------------------- the universe


class Universe:
    """The names a run draws from: a directory tree, roles, tenants, departments."""

    def __init__(self, rng: random.Random, n_rules: int) -> None:
        self.rng = rng
        self.n_roles = max(8, n_rules // 5)
        self.roles = [f"r{i}" for i in range(self.n_roles)]
        self.tenants = [f"t{i}" for i in range(6)]
        self.depts = [f"dept{i}" for i in range(8)]
        self.n_teams = max(3, n_rules // 40)
        self.tops = ["data", "proj", "srv", "docs", "media", "ops"]
        # a random directory tree: each prefix is a tuple of segments
        self.prefixes: list[tuple[str, ...]] = []
        n_prefixes = max(4, n_rules // 4)
        seen: set[tuple[str, ...]] = set()
        while len(self.prefixes) < n_prefixes:
            depth = rng.choice((1, 2, 2, 3, 3, 3, 4, 4, 5))
            base = rng.choice(self.prefixes) if self.prefixes and rng.random() < 0.6 else ()
            base = base[: rng.randrange(len(base) + 1)] if base else ()
            segs = list(base) or [rng.choice(self.tops)]
            while len(segs) < depth:
                segs.append(f"d{rng.randrange(max(4, n_prefixes // 3))}")
            p = tuple(segs)
            if p not in seen:
                seen.add(p)
                self.prefixes.append(p)

    def prefix(self) -> tuple[str, ...]:
        """A random prefix of the tree."""
        return self.rng.choice(self.prefixes)

    def some_roles(self, k: int) -> list[str]:
        """``k`` distinct roles."""
        return self.rng.sample(self.roles, min(k, len(self.roles)))

    def actions(self) -> tuple[str, ...] | None:
        """A random action list over paths (None: ``*``)."""
        r = self.rng.random()
        if r < 0.15:
            return None
        k = self.rng.choice((1, 1, 2, 2, 3))
        return tuple(sorted(self.rng.sample(PATH_ACTIONS, k), key=PATH_ACTIONS.index))


def _p(*segs: Any) -> tuple[Seg, ...]:
    return tuple(lit_seg(s) if isinstance(s, str) else s for s in segs)


# ------------------------------------------------------------------ rule families


def _f_role_group(u: Universe, n: list[int]) -> list[LangRule]:
    """Several rules on one prefix that differ only by a role (the issue's main shape)."""
    rng = u.rng
    prefix = u.prefix()
    acts = u.actions()
    tail = rng.choice((DSTAR, DSTAR, DSTAR, STAR, glob(None, ".md")))
    out = []
    for r in u.some_roles(rng.choice((1, 2, 3, 4, 6, 8))):
        out.append(
            LangRule(f"g{n[0]}", "permit", acts, True, _p(*prefix, tail), role(r), family="role")
        )
        n[0] += 1
    return out


def _f_value_group(u: Universe, n: list[int]) -> list[LangRule]:
    """Several rules on one prefix that differ only by a value the caller or the call
    carries: a tenant, a department, an argument (a string or a number), or a string
    the caller's groups hold; sometimes each also needs a role; now and then forbids."""
    rng = u.rng
    prefix = u.prefix()
    acts = u.actions()
    tail = rng.choice((DSTAR, DSTAR, DSTAR, STAR))
    kind = rng.randrange(5)
    pool: list[Any]
    if kind == 0:
        ref, pool = R("context", "tenant"), list(u.tenants)
    elif kind == 1:
        ref, pool = R("context", "attributes", "dept"), list(u.depts)
    elif kind == 2:
        ref, pool = R("args", "mode"), ["create", "append", "overwrite"]
    elif kind == 3:
        ref, pool = R("args", "size"), [10, 4096, 65_536, 1_000_000]
    else:
        ref, pool = R("context", "attributes", "groups"), ["g0", "g1", "g2", "g3", "g4"]
    effect = "forbid" if rng.random() < 0.15 else "permit"
    need = role(rng.choice(u.roles)) if rng.random() < 0.3 else None
    out = []
    for v in rng.sample(pool, min(len(pool), rng.choice((2, 3, 4, 6, 8)))):
        if kind == 4:
            cond: Expr = ("cmp", "in", L(v), ref)
        elif kind == 2 and rng.random() < 0.3:
            cond = ("cmp", "in", ref, ("list", (L(v), L(rng.choice(pool)))))
        else:
            cond = ("cmp", "==", ref, L(v))
        if need is not None:  # a forbid's first term is its key: the role test second
            cond = (
                ("and", cond, need)
                if effect == "forbid" or rng.random() < 0.5
                else ("and", need, cond)
            )
        n[0] += 1
        out.append(
            LangRule(f"v{n[0]}", effect, acts, True, _p(*prefix, tail), cond, family="value")
        )
    return out


def _f_forbid_unless_role(u: Universe, n: list[int]) -> list[LangRule]:
    """A forbid unless a role, on a prefix overlapping the permits'."""
    rng = u.rng
    prefix = u.prefix()
    if len(prefix) > 1 and rng.random() < 0.4:
        prefix = prefix[: rng.randrange(1, len(prefix))]  # an ancestor of some permits
    elif rng.random() < 0.3:
        prefix = (*prefix, f"d{rng.randrange(8)}")  # a descendant
    r = rng.choice(u.roles)
    unless: Expr = role(r) if rng.random() < 0.8 else ("or", role(r), ("named", "staff"))
    n[0] += 1
    return [
        LangRule(
            f"f{n[0]}",
            "forbid",
            u.actions(),
            True,
            _p(*prefix, DSTAR),
            None,
            unless,
            "forbid-unless",
        )
    ]


def _f_forbid_when(u: Universe, n: list[int]) -> list[LangRule]:
    """Forbids that apply when something holds (a role, an argument, a name's caseless key)."""
    rng = u.rng
    prefix = u.prefix()
    n[0] += 1
    choice = rng.randrange(6)
    if choice == 0:
        when: Expr = role("suspended")
    elif choice == 1:
        # reads an argument without has: a call without it fails closed (forbidden)
        when = ("cmp", ">", R("args", "size"), L(rng.choice((1_000, 50_000, 1_000_000))))
    elif choice == 2:
        when = ("cmp", "==", C("lower", R("args", "label")), L("private"))
        when = ("and", ("has", "args", ("label",)), when)
    elif choice == 3:
        when = C("endswith", R("resource"), L(".lock"))
    elif choice == 4:
        when = (
            "and",
            ("has", "args", ("tag",)),
            ("cmp", "in", R("args", "tag"), ("list", (L("frozen"), L("legal")))),
        )
    else:
        when = ("not", ("named", "office_hours"))
        return [
            LangRule(
                f"f{n[0]}",
                "forbid",
                ("write", "delete"),
                True,
                _p(*prefix, DSTAR),
                when,
                ("named", "trusted"),
                "forbid-when",
            )
        ]
    return [
        LangRule(
            f"f{n[0]}", "forbid", u.actions(), True, _p(*prefix, DSTAR), when, None, "forbid-when"
        )
    ]


def _f_owner(u: Universe, n: list[int]) -> list[LangRule]:
    """Patterns over the caller: homes, team folders, tenant and department holes."""
    rng = u.rng
    n[0] += 1
    rid = f"o{n[0]}"
    choice = rng.randrange(7)
    if choice == 0:
        acts = None if rng.random() < 0.5 else u.actions()
        cond = None if rng.random() < 0.7 else ("not", role("guest"))
        return [
            LangRule(
                rid,
                "permit",
                acts,
                True,
                _p("home", hole("principal"), DSTAR),
                cond,
                family="owner",
            )
        ]
    if choice == 1:
        t = f"team{rng.randrange(u.n_teams)}"
        return [
            LangRule(
                rid,
                "permit",
                u.actions(),
                True,
                _p("teams", t, hole("principal"), DSTAR),
                role(t),
                family="owner",
            )
        ]
    if choice == 2:
        return [
            LangRule(
                rid,
                "permit",
                ("read", "write"),
                True,
                _p("u", hole("tenant"), hole("principal"), glob(None, ".txt")),
                family="owner",
            )
        ]
    if choice == 3:
        return [
            LangRule(
                rid,
                "permit",
                ("read", "list"),
                True,
                _p("depts", hole("attributes", "dept"), DSTAR),
                ("cmp", ">=", R("context", "attributes", "clearance"), L(rng.randrange(1, 4))),
                family="owner",
            )
        ]
    if choice == 4:
        return [
            LangRule(
                rid,
                "permit",
                ("write",),
                True,
                _p("drop", glob(("principal",), "-", None)),
                family="owner",
            )
        ]
    if choice == 5:
        return [
            LangRule(
                rid,
                "forbid",
                None,
                True,
                _p("home", hole("principal"), "secrets", DSTAR),
                None,
                ("cmp", "==", R("context", "tenant"), L(rng.choice(u.tenants))),
                "owner",
            )
        ]
    t = f"team{rng.randrange(u.n_teams)}"
    return (
        [
            LangRule(
                rid,
                "forbid",
                ("write", "delete"),
                True,
                _p("teams", STAR, hole("principal"), "keep", DSTAR),
                ("cmp", "!=", R("args", "mode"), L("append")),
                None,
                "owner",
            )
        ]
        if rng.random() < 0.5
        else [
            LangRule(
                rid,
                "permit",
                ("read",),
                True,
                _p("teams", t, "shared", DSTAR),
                ("named", "staff"),
                family="owner",
            )
        ]
    )


def _f_globs(u: Universe, n: list[int]) -> list[LangRule]:
    """Every glob form: ``*``, ``pre*suf``, ``a*b*c``, ``**`` in the middle, exact paths."""
    rng = u.rng
    prefix = u.prefix()
    n[0] += 1
    rid = f"p{n[0]}"
    choice = rng.randrange(6)
    acts = u.actions()
    if choice == 0:
        pat = _p(*prefix, STAR)
    elif choice == 1:
        pat = _p(*prefix, glob(None, rng.choice((".md", ".txt", ".py"))))
    elif choice == 2:
        pat = _p(*prefix, glob("rep", None, "-", None, ".csv"))
    elif choice == 3:
        pat = _p(*prefix, DSTAR, "secret", STAR)
        return [LangRule(rid, "forbid", acts, True, pat, None, ("named", "staff"), "glob")]
    elif choice == 4:
        pat = _p(*prefix, "index.html")
    else:
        pat = _p(*prefix, STAR, DSTAR, glob("v", None))
    cond = role(rng.choice(u.roles)) if rng.random() < 0.6 else None
    return [LangRule(rid, "permit", acts, True, pat, cond, family="glob")]


def _f_args(u: Universe, n: list[int]) -> list[LangRule]:
    """Conditions over arguments: in-lists, orderings, has, lower, object equality, contains."""
    rng = u.rng
    prefix = u.prefix()
    n[0] += 1
    rid = f"a{n[0]}"
    r = role(rng.choice(u.roles))
    choice = rng.randrange(8)
    acts: tuple[str, ...] | None = ("write",)
    if choice == 0:
        cond: Expr = (
            "and",
            r,
            ("cmp", "in", R("args", "mode"), ("list", (L("create"), L("append")))),
        )
    elif choice == 1:
        cond = (
            "and",
            r,
            ("cmp", "<=", R("args", "size"), L(rng.choice((4096, 65_536, 1_000_000)))),
        )
    elif choice == 2:
        cond = (
            "and",
            r,
            (
                "or",
                ("not", ("has", "args", ("tag",))),
                ("cmp", "not in", R("args", "tag"), ("list", (L("frozen"),))),
            ),
        )
    elif choice == 3:
        cond = (
            "and",
            ("has", "args", ("meta",)),
            ("cmp", "==", R("args", "meta"), R("context", "attributes", "meta")),
        )
        acts = ("read", "write")
    elif choice == 4:
        cond = ("and", r, C("contains", R("args", "label"), L("draft")))
        acts = u.actions()
    elif choice == 5:
        cond = ("and", R("args", "flag"), r)
    elif choice == 6:
        cond = ("and", r, ("cmp", "!=", C("lower", R("args", "label")), L("private")))
        acts = ("read", "list")
    else:
        cond = (
            "and",
            ("cmp", "==", R("args", "mode"), L("append")),
            C("all_in", R("args", "tags"), R("context", "attributes", "groups")),
        )
    return [LangRule(rid, "permit", acts, True, _p(*prefix, DSTAR), cond, family="args")]


def _f_resource_fns(u: Universe, n: list[int]) -> list[LangRule]:
    """Conditions over the resource and path(args.x): segment, startswith, endswith, +."""
    rng = u.rng
    n[0] += 1
    rid = f"s{n[0]}"
    choice = rng.randrange(5)
    if choice == 0:
        return [
            LangRule(
                rid,
                "permit",
                ("read", "write"),
                True,
                _p("shared", STAR, DSTAR),
                (
                    "cmp",
                    "in",
                    C("segment", R("resource"), L(2)),
                    R("context", "attributes", "folders"),
                ),
                family="resource",
            )
        ]
    if choice == 1:
        return [
            LangRule(
                rid,
                "permit",
                ("share",),
                True,
                _p(*u.prefix(), DSTAR),
                (
                    "and",
                    role(rng.choice(u.roles)),
                    C(
                        "startswith",
                        C("path", R("args", "dest")),
                        ("concat", L("/out/"), R("context", "tenant"), L("/")),
                    ),
                ),
                family="resource",
            )
        ]
    if choice == 2:
        return [
            LangRule(
                rid,
                "forbid",
                ("share",),
                True,
                _p(*u.prefix()[:1], DSTAR),
                (
                    "and",
                    ("has", "args", ("dest",)),
                    C("startswith", C("path", R("args", "dest")), L("/srv/")),
                )
                if rng.random() < 0.5
                else C("startswith", C("path", R("args", "dest")), L("/srv/")),
                None,
                "resource",
            )
        ]
    if choice == 3:
        return [
            LangRule(
                rid,
                "permit",
                ("read",),
                True,
                _p(*u.prefix(), DSTAR),
                (
                    "and",
                    ("cmp", "!=", C("segment", R("resource"), L(-1)), L("README")),
                    ("cmp", "==", C("segment", R("resource"), L(1)), L(u.prefix()[0])),
                ),
                family="resource",
            )
        ]
    return [
        LangRule(
            rid,
            "permit",
            ("list",),
            True,
            _p("t", hole("tenant"), DSTAR),
            C("startswith", R("resource"), ("concat", L("/t/"), R("context", "tenant"), L("/pub"))),
            family="resource",
        )
    ]


def _f_time(u: Universe, n: list[int]) -> list[LangRule]:
    """``context.now``: hours, weekdays, a cut-off timestamp, named office hours."""
    rng = u.rng
    prefix = u.prefix()
    n[0] += 1
    rid = f"t{n[0]}"
    choice = rng.randrange(4)
    r = role(rng.choice(u.roles))
    if choice == 0:
        cond: Expr = ("and", r, ("named", "office_hours"))
    elif choice == 1:
        cond = (
            "and",
            r,
            (
                "cmp",
                "in",
                R("context", "now", "weekday"),
                ("list", tuple(L(d) for d in WEEKDAYS[:5])),
            ),
        )
    elif choice == 2:
        cut = 1_796_000_000 + rng.randrange(0, 2_000_000)
        return [
            LangRule(
                rid,
                "forbid",
                ("write", "delete"),
                True,
                _p(*prefix, DSTAR),
                ("cmp", ">=", R("context", "now", "timestamp"), L(cut)),
                None,
                "time",
            )
        ]
    else:
        cond = ("and", r, ("cmp", "==", R("context", "now", "zone"), L("Europe/Paris")))
    return [LangRule(rid, "permit", u.actions(), True, _p(*prefix, DSTAR), cond, family="time")]


def _f_context(u: Universe, n: list[int]) -> list[LangRule]:
    """Tenant, attributes, any_in over roles, named conditions, or/not."""
    rng = u.rng
    prefix = u.prefix()
    n[0] += 1
    rid = f"c{n[0]}"
    choice = rng.randrange(5)
    if choice == 0:
        cond: Expr = ("cmp", "==", R("context", "tenant"), L(rng.choice(u.tenants)))
    elif choice == 1:
        cond = C("any_in", R("context", "roles"), ("list", tuple(L(x) for x in u.some_roles(3))))
    elif choice == 2:
        cond = ("named", "trusted")
    elif choice == 3:
        cond = (
            "or",
            role(rng.choice(u.roles)),
            ("cmp", "==", R("context", "attributes", "dept"), L(rng.choice(u.depts))),
        )
    else:
        cond = (
            "and",
            ("not", role("guest")),
            ("cmp", "not in", R("context", "tenant"), ("list", (L("t0"), L("t1")))),
        )
    return [LangRule(rid, "permit", u.actions(), True, _p(*prefix, DSTAR), cond, family="context")]


def _f_template(u: Universe, n: list[int]) -> list[LangRule]:
    """Relative patterns over ``"{args.owner}/{args.repo}"``, absolute ones over tickets."""
    rng = u.rng
    n[0] += 1
    rid = f"r{n[0]}"
    org = f"org{rng.randrange(max(2, u.n_teams))}"
    choice = rng.randrange(5)
    if choice == 0:
        return [
            LangRule(
                rid,
                "permit",
                ("repo",),
                False,
                _p(org, STAR),
                role(rng.choice(u.roles)),
                family="template",
            )
        ]
    if choice == 1:
        return [
            LangRule(
                rid, "permit", ("repo",), False, _p(hole("principal"), STAR), family="template"
            )
        ]
    if choice == 2:
        return [
            LangRule(
                rid,
                "forbid",
                ("repo",),
                False,
                _p(STAR, glob("secret", None)),
                None,
                ("named", "staff"),
                "template",
            )
        ]
    if choice == 3:
        return [
            LangRule(
                rid,
                "permit",
                ("repo",),
                False,
                _p(glob("org", None), glob("public-", None)),
                family="template",
            )
        ]
    q = f"q{rng.randrange(4)}"
    return [
        LangRule(
            rid,
            "permit",
            ("ticket",),
            True,
            _p("tickets", q, STAR),
            ("cmp", "==", R("context", "tenant"), L(rng.choice(u.tenants))),
            family="template",
        )
    ]


FAMILIES = (
    (_f_role_group, 34),
    (_f_value_group, 8),
    (_f_forbid_unless_role, 10),
    (_f_forbid_when, 5),
    (_f_owner, 10),
    (_f_globs, 10),
    (_f_args, 10),
    (_f_resource_fns, 6),
    (_f_time, 5),
    (_f_context, 6),
    (_f_template, 4),
)


def random_rules(rng: random.Random, n_rules: int) -> tuple[list[LangRule], Universe]:
    """Exactly ``n_rules`` rules: one of each family first, then families drawn by weight."""
    u = Universe(rng, n_rules)
    counter = [0]
    rules: list[LangRule] = []
    for fam, _ in FAMILIES:
        if len(rules) >= n_rules:
            break
        rules.extend(fam(u, counter)[: n_rules - len(rules)])
    funcs = [f for f, _ in FAMILIES]
    weights = [w for _, w in FAMILIES]
    while len(rules) < n_rules:
        fam = rng.choices(funcs, weights)[0]
        rules.extend(fam(u, counter)[: n_rules - len(rules)])
    rng.shuffle(rules)  # rule order never matters; the engines must not depend on it
    return rules, u


# ------------------------------------------------------------------ contexts


def now_value(instant: datetime, zone: str) -> dict[str, Any]:
    """``context.now`` as the host supplies it (docs/policy-language.md, "The time")."""
    local = instant.astimezone(ZoneInfo(zone)) if zone != "UTC" else instant.astimezone(UTC)
    return {
        "timestamp": int(local.timestamp()),
        "iso": local.isoformat(timespec="seconds"),
        "zone": zone,
        "date": local.date().isoformat(),
        "year": local.year,
        "month": local.month,
        "day": local.day,
        "hour": local.hour,
        "minute": local.minute,
        "weekday": WEEKDAYS[local.weekday()],
    }


def cache_key(ctx: dict[str, Any]) -> str:
    """The kernel's per-context key (``AccessContext.cache_key``): no turn id, no time."""
    return json.dumps(
        [ctx["principal"], ctx["tenant"], sorted(ctx["roles"]), ctx["attributes"]],
        sort_keys=True,
        separators=(",", ":"),
    )


UNSAFE_PRINCIPALS = ("a/b", "..", "x*", "")


def users(rng: random.Random, u: Universe, n_users: int) -> list[dict[str, Any]]:
    """A population of callers; a few with an unsafe principal (interpolation must fail closed)."""
    out = []
    instants = [
        datetime(2026, 12, 7, 9, 30, tzinfo=UTC).timestamp() + rng.randrange(0, 14 * 86400)
        for _ in range(24)
    ]
    for i in range(n_users):
        roles: set[str] = set(u.some_roles(rng.choice((0, 1, 2, 3, 4, 6, 8))))
        if rng.random() < 0.1:
            roles.add(rng.choice(("staff", "admin", "guest", "suspended")))
        if rng.random() < 0.3:
            roles.add(f"team{rng.randrange(u.n_teams)}")
        principal = f"u{i}" if rng.random() > 0.02 else rng.choice(UNSAFE_PRINCIPALS)
        attributes: dict[str, Any] = {
            "dept": rng.choice(u.depts),
            "clearance": rng.randrange(0, 6),
            "groups": sorted(rng.sample(["g0", "g1", "g2", "g3", "g4"], rng.randrange(0, 4))),
            "folders": sorted({f"d{rng.randrange(12)}" for _ in range(rng.randrange(0, 4))}),
            "meta": rng.choice(({"k": 1}, {"k": True}, {"k": 1.0, "z": "a"}, {"k": [1, "x"]})),
        }
        zone = rng.choice(("UTC", "Europe/Paris", "America/New_York"))
        instant = datetime.fromtimestamp(rng.choice(instants), UTC)
        out.append(
            {
                "principal": principal,
                "tenant": rng.choice(u.tenants),
                "roles": sorted(roles),
                "attributes": attributes,
                "turn_id": "bench-turn",
                "now": now_value(instant, zone),
            }
        )
    return out


# ------------------------------------------------------------------ requests


def _tail(rng: random.Random) -> list[str]:
    k = rng.choice((0, 1, 1, 2, 2, 3, 4))
    segs = [
        rng.choice(("src", "lib", "x", "d1", "d10", "secret", "v2", "a", "docs")) for _ in range(k)
    ]
    segs.append(
        rng.choice(
            (
                "notes.md",
                "a.txt",
                "m.py",
                "index.html",
                "rep2024-q1.csv",
                "README",
                "x.lock",
                "v3",
                "doc.mdx",
            )
        )
    )
    return segs


def _args(rng: random.Random, path: str) -> dict[str, Any]:
    args: dict[str, Any] = {"path": path}
    if rng.random() < 0.8:
        args["mode"] = rng.choice(("create", "append", "overwrite"))
    if rng.random() < 0.8:
        args["size"] = rng.choice((10, 4096, 4097, 65_536, 1_000_000, 5_000_000))
    if rng.random() < 0.5:
        args["tag"] = rng.choice(("frozen", "legal", "wip", "ok"))
    if rng.random() < 0.7:
        args["label"] = rng.choice(
            (
                "draft-1",
                "Private",
                "PRİVATE",
                "\uff30\uff32\uff29\uff36\uff21\uff34\uff25",
                "priv\u0430te",
                "public",
                "my draft",
            )
        )
    if rng.random() < 0.6:
        args["meta"] = rng.choice(({"k": 1}, {"k": True}, {"k": 1, "z": "a"}, {"k": [1, "x"]}))
    if rng.random() < 0.6:
        args["flag"] = rng.choice((True, False, "yes"))
    if rng.random() < 0.6:
        args["tags"] = sorted(rng.sample(["g0", "g1", "g2", "g3", "g5"], rng.randrange(0, 3)))
    if rng.random() < 0.5:
        args["dest"] = rng.choice(
            ("/out/t1/x", "/out/t2/y/z", "/srv/a", "out/t1/rel", "/out/../srv/b", "/out/t3/./q")
        )
    return args


def _noncanonical(rng: random.Random, path: str) -> str:
    segs = path.split("/")
    i = rng.randrange(1, len(segs))
    kind = rng.randrange(3)
    if kind == 0:
        segs.insert(i, ".")
    elif kind == 1:
        segs.insert(i, "")
    else:
        segs[i:i] = ["zz", ".."]
    return "/".join(segs)


@dataclass(frozen=True)
class LangRequest:
    """One call of the random workload."""

    tool: str
    args: dict[str, Any]
    context: dict[str, Any]
    context_key: str
    shape: str
    near_miss: bool = False


def candidates(
    rng: random.Random, u: Universe, rules: list[LangRule], population: list[dict[str, Any]]
) -> Iterator[tuple[str, dict[str, Any], dict[str, Any], str, bool]]:
    """Endless (tool, args, context, shape, near_miss) candidates."""
    prefixes = [r.pattern for r in rules if r.absolute]
    holders: dict[str, list[dict[str, Any]]] = {}
    for c in population:
        for name in c["roles"]:
            holders.setdefault(name, []).append(c)
    while True:
        ctx = rng.choice(population)
        me = ctx["principal"] or "nobody"
        action = rng.choice(PATH_ACTIONS)
        tool = f"ws.{action}"
        shape = rng.randrange(12)
        near = False
        if shape <= 3:
            # a deep path under a rule's literal prefix: meets several prefixes at once,
            # often by a caller holding the role the rule names
            rule = rng.choice(rules)
            pat = rule.pattern if rule.absolute else rng.choice(prefixes)
            key = _role_of(rule.when)
            if key is not None and key in holders and rng.random() < 0.6:
                ctx = rng.choice(holders[key])
                me = ctx["principal"] or "nobody"
                if rule.actions and set(rule.actions) <= set(PATH_ACTIONS):
                    action = rng.choice(rule.actions)
                    tool = f"ws.{action}"
            lits = []
            for s in pat:
                if s[0] != "lit":
                    break
                lits.append(s[1])
            path = "/" + "/".join(lits + _tail(rng))
            name = "deep"
        elif shape == 4:
            # a near miss of a prefix: p1 vs p10, one segment short
            p = list(u.prefix())
            if rng.random() < 0.5:
                p[-1] = p[-1] + str(rng.randrange(10))
            else:
                p = p[:-1] or ["nowhere"]
            path = "/" + "/".join(p + _tail(rng))
            name, near = "prefix-miss", True
        elif shape == 5:
            other = rng.choice(population)["principal"] or "x"
            path = "/home/" + rng.choice((me, other, me + "1")) + "/" + "/".join(_tail(rng))
            name = "home"
        elif shape == 6:
            t = f"team{rng.randrange(u.n_teams)}"
            who = rng.choice((me, me, "someone"))
            path = (
                f"/teams/{t}/{who}/"
                + rng.choice(("keep/", "", "x/"))
                + rng.choice(("a.txt", "b.md"))
            )
            name = "team"
        elif shape == 7:
            path = rng.choice(
                (
                    f"/u/{ctx['tenant']}/{me}/n.txt",
                    f"/u/{ctx['tenant']}/{me}/n.md",
                    f"/depts/{ctx['attributes']['dept']}/x/y",
                    f"/depts/dept{rng.randrange(8)}/a",
                    f"/drop/{me}-{rng.randrange(99)}",
                    f"/drop/{me}",
                    f"/shared/s{rng.randrange(3)}/d{rng.randrange(12)}/f.md",
                    f"/t/{ctx['tenant']}/pub/{rng.randrange(9)}",
                    f"/t/{ctx['tenant']}/priv",
                    f"/out/{ctx['tenant']}/z",
                )
            )
            name = "owner-holes"
        elif shape == 8:
            org = rng.choice((f"org{rng.randrange(max(2, u.n_teams))}", me, "orgx"))
            repo = rng.choice(("public-site", "secret-plans", "core", "r1"))
            yield "ws.repo_get", {"owner": org, "repo": repo}, ctx, "repo", False
            continue
        elif shape == 9:
            q = rng.choice((f"q{rng.randrange(5)}", "q1"))
            yield "ws.ticket_get", {"queue": q, "id": rng.randrange(1, 500)}, ctx, "ticket", False
            continue
        else:
            pat = rng.choice(prefixes)
            lits = []
            for s in pat:
                if s[0] != "lit":
                    break
                lits.append(s[1])
            path = "/" + "/".join(lits + _tail(rng)[-1:])
            name = "shallow"
        if rng.random() < 0.05:
            path = _noncanonical(rng, path)
            name += "-noncanonical"
        yield tool, _args(rng, path), ctx, name, near


def _role_of(cond: Expr | None) -> str | None:
    """The role a condition names first (``"R" in context.roles``), if any."""
    stack = [cond] if cond is not None else []
    while stack:
        e = stack.pop()
        if (
            e[0] == "cmp"
            and e[1] == "in"
            and e[3] == ("ref", "context", ("roles",))
            and e[2][0] == "lit"
        ):
            return str(e[2][1])
        if e[0] in ("and", "or"):
            stack.extend(reversed(e[1:]))
    return None


def balanced(
    cands: Iterable[tuple[str, dict[str, Any], dict[str, Any], str, bool]],
    n: int,
    label: Any,
    rng: random.Random,
) -> list[LangRequest]:
    """Exactly half allowed, half denied (as ``label`` says), shuffled."""
    want_allow = n // 2
    allows: list[LangRequest] = []
    denies: list[LangRequest] = []
    seen: set[str] = set()
    tries = 0
    for tool, args, ctx, shape, near in cands:
        tries += 1
        if tries > 400 * n + 20_000:
            raise RuntimeError(f"could not balance: {len(allows)} allows, {len(denies)} denies")
        key = json.dumps([tool, args, ctx], sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        allowed = label(tool, args, ctx)
        req = LangRequest(
            tool,
            args,
            ctx,
            cache_key(ctx),
            ("allow:" if allowed else "deny:") + shape,
            near and not allowed,
        )
        if allowed and len(allows) < want_allow:
            allows.append(req)
        elif not allowed and len(denies) < n - want_allow:
            denies.append(req)
        if len(allows) == want_allow and len(denies) == n - want_allow:
            break
    out = allows + denies
    rng.shuffle(out)
    return out


def build_random(n_rules: int, n_requests: int, seed: int) -> RandomWorkload:
    """The ``random`` workload for (N, requests, seed): a different policy for every seed."""
    from benchmarks.engines.langref import LangReference

    rng = random.Random(f"random:{n_rules}:{n_requests}:{seed}")
    rules, u = random_rules(rng, n_rules)
    wl = RandomWorkload(
        "random",
        NAMESPACE,
        dict(TOOLS),
        dict(RESOURCES),
        ACTIONS,
        dict(NAMED),
        rules,
        seed=seed,
        features={"roles": u.n_roles, "prefixes": len(u.prefixes)},
    )
    population = users(rng, u, max(400, n_requests // 2))
    ref = LangReference.from_workload(wl)
    wl.requests = balanced(candidates(rng, u, rules, population), n_requests, ref.allowed, rng)
    return wl
