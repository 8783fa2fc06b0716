"""Decisions agree with an independent reference evaluator written from
docs/policy-language.md, on generated policies and calls (hypothesis).

The reference below knows nothing of SharedOS's code: it reads the
generator's own expression tree and implements, as the reference page states
them, the constructs issue 23 touched: equality (booleans never equal
numbers, at any depth; objects key by key), orderings and equality with a
non-finite number (an error), ``has``, ``lower`` (the caseless key), ``segment``
(out of range is an error), ``path()`` in a condition, NFC resources, and
``context.now``; plus the decision rules (forbid overrides permit, default
deny, an error makes a permit not apply and a forbid apply).
"""

from __future__ import annotations

import json
import math
import unicodedata
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharedos.policy import compile_source
from sharedos.policy.clock import expand


class Err(Exception):
    """An evaluation error (the rule is indeterminate)."""


# ------------------------------------------------------------------ reference

MISSING = object()


def ref_path(value: Any) -> str:
    """path(): docs, "path() canonicalization"."""
    if type(value) is not str:
        raise Err("not a string")
    if not value.startswith("/") or len(value) > 4096:
        raise Err("relative or too long")
    for ch in value:
        o = ord(ch)
        if o < 0x20 or 0x7F <= o <= 0x9F or 0xD800 <= o <= 0xDFFF:
            raise Err("control character")
    if unicodedata.normalize("NFC", value) != value:
        raise Err("not NFC")
    out: list[str] = []
    for seg in value.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if not out:
                raise Err("above /")
            out.pop()
        else:
            out.append(seg)
    return "/" + "/".join(out)


def ref_hole(value: Any) -> str:
    """A template hole: a string or an integer, one safe NFC segment."""
    if type(value) is int:
        value = str(value)
    if type(value) is not str or value in ("", ".", ".."):
        raise Err("unsafe hole")
    if "/" in value or any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value):
        raise Err("unsafe hole")
    if unicodedata.normalize("NFC", value) != value:
        raise Err("not NFC")
    return value


def is_number(v: Any) -> bool:
    return type(v) in (int, float)


def ref_equal(a: Any, b: Any) -> bool:
    """'==': booleans never equal numbers; null equals only null; two numbers compare
    numerically, and a non-finite one is an error; lists element by element (left
    to right, the first difference decides), objects key by key (in the left
    object's order)."""
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    if a is None or b is None:
        return a is b
    if is_number(a) and is_number(b):
        if not (math.isfinite(a) and math.isfinite(b)):
            raise Err("non-finite")
        return bool(a == b)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False
        return all(ref_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        if len(a) != len(b):
            return False
        return all(k in b and ref_equal(v, b[k]) for k, v in a.items())
    if type(a) is str and type(b) is str:
        return a == b
    return False


def ref_member(item: Any, container: Any) -> bool:
    if not isinstance(container, list):
        raise Err("in needs a list")
    if type(item) is str:
        return item in container
    return any(ref_equal(item, x) for x in container)


def ref_lower(s: Any) -> str:
    """docs: NFKC, dotted capital I and dotless i to i, full case folding, NFKC."""
    if type(s) is not str:
        raise Err("lower needs a string")
    s = unicodedata.normalize("NFKC", s).replace("\u0130", "i").replace("\u0131", "i")
    return unicodedata.normalize("NFKC", s.casefold())


def ref_segment(s: Any, i: Any) -> str:
    if type(s) is not str or type(i) is not int:
        raise Err("segment types")
    parts = [p for p in s.split("/") if p]
    if i == 0 or abs(i) > len(parts):
        raise Err("out of range")
    return parts[i - 1] if i > 0 else parts[i]


def ref_value(e: tuple[Any, ...], env: dict[str, Any]) -> Any:
    kind = e[0]
    if kind == "lit":
        return e[1]
    if kind == "list":
        return [ref_value(x, env) for x in e[1]]
    if kind == "ref":
        v = env[e[1]]
        for name in e[2]:
            if not isinstance(v, dict) or name not in v:
                raise Err("missing")
            v = v[name]
        return v
    if kind == "has":
        v = env[e[1]]
        for name in e[2]:
            if not isinstance(v, dict) or name not in v:
                return False
            v = v[name]
        return True
    if kind == "call":
        args = [ref_value(a, env) for a in e[2]]
        if e[1] == "lower":
            return ref_lower(*args)
        if e[1] == "segment":
            return ref_segment(*args)
        if e[1] == "path":
            return ref_path(*args)
        if e[1] == "startswith":
            if type(args[0]) is not str or type(args[1]) is not str:
                raise Err("types")
            return args[0].startswith(args[1])
        raise AssertionError(e[1])
    if kind == "cmp":
        op, left, right = e[1], ref_value(e[2], env), ref_value(e[3], env)
        if op == "==":
            return ref_equal(left, right)
        if op == "!=":
            return not ref_equal(left, right)
        if op == "in":
            return ref_member(left, right)
        if not (is_number(left) and is_number(right)):
            raise Err("orders numbers")
        if not (math.isfinite(left) and math.isfinite(right)):
            raise Err("non-finite")
        return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]
    if kind in ("and", "or"):
        for operand in e[1:]:
            v = ref_value(operand, env)
            if type(v) is not bool:
                raise Err("not a boolean")
            if v is (kind == "or"):
                return v
        return kind == "and"
    if kind == "not":
        v = ref_value(e[1], env)
        if type(v) is not bool:
            raise Err("not a boolean")
        return not v
    raise AssertionError(kind)


def ref_glob(pattern: str, resource: str) -> bool:
    pat = pattern.strip("/").split("/") if pattern != "/" else []
    res = resource.strip("/").split("/") if resource != "/" else []

    def go(i: int, j: int) -> bool:
        if i == len(pat):
            return j == len(res)
        if pat[i] == "**":
            return any(go(i + 1, k) for k in range(j, len(res) + 1))
        if j == len(res):
            return False
        return (pat[i] == "*" or pat[i] == res[j]) and go(i + 1, j + 1)

    return go(0, 0)


@dataclass(frozen=True)
class Rule:
    effect: str
    actions: tuple[str, ...]
    pattern: str
    when: tuple[Any, ...] | None
    unless: tuple[Any, ...] | None


REQUIREMENTS = {
    "files.read": ("read", "path"),
    "files.write": ("write", "path"),
    "files.tag": ("write", "tag"),
}


def ref_decide(rules: list[Rule], tool: str, args: dict[str, Any], ctx: dict[str, Any]) -> str:
    if tool not in REQUIREMENTS:
        return "deny tool_unavailable"
    action, kind = REQUIREMENTS[tool]
    try:
        if kind == "path":
            resource = ref_path(args["path"]) if "path" in args else ref_path(MISSING)
        else:
            if "name" not in args:
                raise Err("missing")
            resource = "/tags/" + ref_hole(args["name"])
    except Err:
        return "deny unresolvable_resource"
    env = {"context": ctx, "args": args, "resource": resource, "action": action}

    def applies(rule: Rule) -> bool:
        if action not in rule.actions and "*" not in rule.actions:
            return False
        if not ref_glob(rule.pattern, resource):
            return False
        try:
            ok = True
            if rule.when is not None:
                v = ref_value(rule.when, env)
                if type(v) is not bool:
                    raise Err("not a boolean")
                ok = v
            if ok and rule.unless is not None:
                v = ref_value(rule.unless, env)
                if type(v) is not bool:
                    raise Err("not a boolean")
                ok = not v
            return ok
        except Err:
            return rule.effect == "forbid"  # fail closed

    if any(applies(r) for r in rules if r.effect == "forbid"):
        return "deny forbidden"
    if any(applies(r) for r in rules if r.effect == "permit"):
        return "allow allowed"
    return "deny no_matching_permit"


# ------------------------------------------------------------------ generation


def text(e: tuple[Any, ...]) -> str:
    kind = e[0]
    if kind == "lit":
        v = e[1]
        if v is True:
            return "true"
        if v is False:
            return "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return repr(v)
    if kind == "list":
        return "[" + ", ".join(text(x) for x in e[1]) + "]"
    if kind == "ref":
        return ".".join([e[1], *e[2]])
    if kind == "has":
        return "(has " + ".".join([e[1], *e[2]]) + ")"
    if kind == "call":
        return f"{e[1]}(" + ", ".join(text(a) for a in e[2]) + ")"
    if kind == "cmp":
        return f"({text(e[2])} {e[1]} {text(e[3])})"
    if kind in ("and", "or"):
        return "(" + f" {kind} ".join(text(o) for o in e[1:]) + ")"
    return f"(not {text(e[1])})"


def R(root: str, *path: str) -> tuple[Any, ...]:
    return ("ref", root, path)


def L(v: Any) -> tuple[Any, ...]:
    return ("lit", v)


ATOMS: list[tuple[Any, ...]] = [
    ("cmp", ">", R("args", "n"), L(10)),
    ("cmp", "<=", R("args", "n"), L(3.5)),
    ("cmp", "==", R("args", "n"), L(3)),
    ("cmp", "!=", R("args", "n"), L(3)),
    ("cmp", "==", R("args", "n"), L(True)),
    ("cmp", "==", R("args", "o"), R("context", "attributes", "o")),
    ("cmp", "!=", R("args", "o"), R("context", "attributes", "o")),
    ("cmp", "in", R("args", "o"), R("context", "attributes", "list")),
    ("has", "args", ("x",)),
    ("has", "args", ("o", "k")),
    ("has", "context", ("attributes", "o")),
    ("cmp", "==", ("call", "lower", (R("args", "s"),)), L("private")),
    ("cmp", "==", ("call", "segment", (R("resource"), L(1))), L("a")),
    ("cmp", "==", ("call", "segment", (R("resource"), L(-3))), L("b")),
    ("cmp", "==", ("call", "segment", (("call", "path", (R("args", "path"),)), L(1))), L("a")),
    ("call", "startswith", (("call", "path", (R("args", "path"),)), L("/a/"))),
    ("cmp", ">=", R("context", "now", "hour"), L(9)),
    ("cmp", "in", R("context", "now", "weekday"), ("list", (L("mon"), L("tue")))),
    ("cmp", "<", R("context", "now", "timestamp"), L(1796632200)),
    ("cmp", "in", L("admin"), R("context", "roles")),
]


@st.composite
def expr(draw: st.DrawFn, depth: int = 0) -> tuple[Any, ...]:
    if depth >= 2 or draw(st.booleans()):
        return draw(st.sampled_from(ATOMS))
    shape = draw(st.sampled_from(["and", "or", "not"]))
    if shape == "not":
        return ("not", draw(expr(depth + 1)))
    return (shape, draw(expr(depth + 1)), draw(expr(depth + 1)))


PATTERNS = ["/**", "/a/**", "/a/*", "/a/*/c", "/b/c", "/tags/*", "/tags/Kate", "/caf\u00e9/**"]


@st.composite
def rules(draw: st.DrawFn) -> list[Rule]:
    out = []
    for _ in range(draw(st.integers(1, 5))):
        acts = draw(st.sampled_from([("*",), ("read",), ("write",), ("read", "write")]))
        when = draw(st.none() | expr())
        unless = draw(st.none() | expr()) if draw(st.booleans()) else None
        out.append(
            Rule(
                draw(st.sampled_from(["permit", "forbid"])),
                acts,
                draw(st.sampled_from(PATTERNS)),
                when,
                unless,
            )
        )
    return out


def policy_text(rs: list[Rule]) -> str:
    lines = [
        "namespace files",
        "requirement files.read  { action read;  resource path(args.path) }",
        "requirement files.write { action write; resource path(args.path) }",
        'requirement files.tag   { action write; resource "/tags/{args.name}" }',
    ]
    for r in rs:
        line = f'{r.effect} {", ".join(r.actions)} on "{r.pattern}"'
        if r.when is not None:
            line += f" when {text(r.when)}"
        if r.unless is not None:
            line += f" unless {text(r.unless)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


OPTIONAL = st.sampled_from([MISSING])
VALUES: dict[str, list[Any]] = {
    "path": [
        "/a/b",
        "/a/b/c",
        "/a/../b/c",
        "/a//x/c",
        "/b/c",
        "/../a",
        "rel",
        5,
        "/cafe\u0301/x",
        "/caf\u00e9/x",
        "/\u212aate",
        "/a/\x00",
        MISSING,
    ],
    "name": ["Kate", "\u212aate", "Ka\u0300te", "x", "a/b", "..", 7, MISSING],
    "n": [math.nan, math.inf, -math.inf, 3, 3.0, 10, 11, True, "3", MISSING],
    "o": [
        {"k": True},
        {"k": 1},
        {"k": 1.0},
        [True],
        [1],
        {"k": [math.nan]},
        {"k": {"z": False}},
        {"k": {"z": 0}},
        MISSING,
    ],
    "s": [
        "PRIVATE",
        "PR\u0130VATE",
        "pr\u0131vate",
        "\uff30\uff32\uff29\uff36\uff21\uff34\uff25",
        "priv\u0430te",
        "Priv\u00e0te",
        3,
        MISSING,
    ],
    "x": [None, 0, MISSING],
}
CONTEXT_O = [{"k": 1}, {"k": True}, [1], {"k": {"z": 0}}, MISSING]
CONTEXT_LIST = [[{"k": 1}, [True]], [[1], {"k": True}], [math.nan], "notalist", MISSING]
NOWS = ["2026-12-07T09:30:00+01:00[Europe/Paris]", "2026-12-08T23:00:00Z", MISSING]


@st.composite
def call(draw: st.DrawFn) -> tuple[str, dict[str, Any], dict[str, Any]]:
    tool = draw(st.sampled_from([*REQUIREMENTS, "files.nope"]))
    args = {
        k: v
        for k, v in ((k, draw(st.sampled_from(vs))) for k, vs in VALUES.items())
        if v is not MISSING
    }
    attributes = {}
    o = draw(st.sampled_from(CONTEXT_O))
    if o is not MISSING:
        attributes["o"] = o
    lst = draw(st.sampled_from(CONTEXT_LIST))
    if lst is not MISSING:
        attributes["list"] = lst
    ctx: dict[str, Any] = {
        "principal": "p",
        "tenant": "default",
        "roles": draw(st.sampled_from([[], ["admin"]])),
        "attributes": attributes,
    }
    now = draw(st.sampled_from(NOWS))
    if now is not MISSING:
        ctx["now"] = expand(now)
    return tool, args, ctx


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules(), st.lists(call(), min_size=1, max_size=25))
def test_decisions_agree_with_the_reference(rs: list[Rule], calls: list[Any]) -> None:
    policy = compile_source(policy_text(rs), "gen.sos")
    for tool, args, ctx in calls:
        d = policy.decide(tool, args, ctx)
        # again with a context key (one per context, the time left out as the kernel
        # leaves it out): the per-context caches must not change the decision
        key = json.dumps({k: v for k, v in ctx.items() if k != "now"}, sort_keys=True)
        again = policy.decide(tool, args, ctx, context_key=key)
        want = ref_decide(rs, tool, args, ctx)
        got = f"{d.effect.value} {d.reason.value}"
        assert got == want, (policy_text(rs), tool, args, ctx)
        assert f"{again.effect.value} {again.reason.value}" == want
        if want == "allow allowed":
            # listing never hides a tool some call could use: could_permit knows the
            # context but not the arguments or the time of the call
            listing = {k: v for k, v in ctx.items() if k != "now"}
            assert policy.could_permit(tool, listing), (policy_text(rs), tool, args, ctx)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_lower_is_the_documented_key_and_idempotent(s: str) -> None:
    from sharedos.policy.functions import FUNCTIONS

    lower = FUNCTIONS["lower"].impl
    assert lower(s) == ref_lower(s)
    assert lower(lower(s)) == lower(s)


SCALARS = st.sampled_from(
    [True, False, 0, 1, 1.0, -0.0, 2.5, math.nan, math.inf, -math.inf, "a", "1", "true", None]
)
VALUE = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["k", "m"]), inner, max_size=2)
    ),
    max_leaves=6,
)
OPS = {"eq": "==", "ne": "!=", "in": "in", "ni": "not in", "lt": "<", "ge": ">="}
COMPARE = (
    "namespace files\n"
    "requirement files.read { action read; resource path(args.path) }\n"
    + "".join(f'permit read on "/{name}/**" when args.a {op} args.b\n' for name, op in OPS.items())
    + "".join(f'forbid read on "/f{name}/**" when args.a {op} args.b\n' for name, op in OPS.items())
    + "".join(f'permit read on "/f{name}/**"\n' for name in OPS)
)


@settings(max_examples=400, deadline=None)
@given(VALUE, VALUE)
def test_comparisons_agree_with_the_reference(a: Any, b: Any) -> None:
    policy = compile_source(COMPARE, "cmp.sos")
    env = {"context": {}, "args": {"a": a, "b": b}, "resource": "/", "action": "read"}
    for name, op in OPS.items():
        negate = op in ("!=", "not in")
        base = {"!=": "==", "not in": "in"}.get(op, op)
        try:
            value: bool | None = ref_value(("cmp", base, R("args", "a"), R("args", "b")), env)
            if negate:
                value = not value
        except Err:
            value = None  # an error: a permit does not apply, a forbid does
        args = {"a": a, "b": b}
        got = policy.decide("files.read", {**args, "path": f"/{name}/x"}, {})
        assert got.allowed is (value is True), (op, a, b)
        forbidden = policy.decide("files.read", {**args, "path": f"/f{name}/x"}, {})
        assert (forbidden.reason.value == "forbidden") is (value is not False), (op, a, b)
