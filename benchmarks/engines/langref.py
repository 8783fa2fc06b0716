"""An indexed pure-Python reference for the whole policy language (the ``random`` workload).

Written from ``docs/policy-language.md`` alone, and independent of
``sharedos.policy`` (it imports nothing of it): the bar that SharedOS's
``decide`` is held to on the randomized workload (issue 27), and its
labeller. It is the straightforward indexed procedure one would write for
the language, with nothing cached across requests:

- per (action, resource kind) a **trie over the leading segments** of every
  pattern: a literal segment is a child by name, a whole-segment context
  hole (``{context.principal}``) a child taken when the request's segment
  equals the caller's value (an unsafe value: only for forbids, where it
  matches any one segment); the rest of a pattern (its tail) is classified
  once: end, ``**``, ``*``, one glob segment, or a general matcher;
- **role-membership conditions indexed**: a rule whose condition can only
  hold when the caller holds role R (``when "R" in context.roles``, or an
  ``and`` with that term; for a forbid, only as the *first* term, since an
  error in an earlier term makes a forbid apply) sits in its node under R,
  and a request looks up only the roles it holds; when the context's roles
  are not a list of strings, every rule is evaluated as written;
- conditions compiled once into closures over (context, args, resource,
  action) with the documented semantics: a missing attribute or a wrong
  type is an error, ``and``/``or`` short-circuit left to right, an error
  makes a permit not apply and a forbid apply;
- forbids first (one that applies denies), then permits (default deny).

Decisions are reason codes (``allowed``, ``forbidden``, ``no_matching_permit``,
``unresolvable_resource``, ``tool_unavailable``) so the agreement tests can
compare reasons, not only allow/deny.
"""

from __future__ import annotations

import math
import unicodedata
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.workload_random import Expr, LangRule, RandomWorkload, Resource, Seg

Env = tuple[Any, Any, Any, Any]  # context, args, resource, action
Fn = Callable[[Env], Any]

ALLOWED = "allowed"
FORBIDDEN = "forbidden"
NO_PERMIT = "no_matching_permit"
UNRESOLVABLE = "unresolvable_resource"
UNAVAILABLE = "tool_unavailable"


class Err(Exception):
    """A condition could not be evaluated (the rule is indeterminate)."""


# ------------------------------------------------------------------ values


def _control(ch: str) -> bool:
    o = ord(ch)
    return o < 0x20 or 0x7F <= o <= 0x9F


def canonical(value: Any) -> str | None:
    """``path()``: the canonical absolute path, or None when there is none (docs, "path()")."""
    if type(value) is not str or not value.startswith("/") or len(value) > 4096:
        return None
    if any(_control(ch) or 0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        return None
    if not unicodedata.is_normalized("NFC", value):
        return None
    out: list[str] = []
    for seg in value.split("/"):
        if seg == "" or seg == ".":
            continue
        if seg == "..":
            if not out:
                return None
            out.pop()
        else:
            out.append(seg)
    return "/" + "/".join(out)


def _int_text(value: Any) -> Any:
    """An integer as its digits (None past the 4,300 digits Python spells); else as is."""
    if type(value) is not int:
        return value
    try:
        return str(value)
    except ValueError:
        return None


def _url_unsafe(seg: str) -> bool:
    """Not one segment that means itself to a URL parser (docs, the resource table):
    ``\\``, ``?``, ``#``, or a percent-escape decoding to ``.``/``..``, ``/``, ``\\`` or a
    control character; empty, ``.``, ``..``, ``/``, a control character, a lone surrogate."""
    if seg in ("", ".", "..") or "/" in seg:
        return True
    if any(_control(ch) or 0xD800 <= ord(ch) <= 0xDFFF for ch in seg):
        return True
    if "\\" in seg or "?" in seg or "#" in seg:
        return True
    decoded = urllib.parse.unquote(seg, errors="replace")
    return (
        decoded in (".", "..")
        or "/" in decoded
        or "\\" in decoded
        or any(_control(ch) for ch in decoded)
    )


def template_hole(value: Any) -> str | None:
    """A template hole's text, or None when the argument cannot fill it."""
    value = _int_text(value)
    if type(value) is not str or _url_unsafe(value):
        return None
    if not unicodedata.is_normalized("NFC", value):
        return None
    return value


def safe_interpolation(value: Any) -> str | None:
    """A context value inserted into a pattern, or None when it is unsafe (docs,
    "Interpolation safety"): missing, not a string or integer (of at most 4,300
    digits), empty, ``.``/``..``, holding ``/``, ``*`` or a control character, or not NFC."""
    value = _int_text(value)
    if type(value) is not str or value in ("", ".", ".."):
        return None
    if "/" in value or "*" in value or any(_control(ch) for ch in value):
        return None
    if not unicodedata.is_normalized("NFC", value):
        return None
    return value


def _lookup(root: Any, path: Sequence[str]) -> tuple[bool, Any]:
    v = root
    for name in path:
        if type(v) is not dict or name not in v:
            return False, None
        v = v[name]
    return True, v


def _number(v: Any) -> bool:
    return type(v) is int or type(v) is float


def _finite(v: Any) -> bool:
    """Not NaN nor an infinity (an int is always finite, however large: math.isfinite
    would raise OverflowError past a float's range)."""
    return type(v) is not float or math.isfinite(v)


def equal(a: Any, b: Any) -> bool:
    """``==``: booleans never equal numbers at any depth, ``null`` only ``null``,
    lists element-wise, objects key by key; a non-finite number is an error."""
    ta, tb = type(a), type(b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if a is None or b is None:
        return a is None and b is None
    if _number(a) and _number(b):
        if not (_finite(a) and _finite(b)):
            raise Err("non-finite number")
        return bool(a == b)
    if ta is str or tb is str:
        return ta is tb and a == b
    if ta is list and tb is list:
        if len(a) != len(b):
            return False
        return all(equal(x, y) for x, y in zip(a, b, strict=True))
    if ta is dict and tb is dict:
        if len(a) != len(b):
            return False
        return all(k in b and equal(v, b[k]) for k, v in a.items())
    return False


def member(item: Any, container: Any) -> bool:
    """``in``: membership in a list; anything else on the right is an error."""
    if type(container) is not list:
        raise Err("in needs a list")
    if type(item) is str:
        return item in container
    return any(equal(item, x) for x in container)


def caseless(s: str) -> str:
    """``lower``: NFKC, Turkic dotted/dotless i to i, full case folding, NFKC."""
    s = unicodedata.normalize("NFKC", s).replace("\u0130", "i").replace("\u0131", "i")
    return unicodedata.normalize("NFKC", s.casefold())


def _need_str(*vals: Any) -> None:
    for v in vals:
        if type(v) is not str:
            raise Err("needs a string")


def _f_startswith(s: Any, p: Any) -> bool:
    _need_str(s, p)
    return bool(s.startswith(p))


def _f_endswith(s: Any, p: Any) -> bool:
    _need_str(s, p)
    return bool(s.endswith(p))


def _f_contains(s: Any, p: Any) -> bool:
    _need_str(s, p)
    return p in s


def _f_lower(s: Any) -> str:
    _need_str(s)
    return caseless(s)


def _f_path(s: Any) -> str:
    c = canonical(s)
    if c is None:
        raise Err("no canonical path")
    return c


def _f_segment(s: Any, i: Any) -> str:
    if type(s) is not str or type(i) is not int:
        raise Err("segment(string, integer)")
    parts = [p for p in s.split("/") if p]
    if i == 0 or abs(i) > len(parts):
        raise Err("segment out of range")
    return parts[i - 1] if i > 0 else parts[i]


def _f_any_in(a: Any, b: Any) -> bool:
    if type(a) is not list or type(b) is not list:
        raise Err("any_in(list, list)")
    return any(member(x, b) for x in a)


def _f_all_in(a: Any, b: Any) -> bool:
    if type(a) is not list or type(b) is not list:
        raise Err("all_in(list, list)")
    return all(member(x, b) for x in a)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "startswith": _f_startswith,
    "endswith": _f_endswith,
    "contains": _f_contains,
    "lower": _f_lower,
    "path": _f_path,
    "segment": _f_segment,
    "any_in": _f_any_in,
    "all_in": _f_all_in,
}
_ROOTS = {"context": 0, "args": 1, "resource": 2, "action": 3}


def _bool(v: Any) -> bool:
    if v is True or v is False:
        return v
    raise Err("not a boolean")


def compile_expr(e: Expr, named: dict[str, Expr]) -> Fn:
    """A closure computing ``e`` (raises ``Err``)."""
    kind = e[0]
    if kind == "named":
        return compile_expr(named[e[1]], named)
    if kind == "lit":
        value = e[1]
        return lambda env: value
    if kind == "list":
        items = [compile_expr(x, named) for x in e[1]]
        return lambda env: [f(env) for f in items]
    if kind == "ref":
        idx, path = _ROOTS[e[1]], tuple(e[2])
        if not path:
            return lambda env: env[idx]

        def ref(env: Env) -> Any:
            found, v = _lookup(env[idx], path)
            if not found:
                raise Err("missing")
            return v

        return ref
    if kind == "has":
        idx, path = _ROOTS[e[1]], tuple(e[2])
        return lambda env: _lookup(env[idx], path)[0]
    if kind == "call":
        impl = FUNCTIONS[e[1]]
        fargs = [compile_expr(x, named) for x in e[2]]
        return lambda env: impl(*[f(env) for f in fargs])
    if kind == "concat":
        parts = [compile_expr(x, named) for x in e[1:]]

        def concat(env: Env) -> str:
            vals = [f(env) for f in parts]
            _need_str(*vals)
            return "".join(vals)

        return concat
    if kind == "cmp":
        op = e[1]
        left, right = compile_expr(e[2], named), compile_expr(e[3], named)
        if op == "==":
            return lambda env: equal(left(env), right(env))
        if op == "!=":
            return lambda env: not equal(left(env), right(env))
        if op == "in":
            return lambda env: member(left(env), right(env))
        if op == "not in":
            return lambda env: not member(left(env), right(env))

        def order(env: Env) -> bool:
            a, b = left(env), right(env)
            if not (_number(a) and _number(b)):
                raise Err("orders numbers")
            if not (_finite(a) and _finite(b)):
                raise Err("non-finite number")
            if op == "<":
                return bool(a < b)
            if op == "<=":
                return bool(a <= b)
            if op == ">":
                return bool(a > b)
            return bool(a >= b)

        return order
    if kind == "and" or kind == "or":
        parts = [compile_expr(x, named) for x in e[1:]]
        stop = kind == "or"

        def boolop(env: Env) -> bool:
            for f in parts:
                if _bool(f(env)) is stop:
                    return stop
            return not stop

        return boolop
    if kind == "not":
        inner = compile_expr(e[1], named)
        return lambda env: not _bool(inner(env))
    raise ValueError(f"unknown expression {e!r}")


def _expand(e: Expr, named: dict[str, Expr]) -> Expr:
    while e[0] == "named":
        e = named[e[1]]
    return e


def role_key(rule: LangRule, named: dict[str, Expr]) -> str | None:
    """The role R such that the rule can apply only to a caller holding R (see the module
    docstring), or None."""
    if rule.when is None:
        return None
    cond = _expand(rule.when, named)
    terms = [_expand(t, named) for t in cond[1:]] if cond[0] == "and" else [cond]
    if rule.effect == "forbid":
        terms = terms[:1]  # an error in an earlier term would make the forbid apply
    for t in terms:
        if (
            t[0] == "cmp"
            and t[1] == "in"
            and t[2][0] == "lit"
            and type(t[2][1]) is str
            and t[3] == ("ref", "context", ("roles",))
        ):
            return str(t[2][1])
    return None


def applies_fn(rule: LangRule, named: dict[str, Expr]) -> Callable[[Env], bool] | None:
    """Does the rule's condition let it apply? Errors fail closed. None: unconditional."""
    if rule.when is None and rule.unless is None:
        return None
    when = compile_expr(rule.when, named) if rule.when is not None else None
    unless = compile_expr(rule.unless, named) if rule.unless is not None else None
    on_error = rule.effect == "forbid"

    def applies(env: Env) -> bool:
        try:
            if when is not None and not _bool(when(env)):
                return False
            return not (unless is not None and _bool(unless(env)))
        except Err:
            return on_error
        except Exception:
            return on_error

    return applies


# ------------------------------------------------------------------ patterns

_END, _ANY, _ONE, _GLOB, _GENERAL = range(5)


def _glob_ok(pieces: Sequence[tuple[Any, ...]], s: str, ctx: Any, forbid: bool) -> bool | None:
    """Does segment ``s`` match a glob of text, wildcards and context holes?
    None: a hole is unsafe (the caller decides what that means)."""
    texts: list[str] = [""]
    for p in pieces:
        if p[0] == "t":
            texts[-1] += p[1]
        elif p[0] == "w":
            texts.append("")
        else:
            found, v = _lookup(ctx, p[1])
            text = safe_interpolation(v) if found else None
            if text is None:
                return None
            texts[-1] += text
    if len(texts) == 1:
        return s == texts[0]
    head, mids, tail = texts[0], texts[1:-1], texts[-1]
    if len(s) < len(head) + len(tail) + sum(map(len, mids)):
        return False
    if not (s.startswith(head) and s.endswith(tail)):
        return False
    pos, end = len(head), len(s) - len(tail)
    for m in mids:
        at = s.find(m, pos, end)
        if at < 0:
            return False
        pos = at + len(m)
    return True


def _seg_ok(seg: Seg, s: str, ctx: Any, forbid: bool) -> bool:
    kind = seg[0]
    if kind == "lit":
        return s == seg[1]
    if kind == "star":
        return s != ""
    ok = _glob_ok(seg[1], s, ctx, forbid)
    if ok is None:
        return (
            forbid and s != ""
        )  # an unsafe value: any one segment in a forbid, nothing in a permit
    return ok


def match_tail(tail: Sequence[Seg], segs: Sequence[str], i: int, ctx: Any, forbid: bool) -> bool:
    """Do ``segs[i:]`` match the pattern segments ``tail`` (``**`` anywhere)?"""
    t = 0
    n, m = len(segs), len(tail)
    while t < m:
        seg = tail[t]
        if seg[0] == "dstar":
            rest = tail[t + 1 :]
            if not rest:
                return True
            return any(match_tail(rest, segs, k, ctx, forbid) for k in range(i, n + 1))
        if i >= n or not _seg_ok(seg, segs[i], ctx, forbid):
            return False
        t += 1
        i += 1
    return i == n


class _Entry:
    __slots__ = ("applies", "code", "forbid", "glob", "rule", "tail")

    def __init__(self, rule: LangRule, tail: tuple[Seg, ...], named: dict[str, Expr]) -> None:
        self.rule = rule
        self.forbid = rule.effect == "forbid"
        self.tail = tail
        self.glob: Any = None
        if not tail:
            self.code = _END
        elif tail == (("dstar",),):
            self.code = _ANY
        elif tail == (("star",),):
            self.code = _ONE
        elif len(tail) == 1 and tail[0][0] == "glob" and all(p[0] != "h" for p in tail[0][1]):
            self.code = _GLOB
            self.glob = tail[0][1]
        else:
            self.code = _GENERAL
        self.applies = applies_fn(rule, named)

    def matches(self, segs: Sequence[str], i: int, ctx: Any) -> bool:
        code = self.code
        if code == _ANY:
            return True
        if code == _END:
            return i == len(segs)
        if code == _ONE:
            return len(segs) - i == 1
        if code == _GLOB:
            return len(segs) - i == 1 and bool(_glob_ok(self.glob, segs[i], None, False))
        return match_tail(self.tail, segs, i, ctx, self.forbid)


class _Node:
    __slots__ = ("children", "forbid_roles", "forbids", "holes", "permit_roles", "permits")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.holes: dict[tuple[str, ...], _Node] = {}  # whole-segment context holes
        self.forbids: list[_Entry] = []
        self.permits: list[_Entry] = []
        self.forbid_roles: dict[str, list[_Entry]] = {}
        self.permit_roles: dict[str, list[_Entry]] = {}


def _whole_hole(seg: Seg) -> tuple[str, ...] | None:
    if seg[0] == "glob" and len(seg[1]) == 1 and seg[1][0][0] == "h":
        return tuple(seg[1][0][1])
    return None


# ------------------------------------------------------------------ the engine


class LangReference:
    """Indexed pure-Python decisions for the whole language (no caching across requests)."""

    name = "reference"

    def __init__(
        self,
        tools: dict[str, str],
        resources: dict[str, Resource],
        actions: Sequence[str],
        named: dict[str, Expr],
        rules: Sequence[LangRule],
    ) -> None:
        self._tools = dict(tools)
        self._resources = dict(resources)
        declared = set(tools.values())
        self._roots: dict[tuple[str, bool], _Node] = {}
        for rule in rules:
            acts = declared if rule.actions is None else set(rule.actions) & declared
            for action in acts:
                root = self._roots.setdefault((action, rule.absolute), _Node())
                self._insert(root, rule, named)

    @classmethod
    def from_workload(cls, wl: RandomWorkload) -> LangReference:
        """Build the index for a workload's rules."""
        return cls(wl.tools, wl.resources, wl.actions, wl.named, wl.rules)

    @staticmethod
    def _insert(node: _Node, rule: LangRule, named: dict[str, Expr]) -> None:
        pat = rule.pattern
        i = 0
        while i < len(pat):
            seg = pat[i]
            if seg[0] == "lit":
                node = node.children.setdefault(seg[1], _Node())
            else:
                path = _whole_hole(seg)
                if path is None:
                    break
                node = node.holes.setdefault(path, _Node())
            i += 1
        entry = _Entry(rule, tuple(pat[i:]), named)
        key = role_key(rule, named)
        if entry.forbid:
            if key is None:
                node.forbids.append(entry)
            else:
                node.forbid_roles.setdefault(key, []).append(entry)
        elif key is None:
            node.permits.append(entry)
        else:
            node.permit_roles.setdefault(key, []).append(entry)

    def _resource(self, res: Resource, args: Any) -> str | None:
        if res.kind == "path":
            return canonical(args.get(res.arg)) if type(args) is dict else None
        if type(args) is not dict:
            return None
        parts = []
        for seg in res.segs:
            text = ""
            for kind, value in seg:
                if kind == "t":
                    text += value
                else:
                    if value not in args:
                        return None
                    h = template_hole(args[value])
                    if h is None:
                        return None
                    text += h
            if _url_unsafe(text):  # the segment several holes and literals make together
                return None
            parts.append(text)
        resource = ("/" if res.absolute else "") + "/".join(parts)
        # a hole may compose with the text before it ("cafe" + "\u0301")
        return resource if unicodedata.is_normalized("NFC", resource) else None

    def decide(self, tool: str, args: Any, context: Any, *, context_key: str | None = None) -> str:
        """The decision's reason code (``context_key`` is accepted and ignored: no caching)."""
        action = self._tools.get(tool)
        if action is None:
            return UNAVAILABLE
        res = self._resources[tool]
        resource = self._resource(res, args)
        if resource is None:
            return UNRESOLVABLE
        root = self._roots.get((action, res.absolute))
        if root is None:
            return NO_PERMIT
        if res.absolute:
            segs = resource[1:].split("/") if len(resource) > 1 else []
        else:
            segs = resource.split("/")
        roles = context.get("roles") if type(context) is dict else None
        held: set[str] | None = None
        if type(roles) is list and all(type(r) is str for r in roles):
            held = set(roles)
        env = (context, args, resource, action)
        n = len(segs)
        allowed = False
        stack: list[tuple[_Node, int, bool]] = [(root, 0, True)]
        while stack:
            node, i, permits_ok = stack.pop()
            for entry in _candidates(node.forbids, node.forbid_roles, held):
                if entry.matches(segs, i, context) and (
                    entry.applies is None or entry.applies(env)
                ):
                    return FORBIDDEN
            if permits_ok and not allowed:
                for entry in _candidates(node.permits, node.permit_roles, held):
                    if entry.matches(segs, i, context) and (
                        entry.applies is None or entry.applies(env)
                    ):
                        allowed = True
                        break
            if i < n:
                child = node.children.get(segs[i])
                if child is not None:
                    stack.append((child, i + 1, permits_ok))
                for path, hchild in node.holes.items():
                    found, v = _lookup(context, path)
                    value = safe_interpolation(v) if found else None
                    if value is None:
                        # unsafe: never widens a permit; in a forbid, any one segment
                        stack.append((hchild, i + 1, False))
                    elif segs[i] == value:
                        stack.append((hchild, i + 1, permits_ok))
        return ALLOWED if allowed else NO_PERMIT

    def allowed(self, tool: str, args: Any, context: Any) -> bool:
        """True when the call is allowed."""
        return self.decide(tool, args, context) == ALLOWED


def _candidates(
    plain: list[_Entry], by_role: dict[str, list[_Entry]], held: set[str] | None
) -> list[_Entry]:
    """The entries of a node a request must test: the plain ones, and the role-keyed ones
    of the roles it holds (all of them when its roles are not a list of strings)."""
    if not by_role:
        return plain
    out = list(plain)
    if held is None:
        for entries in by_role.values():
            out.extend(entries)
    elif len(held) <= len(by_role):
        for r in held:
            got = by_role.get(r)
            if got:
                out.extend(got)
    else:
        for r, entries in by_role.items():
            if r in held:
                out.extend(entries)
    return out
