"""A naive evaluator of the documented .sos semantics, and a seeded generator of
policies and requests for it (``test_naive_differential``).

Written from docs/policy-language.md alone, never from sharedos.policy: decisions
(forbid > approval-on-permit > permit > default deny, errors failing closed), every
condition form and function, ``path()`` and template resources (NFC as a whole, no
lone surrogates), glob patterns with ``**``, in-segment ``*`` and ``{context.x}``
holes (an unsafe value: a permit matches nothing, a forbid's segment any one).
The generator renders one random policy both as .sos text (with escapes, named
conditions, duplicate and near-duplicate rules, families of six or more rules that
differ by a role, a value, a bound or a segment) and as the structure ``decide``
reads, and draws requests with edge values: '..', '.', '//', trailing slashes,
NFD text, controls, lone surrogates, NaN, huge integers, wrong-typed context values.
"""

from __future__ import annotations

import functools
import math
import random
import unicodedata
import urllib.parse
from dataclasses import dataclass, field
from typing import Any


class Err(Exception):
    pass


MISSING = object()

# ---------------------------------------------------------------- values


def is_num(v: Any) -> bool:
    return type(v) in (int, float)


def eq(a: Any, b: Any) -> bool:
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    if a is None or b is None:
        return a is None and b is None
    if is_num(a) and is_num(b):
        if not (math.isfinite(a) and math.isfinite(b)):
            raise Err("nonfinite")
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False
        return all(eq(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return False
        return all(eq(a[k], b[k]) for k in a)
    if type(a) is str and type(b) is str:
        return a == b
    return False


def member(x: Any, lst: Any) -> bool:
    if not isinstance(lst, list):
        raise Err("in needs list")
    return any(eq(x, y) for y in lst)


def ref_lower(s: Any) -> str:
    if type(s) is not str:
        raise Err("lower")
    s = unicodedata.normalize("NFKC", s).replace("\u0130", "i").replace("\u0131", "i")
    return unicodedata.normalize("NFKC", s.casefold())


def is_ctrl(c: str) -> bool:
    o = ord(c)
    return o < 0x20 or 0x7F <= o <= 0x9F


def canon_path(v: Any) -> str:
    if type(v) is not str:
        raise Err("path not str")
    if not v.startswith("/") or len(v) > 4096:
        raise Err("relative/long")
    if any(is_ctrl(c) or 0xD800 <= ord(c) <= 0xDFFF for c in v):
        raise Err("ctrl")
    if unicodedata.normalize("NFC", v) != v:
        raise Err("nfc")
    out: list[str] = []
    for s in v.split("/"):
        if s in ("", "."):
            continue
        if s == "..":
            if not out:
                raise Err("above")
            out.pop()
        else:
            out.append(s)
    return "/" + "/".join(out)


def hole_value(v: Any) -> str:
    if type(v) is int:
        v = str(v)
    if type(v) is not str or v in ("", ".", ".."):
        raise Err("hole")
    if "/" in v or any(is_ctrl(c) or 0xD800 <= ord(c) <= 0xDFFF for c in v):
        raise Err("hole")
    if unicodedata.normalize("NFC", v) != v:
        raise Err("hole nfc")
    return v


def segment(s: Any, n: Any) -> str:
    if type(s) is not str or type(n) is not int:
        raise Err("seg")
    parts = [p for p in s.split("/") if p]
    if n == 0 or abs(n) > len(parts):
        raise Err("seg range")
    return parts[n - 1] if n > 0 else parts[n]


# ---------------------------------------------------------------- expressions
# ("lit", v) ("list", [e]) ("ref", root, [names]) ("has", root, [names])
# ("call", fn, [e]) ("cmp", op, l, r) ("in", l, r) ("notin", l, r) ("concat", [e])
# ("and", [e]) ("or", [e]) ("not", e) ("res",) ("act",) ("named", name)


def ev(e: tuple, env: dict[str, Any]) -> Any:
    k = e[0]
    if k == "lit":
        return e[1]
    if k == "list":
        return [ev(x, env) for x in e[1]]
    if k == "res":
        return env["resource"]
    if k == "act":
        return env["action"]
    if k == "named":
        return ev(env["named"][e[1]], env)
    if k in ("ref", "has"):
        v = env[e[1]]
        for n in e[2]:
            if not isinstance(v, dict) or n not in v:
                if k == "has":
                    return False
                raise Err("missing")
            v = v[n]
        return True if k == "has" else v
    if k == "call":
        a = [ev(x, env) for x in e[2]]
        f = e[1]
        if f in ("startswith", "endswith", "contains"):
            if type(a[0]) is not str or type(a[1]) is not str:
                raise Err(f)
            return {
                "startswith": a[0].startswith,
                "endswith": a[0].endswith,
                "contains": a[0].__contains__,
            }[f](a[1])
        if f == "lower":
            return ref_lower(a[0])
        if f == "path":
            return canon_path(a[0])
        if f == "segment":
            return segment(a[0], a[1])
        if f in ("any_in", "all_in"):
            if not isinstance(a[0], list) or not isinstance(a[1], list):
                raise Err(f)
            r = [member(x, a[1]) for x in a[0]]
            return any(r) if f == "any_in" else all(r)
        raise AssertionError(f)
    if k == "cmp":
        op = e[1]
        a, b = ev(e[2], env), ev(e[3], env)
        if op == "==":
            return eq(a, b)
        if op == "!=":
            return not eq(a, b)
        if not (is_num(a) and is_num(b)):
            raise Err("order")
        if not (math.isfinite(a) and math.isfinite(b)):
            raise Err("nonfinite")
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    if k == "in":
        return member(ev(e[1], env), ev(e[2], env))
    if k == "notin":
        return not member(ev(e[1], env), ev(e[2], env))
    if k == "concat":
        parts = [ev(x, env) for x in e[1]]
        if any(type(p) is not str for p in parts):
            raise Err("concat")
        return "".join(parts)
    if k in ("and", "or"):
        for x in e[1]:
            v = ev(x, env)
            if type(v) is not bool:
                raise Err("not bool")
            if v is (k == "or"):
                return v
        return k == "and"
    if k == "not":
        v = ev(e[1], env)
        if type(v) is not bool:
            raise Err("not bool")
        return not v
    raise AssertionError(k)


def truth(e: tuple, env: dict[str, Any]) -> bool | None:
    """True / False / None (error)."""
    try:
        v = ev(e, env)
    except Err:
        return None
    if type(v) is not bool:
        return None
    return v


# ---------------------------------------------------------------- render


def q(s: str, rng: random.Random | None = None, escape: float = 0.0) -> str:
    out = ['"']
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif is_ctrl(c) or unicodedata.category(c) in ("Cf", "Zl", "Zp"):
            out.append(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}")
        elif rng is not None and c not in "*{}" and rng.random() < escape:
            r = rng.random()
            if c == "/" and r < 0.5:
                out.append("\\/")
            elif r < 0.8 or ord(c) >= 0x10000:
                out.append(f"\\U{ord(c):08x}" if ord(c) >= 0x10000 else f"\\u{ord(c):04x}")
            else:
                out.append(f"\\U{ord(c):08x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def rv(v: Any) -> str:
    if v is True:
        return "true"
    if v is False:
        return "false"
    if type(v) is int:
        return str(v)
    if type(v) is float:
        return repr(v)
    if type(v) is str:
        return q(v)
    raise AssertionError(v)


def ro(e: tuple) -> str:
    t = render(e)
    if e[0] in ("cmp", "in", "notin", "has", "not", "concat"):
        return "(" + t + ")"
    return t


def render(e: tuple) -> str:
    k = e[0]
    if k == "lit":
        return rv(e[1])
    if k == "list":
        return "[" + ", ".join(render(x) for x in e[1]) + "]"
    if k == "res":
        return "resource"
    if k == "act":
        return "action"
    if k == "named":
        return e[1]
    if k == "ref":
        return ".".join([e[1], *e[2]])
    if k == "has":
        return "has " + ".".join([e[1], *e[2]])
    if k == "call":
        return e[1] + "(" + ", ".join(render(x) for x in e[2]) + ")"
    if k == "cmp":
        return f"{ro(e[2])} {e[1]} {ro(e[3])}"
    if k == "in":
        return f"{ro(e[1])} in {ro(e[2])}"
    if k == "notin":
        return f"{ro(e[1])} not in {ro(e[2])}"
    if k == "concat":
        return " + ".join(ro(x) for x in e[1])
    if k in ("and", "or"):
        return "(" + f" {k} ".join(render(x) for x in e[1]) + ")"
    if k == "not":
        return "not (" + render(e[1]) + ")"
    raise AssertionError(k)


# ---------------------------------------------------------------- patterns


def pat_match(pat: str, resource: str, ctx: dict[str, Any], forbid: bool) -> bool:
    absolute = pat.startswith("/")
    if absolute != resource.startswith("/"):
        return False
    psegs = [s for s in pat.split("/")][1 if absolute else 0 :]
    if pat == "/":
        psegs = []
    rsegs = resource.split("/")[1 if absolute else 0 :]
    if resource == "/":
        rsegs = []
    # each pattern segment -> matcher
    ms: list[Any] = []
    for s in psegs:
        if s == "**":
            ms.append("**")
            continue
        # split into literal / star / hole parts
        parts: list[tuple[str, str]] = []
        i = 0
        unsafe = False
        while i < len(s):
            c = s[i]
            if c == "*":
                parts.append(("star", ""))
                i += 1
            elif c == "{":
                j = s.index("}", i)
                name = s[i + 1 : j]
                assert name.startswith("context.")
                v: Any = ctx
                ok = True
                for n in name.split(".")[1:]:
                    if not isinstance(v, dict) or n not in v:
                        ok = False
                        break
                    v = v[n]
                try:
                    if not ok:
                        raise Err("missing")
                    hv = hole_value(v)
                    if "*" in hv:
                        raise Err("star")
                    parts.append(("lit", hv))
                except Err:
                    unsafe = True
                i = j + 1
            else:
                parts.append(("lit", c))
                i += 1
        if unsafe:
            if not forbid:
                return False
            ms.append(("any",))
        else:
            ms.append(("seg", parts))

    def seg_ok(m: Any, seg: str) -> bool:
        if m[0] == "any":
            return seg != ""
        parts = m[1]
        if parts == [("star", "")]:
            return seg != ""

        # wildcard match
        def go(pi: int, si: int) -> bool:
            if pi == len(parts):
                return si == len(seg)
            kind, val = parts[pi]
            if kind == "lit":
                return seg.startswith(val, si) and go(pi + 1, si + len(val))
            return any(go(pi + 1, t) for t in range(si, len(seg) + 1))

        return go(0, 0)

    @functools.cache
    def m(i: int, j: int) -> bool:
        if i == len(ms):
            return j == len(rsegs)
        if ms[i] == "**":
            return any(m(i + 1, t) for t in range(j, len(rsegs) + 1))
        return j < len(rsegs) and seg_ok(ms[i], rsegs[j]) and m(i + 1, j + 1)

    return m(0, 0)


# ---------------------------------------------------------------- policy model


@dataclass
class Rule:
    rid: str
    effect: str  # permit forbid approval
    ns: str
    actions: list[str] | None  # None = *
    pattern: str  # decoded pattern text
    pattern_src: str  # rendered
    when: tuple | None = None
    unless: tuple | None = None
    approvers: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Req:
    tool: str
    ns: str
    action: str
    kind: str  # path / template
    arg: str = ""
    template: str = ""  # with {args.x}


REQS = [
    Req("files.read", "files", "read", "path", arg="path"),
    Req("files.write", "files", "write", "path", arg="path"),
    Req("files.delete", "files", "delete", "path", arg="target"),
    Req("gh.get", "gh", "read", "template", template="{args.owner}/{args.repo}"),
    Req("gh.put", "gh", "write", "template", template="{args.name}"),
    Req("gh.admin", "gh", "admin", "template", template="org-{args.owner}/x/{args.repo}"),
    Req("gh.pre", "gh", "admin", "template", template="cafe{args.owner}{args.repo}"),
]
NS_ACTIONS = {"files": ["read", "write", "delete"], "gh": ["read", "write", "admin"]}


def resolve(req: Req, args: Any) -> str:
    if not isinstance(args, dict):
        raise Err("args")
    if req.kind == "path":
        if req.arg not in args:
            raise Err("missing")
        return canon_path(args[req.arg])
    out = []
    t = req.template
    i = 0
    while i < len(t):
        if t[i] == "{":
            j = t.index("}", i)
            name = t[i + 1 : j].split(".", 1)[1]
            if name not in args:
                raise Err("missing")
            hv = hole_value(args[name])
            if url_unsafe(hv):
                raise Err("hole url")
            out.append(hv)
            i = j + 1
        else:
            out.append(t[i])
            i += 1
    res = "".join(out)
    if any(url_unsafe(seg) for seg in res.split("/")):
        raise Err("segment url")
    if unicodedata.normalize("NFC", res) != res:
        raise Err("nfc")
    return res


def url_unsafe(seg: str) -> bool:
    """docs/policy-language.md: to a URL, a '\\', '?' or '#', or a percent-escape of a
    separator, a control character or a dot segment."""
    if "\\" in seg or "?" in seg or "#" in seg:
        return True
    decoded = urllib.parse.unquote(seg, errors="replace")
    return (
        decoded in (".", "..")
        or "/" in decoded
        or "\\" in decoded
        or any(is_ctrl(c) for c in decoded)
    )


def decide(
    rules: list[Rule], named: dict[str, dict[str, tuple]], tool: str, args: Any, ctx: dict[str, Any]
) -> tuple[str, str, frozenset[str]]:
    req = next((r for r in REQS if r.tool == tool), None)
    if req is None:
        return ("deny", "tool_unavailable", frozenset())
    try:
        res = resolve(req, args)
    except Err:
        return ("deny", "unresolvable_resource", frozenset())
    env = {
        "context": ctx,
        "args": args,
        "resource": res,
        "action": req.action,
        "named": named.get(req.ns, {}),
    }
    forbids, permits, approvals = [], [], []
    for r in rules:
        if r.ns != req.ns:
            continue
        if r.actions is not None and req.action not in r.actions:
            continue
        failclosed = r.effect != "permit"
        if not pat_match(r.pattern, res, ctx, failclosed):
            continue
        applies = True
        if r.when is not None:
            t = truth(r.when, env)
            if t is None:
                applies = failclosed
                if not applies:
                    continue
                # forbid: error -> applies (don't look at unless? fail closed: applies)
                (forbids if r.effect == "forbid" else approvals).append(r.rid)
                continue
            applies = t
        if not applies:
            continue
        if r.unless is not None:
            t = truth(r.unless, env)
            applies = failclosed if t is None else not t
        if not applies:
            continue
        {"permit": permits, "forbid": forbids, "approval": approvals}[r.effect].append(r.rid)
    if forbids:
        return ("deny", "forbidden", frozenset(forbids))
    if permits and approvals:
        return ("approval_required", "approval_required", frozenset(approvals + permits))
    if permits:
        return ("allow", "allowed", frozenset(permits))
    return ("deny", "no_matching_permit", frozenset())


# ---------------------------------------------------------------- generator

LITS = [
    "a",
    "b",
    "pub",
    "x.txt",
    "data",
    "é",
    "日本",
    "a*b",
    "{",
    "}",
    "%2e%2e",
    "v7",
    "\\",
    "home",
    "Priv",
]
CTX_STRS = [
    "alice",
    "bob",
    "a",
    "pub",
    "x.txt",
    "a*",
    "*",
    "a/b",
    "..",
    ".",
    "",
    "é",
    "e\u0301",
    "Ａ",
    "t1",
    "t2",
    "t3",
    "{x}",
    "a b",
    "\u0000",
    "-1",
    "v7",
]
ROLES = ["admin", "dev", "editor", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "maint", "", "É"]


class Gen:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n = 0

    def choice(self, xs: list[Any]) -> Any:
        return self.rng.choice(xs)

    def seg_text(self, hole_ok: bool) -> str:
        r = self.rng.random()
        if r < 0.35:
            return self.choice(
                [
                    "a",
                    "b",
                    "pub",
                    "x.txt",
                    "data",
                    "é",
                    "日本",
                    "%2e%2e",
                    "v7",
                    "home",
                    "Priv",
                    "a b",
                    "-",
                ]
            )
        if r < 0.5:
            return "*"
        if r < 0.6:
            return self.choice(["pre*", "*.txt", "a*b", "*a*", "x*", "*7", "**x"[1:]])
        if r < 0.75 and hole_ok:
            h = self.choice(
                [
                    "{context.principal}",
                    "{context.tenant}",
                    "{context.attributes.team}",
                    "{context.attributes.n}",
                    "{context.roles}",
                    "{context.attributes.missing}",
                ]
            )
            if self.rng.random() < 0.2:
                h = self.choice(["x", "pre-", ""]) + h + self.choice(["", ".d", "-s"])
                if h.startswith("{") and h.endswith("}"):
                    pass
            return h
        return self.choice(["a", "b", "pub", "data", "home", "v7"])

    def pattern(self, absolute: bool, prefix: list[str] | None = None) -> str:
        segs = list(prefix or [])
        for _ in range(self.rng.randint(0, 3)):
            if self.rng.random() < 0.2:
                segs.append("**")
            else:
                segs.append(self.seg_text(True))
        if self.rng.random() < 0.5 and (not segs or segs[-1] != "**"):
            segs.append("**")
        # no two ** adjacent? allowed presumably; keep simple
        cleaned = []
        for s in segs:
            if s == "**" and cleaned and cleaned[-1] == "**":
                continue
            cleaned.append(s)
        if absolute:
            return "/" + "/".join(cleaned)
        if not cleaned:
            cleaned = ["**"]
        return "/".join(cleaned)

    # expressions
    def ref(self) -> tuple:
        return self.choice(
            [
                ("ref", "context", ["principal"]),
                ("ref", "context", ["tenant"]),
                ("ref", "context", ["roles"]),
                ("ref", "context", ["attributes", "team"]),
                ("ref", "context", ["attributes", "n"]),
                ("ref", "context", ["attributes", "folders"]),
                ("ref", "context", ["attributes", "ok"]),
                ("ref", "context", ["attributes", "obj", "k"]),
                ("ref", "args", ["mode"]),
                ("ref", "args", ["n"]),
                ("ref", "args", ["flag"]),
                ("ref", "args", ["tags"]),
                ("ref", "args", ["owner"]),
                ("res",),
                ("act",),
            ]
        )

    def strlit(self) -> tuple:
        return (
            "lit",
            self.choice(
                [
                    "#x",
                    'q"q',
                    "b\\s",
                    "\u2028",
                    "x",
                    "y",
                    "alice",
                    "t1",
                    "t2",
                    "admin",
                    "dev",
                    "pub",
                    "/pub/",
                    ".txt",
                    "a",
                    "",
                    "é",
                    "e\u0301",
                    "private",
                    "*",
                    "read",
                    "write",
                    "v7",
                ]
            ),
        )

    def numlit(self) -> tuple:
        return (
            "lit",
            self.choice([0, 1, 3, -1, 1.0, 2.5, 9007199254740992, 9223372036854775807, 1e300, 10]),
        )

    def atom(self, depth: int) -> tuple:
        r = self.rng.random()
        if r < 0.12:
            return ("in", self.strlit(), ("ref", "context", ["roles"]))
        if r < 0.17:
            return ("notin", ("lit", self.choice(ROLES[:8])), ("ref", "context", ["roles"]))
        if r < 0.27:
            lhs = self.ref()
            if lhs[0] in ("res", "act"):
                return ("cmp", self.choice(["==", "!="]), lhs, self.strlit())
            return (
                "cmp",
                self.choice(["==", "!="]),
                lhs,
                self.choice([self.strlit(), self.numlit(), ("lit", True), ("lit", False)]),
            )
        if r < 0.35:
            return (
                "cmp",
                self.choice(["<", "<=", ">", ">="]),
                self.choice([("ref", "args", ["n"]), ("ref", "context", ["attributes", "n"])]),
                self.numlit(),
            )
        if r < 0.42:
            return (
                "in",
                self.choice([self.ref(), ("ref", "args", ["mode"])]),
                (
                    "list",
                    [
                        self.choice([self.strlit(), self.numlit(), ("lit", True)])
                        for _ in range(self.rng.randint(0, 3))
                    ],
                ),
            )
        if r < 0.47:
            return (
                "has",
                self.choice(["args", "context"]),
                self.choice(
                    [["mode"], ["n"], ["attributes", "team"], ["attributes", "obj", "k"], ["flag"]]
                ),
            )
        if r < 0.57:
            f = self.choice(["startswith", "endswith", "contains"])
            return (
                "call",
                f,
                [
                    self.choice(
                        [
                            ("res",),
                            ("ref", "args", ["mode"]),
                            ("call", "lower", [("res",)]),
                            ("call", "path", [("ref", "args", ["path"])]),
                        ]
                    ),
                    self.strlit(),
                ],
            )
        if r < 0.65:
            return (
                "cmp",
                "==",
                (
                    "call",
                    "segment",
                    [
                        self.choice([("res",), ("call", "path", [("ref", "args", ["path"])])]),
                        ("lit", self.choice([1, 2, -1, 3])),
                    ],
                ),
                self.strlit(),
            )
        if r < 0.7:
            return (
                "in",
                ("call", "segment", [("res",), ("lit", self.choice([1, 2, -1]))]),
                ("ref", "context", ["attributes", "folders"]),
            )
        if r < 0.75:
            return (
                "cmp",
                "==",
                (
                    "call",
                    "lower",
                    [self.choice([("ref", "args", ["mode"]), ("ref", "context", ["principal"])])],
                ),
                self.strlit(),
            )
        if r < 0.8:
            f = self.choice(["any_in", "all_in"])
            return (
                "call",
                f,
                [
                    self.choice([("ref", "context", ["roles"]), ("ref", "args", ["tags"])]),
                    (
                        "list",
                        [("lit", x) for x in self.rng.sample(ROLES[:8], self.rng.randint(0, 3))],
                    ),
                ],
            )
        if r < 0.84:
            return (
                "cmp",
                "==",
                (
                    "concat",
                    [
                        ("ref", "context", ["tenant"]),
                        ("lit", "/"),
                        ("ref", "context", ["principal"]),
                    ],
                ),
                ("lit", self.choice(["t1/alice", "default/bob", "t1/"])),
            )
        if r < 0.87:
            return (
                "cmp",
                "==",
                ("act",),
                ("lit", self.choice(["read", "write", "admin", "delete"])),
            )
        if r < 0.9:
            return self.choice(
                [
                    ("lit", True),
                    ("lit", False),
                    ("ref", "args", ["flag"]),
                    ("ref", "context", ["attributes", "ok"]),
                ]
            )
        if r < 0.93:
            return (
                "cmp",
                self.choice(["==", "!="]),
                self.choice([("ref", "context", ["roles"]), ("ref", "args", ["tags"])]),
                (
                    "list",
                    [
                        ("lit", x)
                        for x in self.rng.sample(
                            ["admin", "dev", 1, True, "r1"], self.rng.randint(0, 2)
                        )
                    ],
                ),
            )
        if r < 0.915:
            a = self.atom(0)
            return self.choice(
                [
                    (
                        "cmp",
                        self.choice(["==", "!="]),
                        a,
                        self.choice([("lit", True), ("lit", False), self.atom(0)]),
                    ),
                    ("in", a, ("list", [("lit", True)])),
                    ("cmp", "==", ("not", a), ("lit", False)),
                    ("in", self.strlit(), ("list", [self.ref(), ("lit", "x")])),
                ]
            )
        if r < 0.95 and self.named_names:
            return ("named", self.choice(self.named_names))
        if depth > 0:
            return self.expr(depth - 1)
        return ("in", self.strlit(), ("ref", "context", ["roles"]))

    def expr(self, depth: int = 2) -> tuple:
        r = self.rng.random()
        if depth > 0 and r < 0.2:
            return ("and", [self.atom(depth - 1) for _ in range(self.rng.randint(2, 3))])
        if depth > 0 and r < 0.35:
            return ("or", [self.atom(depth - 1) for _ in range(self.rng.randint(2, 3))])
        if depth > 0 and r < 0.42:
            return ("not", self.atom(depth - 1))
        return self.atom(depth)

    def family_cond(self, i: int, kind: str) -> tuple:
        # conditions that trigger value keys / role buckets
        if kind == "lowersegpath":
            return (
                "cmp",
                "==",
                (
                    "call",
                    "lower",
                    [
                        (
                            "call",
                            "segment",
                            [
                                ("call", "path", [("ref", "args", ["path"])]),
                                ("lit", self.choice([1, 2, -1])),
                            ],
                        )
                    ],
                ),
                ("lit", f"m{i}"),
            )
        if kind == "numin":
            return (
                "in",
                ("ref", "args", ["n"]),
                ("list", [("lit", i), ("lit", float(i + 1)), ("lit", f"{i}")]),
            )
        if kind == "tenant":
            return ("cmp", "==", ("ref", "context", ["tenant"]), ("lit", f"t{i}"))
        if kind == "role":
            return ("in", ("lit", ROLES[i % len(ROLES)]), ("ref", "context", ["roles"]))
        if kind == "mode":
            return (
                "cmp",
                "==",
                ("ref", "args", ["mode"]),
                self.choice([("lit", f"m{i}"), ("lit", i), ("lit", float(i))]),
            )
        if kind == "modein":
            return (
                "in",
                ("ref", "args", ["mode"]),
                ("list", [("lit", f"m{i}"), ("lit", f"m{i + 1}")]),
            )
        if kind == "seg":
            return (
                "cmp",
                "==",
                ("call", "segment", [("call", "path", [("ref", "args", ["path"])]), ("lit", 2)]),
                ("lit", f"m{i}"),
            )
        if kind == "lowerseg":
            return (
                "cmp",
                "==",
                ("call", "lower", [("call", "segment", [("res",), ("lit", -1)])]),
                ("lit", f"m{i}"),
            )
        if kind == "starts":
            return ("call", "startswith", [("ref", "args", ["mode"]), ("lit", "m" * (i % 3 + 1))])
        if kind == "ends":
            return ("call", "endswith", [("res",), ("lit", f"{i}" + "x" * (i % 2))])
        if kind == "bound":
            return (
                "cmp",
                self.choice(["<", "<=", ">", ">="]),
                ("ref", "args", ["n"]),
                ("lit", self.choice([i, i + 0.5, -i, 2**53 + i])),
            )
        if kind == "boundr":
            return (
                "cmp",
                self.choice(["<", "<=", ">", ">="]),
                ("lit", i),
                ("ref", "context", ["attributes", "n"]),
            )
        if kind == "attrin":
            return ("in", ("lit", f"m{i}"), ("ref", "context", ["attributes", "folders"]))
        if kind == "anyin":
            return (
                "call",
                "any_in",
                [
                    ("ref", "context", ["roles"]),
                    ("list", [("lit", ROLES[i % 7]), ("lit", ROLES[(i + 3) % 7])]),
                ],
            )
        if kind == "or":
            return (
                "or",
                [
                    ("cmp", "==", ("ref", "context", ["tenant"]), ("lit", f"t{i}")),
                    ("cmp", "==", ("ref", "context", ["tenant"]), ("lit", f"t{i + 1}")),
                ],
            )
        if kind == "orrole":
            return (
                "or",
                [
                    ("in", ("lit", ROLES[i % 7]), ("ref", "context", ["roles"])),
                    ("in", ("lit", ROLES[(i + 2) % 7]), ("ref", "context", ["roles"])),
                ],
            )
        if kind == "notrole":
            return ("notin", ("lit", ROLES[i % len(ROLES)]), ("ref", "context", ["roles"]))
        raise AssertionError(kind)

    def policy(self) -> tuple[str, list[Rule], dict[str, dict[str, tuple]]]:
        rng = self.rng
        rules: list[Rule] = []
        named: dict[str, dict[str, tuple]] = {"files": {}, "gh": {}}
        lines: list[str] = []
        body: dict[str, list[str]] = {"files": [], "gh": []}
        self.named_names = []
        for ns in ("files", "gh"):
            self.named_names = []
            for j in range(rng.randint(0, 2)):
                nm = f"c{j}"
                e = self.expr(1)
                named[ns][nm] = e
                body[ns].append(f"condition {nm} = {render(e)}")
                self.named_names.append(nm)
            named_here = list(self.named_names)
            nrules = rng.randint(1, 14)
            fam_n = rng.random()
            specs: list[tuple[str, str | None, tuple | None, tuple | None]] = []
            absolute = ns == "files"
            for _ in range(nrules):
                eff = self.choice(
                    ["permit", "permit", "forbid", "approval"]
                    if rng.random() < 0.2
                    else ["permit", "permit", "forbid"]
                )
                absolute_p = absolute if rng.random() < 0.95 else not absolute
                pat = self.pattern(absolute_p)
                w = self.expr() if rng.random() < 0.5 else None
                u = self.expr() if rng.random() < 0.25 else None
                specs.append((eff, pat, w, u))
            # families on one prefix
            for _ in range(rng.randint(0, 2) if fam_n < 0.8 else 0):
                kind = self.choice(
                    [
                        "sure",
                        "sure",
                        "lowersegpath",
                        "numin",
                        "tenant",
                        "role",
                        "mode",
                        "modein",
                        "seg",
                        "lowerseg",
                        "starts",
                        "ends",
                        "bound",
                        "boundr",
                        "attrin",
                        "anyin",
                        "or",
                        "orrole",
                        "notrole",
                        "plain",
                    ]
                )
                pre = [
                    self.choice(["a", "pub", "data", "{context.principal}", "*"])
                    for _ in range(rng.randint(0, 2))
                ]
                eff = self.choice(["permit", "forbid", "permit"])
                size = rng.randint(3, 14)
                for i in range(size):
                    if rng.random() < 0.1:
                        eff = self.choice(["permit", "forbid"])
                    tail = self.choice(
                        [
                            ["*", f"m{i}", "**"],
                            ["**", f"m{i}"],
                            ["**", f"m{i}", "**"],
                            [f"m{i}*", "*"],
                            ["*", f"*{i}x"],
                            ["**"],
                            ["*", "v7", "**"],
                            ["**", "v7"],
                            [f"*.m{i}"],
                            [f"m{i}*", "**"],
                            ["**", f"*.m{i}"],
                            ["**", "v7", "**"],
                            [self.choice(["m1", "m2", "m3"]), "**"],
                            [],
                        ]
                    )
                    segs = pre + tail
                    pat = ("/" if absolute else "") + "/".join(segs)
                    if not absolute and not segs:
                        pat = "**"
                    if absolute and not segs:
                        pat = "/**"
                    if kind == "sure":
                        pat = (
                            ("/" if absolute else "") + "/".join([*pre, "**"])
                            if pre or not absolute
                            else "/**"
                        )
                        if not absolute and not pre:
                            pat = "**"
                        w = u = None
                        r0 = rng.random()
                        if r0 < 0.4:
                            u = self.family_cond(i, "role")
                        elif r0 < 0.7:
                            w = self.family_cond(i, "role")
                        elif r0 < 0.8:
                            w = self.family_cond(i, "notrole")
                    elif kind == "plain":
                        w = None
                        u = self.family_cond(i, "role") if rng.random() < 0.5 else None
                    else:
                        c = self.family_cond(i, kind)
                        if rng.random() < 0.3:
                            c = (
                                ("and", [c, self.atom(0)])
                                if rng.random() < 0.5
                                else ("and", [self.atom(0), c])
                            )
                        w, u = (c, None) if rng.random() < 0.8 else (None, c)
                    specs.append((eff, pat, w, u))
            # duplicates and near-duplicates
            if specs and rng.random() < 0.3:
                e, p, w, u = self.choice(specs)
                specs.append((e, p, w, u))
                specs.append((self.choice(["permit", "forbid"]), p, self.expr(), u))
            rng.shuffle(specs)
            for eff, pat, w, u in specs:
                self.n += 1
                rid = f"r{self.n}"
                acts = None if rng.random() < 0.4 else rng.sample(NS_ACTIONS[ns], rng.randint(1, 3))
                act_s = "*" if acts is None else ", ".join(acts)
                line = f'@id("{rid}")\n'
                if eff == "approval":
                    line += f'require approval by role "maint" for {act_s} on {q(pat, rng, 0.1)}'
                else:
                    line += f"{eff} {act_s} on {q(pat, rng, 0.1)}"
                if w is not None:
                    line += " when " + render(w)
                if u is not None:
                    line += " unless " + render(u)
                body[ns].append(line)
                rules.append(Rule(rid, eff, ns, acts, pat, "", w, u))
            self.named_names = named_here
        reqs = {
            "files": [
                "requirement files.read { action read; resource path(args.path) }",
                "requirement files.write { action write; resource path(args.path) }",
                "requirement files.delete { action delete; resource path(args.target) }",
            ],
            "gh": [
                'requirement gh.get { action read; resource "{args.owner}/{args.repo}" }',
                "requirement gh.put { action write; resource args.name }",
                'requirement gh.admin { action admin; resource "org-{args.owner}/x/{args.repo}" }',
                'requirement gh.pre { action admin; resource "cafe{args.owner}{args.repo}" }',
            ],
        }
        for ns in ("files", "gh"):
            lines.append(f"namespace {ns}")
            lines.extend(reqs[ns])
            lines.extend(body[ns])
        return "\n".join(lines) + "\n", rules, named

    # requests
    def ctx(self) -> dict[str, Any]:
        rng = self.rng
        c: dict[str, Any] = {}
        c["principal"] = (
            self.choice([*CTX_STRS, 5, -3, True, ["alice"], None])
            if rng.random() < 0.3
            else self.choice(["alice", "bob", "a", "pub", "m1"])
        )
        c["tenant"] = (
            self.choice(["default", "t1", "t2", "t3", "t4", "t0", "t7", "t8"])
            if rng.random() < 0.85
            else self.choice([*CTX_STRS, 1])
        )
        if rng.random() < 0.9:
            c["roles"] = rng.sample(ROLES, rng.randint(0, 4))
            if rng.random() < 0.1:
                c["roles"] = c["roles"] + c["roles"]
        else:
            c["roles"] = self.choice(
                ["admin", 1, None, [1, "admin"], [True], {"admin": True}, ["admin", ["dev"]]]
            )
        at: dict[str, Any] = {}
        if rng.random() < 0.7:
            at["team"] = self.choice([*CTX_STRS, 1, 2.0, ["a"], True, None, {"x": 1}])
        if rng.random() < 0.7:
            at["n"] = self.choice(
                [
                    float("nan"),
                    float("inf"),
                    [float("nan")],
                    0,
                    1,
                    2,
                    3,
                    5,
                    8,
                    -1,
                    2.5,
                    1.0,
                    True,
                    False,
                    "3",
                    None,
                    2**53,
                    2**53 + 1,
                    2**63,
                    10**30,
                    1e300,
                    -0.0,
                    [1],
                ]
            )
        if rng.random() < 0.5:
            at["folders"] = self.choice(
                [["m1", "m2"], [], ["pub", "a"], "m1", [1, "m3"], ["m5", "x.txt", "v7"], None]
            )
        if rng.random() < 0.4:
            at["ok"] = self.choice([True, False, 1, "true", None])
        if rng.random() < 0.3:
            at["obj"] = self.choice([{"k": "x"}, {"k": 1}, {}, "k", [1]])
        c["attributes"] = at if rng.random() < 0.95 else self.choice([None, "x", [at]])
        if rng.random() < 0.1:
            del c["attributes"]
        return c

    def path(self) -> str:
        rng = self.rng
        segs = []
        bad = rng.random() < 0.3
        for _ in range(rng.randint(0, 5)):
            if not bad:
                segs.append(
                    self.choice(
                        [
                            "a",
                            "b",
                            "pub",
                            "data",
                            "x.txt",
                            "v7",
                            "m1",
                            "m2",
                            "m3",
                            "m4",
                            "m5",
                            "alice",
                            "bob",
                            "home",
                            "t1",
                            "m1.txt",
                            "y.m3",
                            "m2x",
                            "pre",
                            "preX",
                            "é",
                            "a*b",
                            "x",
                        ]
                    )
                )
                continue
            segs.append(
                self.choice(
                    [
                        "a",
                        "b",
                        "pub",
                        "data",
                        "x.txt",
                        "v7",
                        "m1",
                        "m2",
                        "m3",
                        "m4",
                        "m5",
                        "1x",
                        "3",
                        "home",
                        "alice",
                        "bob",
                        "é",
                        "e\u0301",
                        "日本",
                        "..",
                        ".",
                        "",
                        "a*b",
                        "*",
                        "{",
                        "preX",
                        "pre",
                        "%2e%2e",
                        "Priv",
                        "PRİV",
                        "ａ",
                        "x\u0000",
                        "a b",
                        "t1",
                        "m1.txt",
                        "y.m3",
                        "m2x",
                        "-",
                        "\\",
                        "\ud800",
                    ]
                )
            )
        p = "/" + "/".join(segs)
        r = rng.random()
        if r < 0.1:
            p += "/"
        elif r < 0.13:
            p = p.lstrip("/")
        elif r < 0.16:
            p = "//" + p
        elif r < 0.17:
            p = "/" + "a/" * 2100
        return p

    def hole(self) -> Any:
        if self.rng.random() < 0.7:
            return self.choice(
                [
                    "a",
                    "pub",
                    "alice",
                    "m1",
                    "m2",
                    "v7",
                    "x",
                    "data",
                    "b",
                    "x.txt",
                    "3",
                    "bob",
                    "\u0301",
                    "\u0301s",
                    "é",
                ]
            )
        return self.choice(
            [
                "a",
                "pub",
                "alice",
                "m1",
                "m2",
                "v7",
                "x",
                "a*b",
                "*",
                "..",
                ".",
                "",
                "a/b",
                "é",
                "e\u0301",
                5,
                -1,
                0,
                True,
                1.5,
                None,
                ["a"],
                "{x}",
                "x\u0000",
                "org-a",
                "data",
                "b",
                "x.txt",
                "3",
            ]
        )

    def args(self, tool: str) -> Any:
        rng = self.rng
        a: dict[str, Any] = {}
        if tool.startswith("files."):
            key = "target" if tool == "files.delete" else "path"
            if rng.random() < 0.95:
                a[key] = (
                    self.path() if rng.random() < 0.95 else self.choice([1, None, ["/a"], True])
                )
            if rng.random() < 0.3:
                a["path" if key == "target" else "target"] = self.path()
        else:
            for k in ("owner", "repo", "name"):
                if rng.random() < 0.97:
                    a[k] = self.hole()
        if rng.random() < 0.6:
            a["mode"] = self.choice(
                [
                    float("nan"),
                    [float("inf")],
                    "x",
                    "y",
                    "m1",
                    "m2",
                    "m3",
                    "m4",
                    "mm",
                    "mmm",
                    "M1",
                    "m",
                    "",
                    1,
                    2,
                    3.0,
                    True,
                    None,
                    ["m1"],
                    "Ｍ1",
                    "m1x",
                ]
            )
        if rng.random() < 0.5:
            a["n"] = self.choice(
                [
                    float("nan"),
                    float("inf"),
                    -float("inf"),
                    0,
                    1,
                    2,
                    3,
                    4,
                    5,
                    6,
                    2.5,
                    3.5,
                    -1,
                    -2,
                    True,
                    False,
                    "3",
                    None,
                    2**53,
                    2**53 + 1,
                    2**53 + 3,
                    2**63,
                    10**30,
                    1e300,
                    -0.0,
                    [1],
                ]
            )
        if rng.random() < 0.3:
            a["flag"] = self.choice([True, False, 1, 0, "true", None])
        if rng.random() < 0.3:
            a["tags"] = self.choice(
                [["admin"], [], ["dev", "r1"], "admin", [1], [True], ["admin", 1]]
            )
        return a

    def request(self) -> tuple[str, Any, dict[str, Any]]:
        tool = self.choice([r.tool for r in REQS] * 8 + ["files.nope", "nope"])
        return tool, self.args(tool), self.ctx()
