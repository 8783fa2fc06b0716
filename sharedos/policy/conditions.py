"""Conditions: encoding, compilation to closures, and three-valued partial evaluation.

Encoded (JSON-ready) expression form, the one bundles store::

    ["lit", v] | ["list", [e...]] | ["ref", root, [name...]] | ["call", f, [e...]]
    | ["cmp", op, l, r] | ["and", l, r] | ["or", l, r] | ["not", e]

Runtime semantics (fixed, documented in docs/policy-language.md):

* A missing attribute, a value of the wrong type (``"a" in 3``, ``not "x"``)
  or an unresolvable ``path(...)`` is an *error*. ``and``/``or`` short-circuit
  left to right, so an error on the right of a decided ``and``/``or`` is never
  reached.
* A rule whose condition errors is *indeterminate*: a permit does not apply, a
  forbid does apply (fail closed).
* ``==`` never equates a boolean with a number; lists compare element-wise.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from sharedos.policy import ast
from sharedos.policy.paths import UnresolvablePath, canonical_path

#: Functions a condition may call, with their arity.
FUNCTIONS: dict[str, int] = {"startswith": 2, "endswith": 2, "path": 1}

# Environment passed to compiled conditions: (context, args, resource, action).
Env = tuple[Any, Any, Any, Any]
Fn = Callable[[Env], Any]

_ROOT_INDEX = {"context": 0, "args": 1, "resource": 2, "action": 3}


class EvalError(Exception):
    """A condition could not be evaluated (missing attribute, wrong type...)."""


# ----------------------------------------------------------------- encoding


def encode(expr: ast.Expr) -> list[Any]:
    """AST expression -> encoded form."""
    if isinstance(expr, ast.Literal):
        return ["lit", expr.value]
    if isinstance(expr, ast.ListExpr):
        return ["list", [encode(e) for e in expr.items]]
    if isinstance(expr, ast.Ref):
        return ["ref", expr.root, list(expr.path)]
    if isinstance(expr, ast.Call):
        return ["call", expr.func, [encode(e) for e in expr.args]]
    if isinstance(expr, ast.Compare):
        return ["cmp", expr.op, encode(expr.left), encode(expr.right)]
    if isinstance(expr, ast.BoolOp):
        return [expr.op, encode(expr.left), encode(expr.right)]
    return ["not", encode(expr.operand)]


def roots(enc: list[Any]) -> set[str]:
    """Reference roots an encoded expression reads."""
    kind = enc[0]
    if kind == "lit":
        return set()
    if kind == "ref":
        return {enc[1]}
    if kind == "list":
        return set().union(*(roots(e) for e in enc[1])) if enc[1] else set()
    if kind == "call":
        return set().union(*(roots(e) for e in enc[2])) if enc[2] else set()
    if kind == "cmp":
        return roots(enc[2]) | roots(enc[3])
    if kind in ("and", "or"):
        return roots(enc[1]) | roots(enc[2])
    return roots(enc[1])


# ------------------------------------------------------------------ values


def values_equal(a: Any, b: Any) -> bool:
    """Policy equality: booleans never equal numbers; sequences compare element-wise."""
    if a is b:
        return True
    ta, tb = type(a), type(b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta in (list, tuple) and tb in (list, tuple):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    if (ta in (list, tuple)) != (tb in (list, tuple)):
        return False
    try:
        return bool(a == b)
    except Exception:  # a foreign object with a hostile __eq__
        return False


def contains(container: Any, item: Any) -> bool:
    """``item in container`` with policy semantics; raise ``EvalError`` on a type mismatch."""
    tc = type(container)
    if tc is list or tc is tuple:
        if type(item) is str:
            return item in container
        return any(values_equal(item, x) for x in container)
    if tc is str:
        if type(item) is not str:
            raise EvalError(f"'in' a string needs a string on the left, got {type(item).__name__}")
        return item in container
    if isinstance(container, Mapping):
        if type(item) is not str:
            raise EvalError("'in' an object needs a string key on the left")
        return item in container
    raise EvalError(f"'in' needs a list, string or object on the right, got {tc.__name__}")


def _truth(value: Any) -> bool:
    if value is True:
        return True
    if value is False:
        return False
    raise EvalError(f"expected a boolean, got {type(value).__name__}")


def _startswith(a: Any, b: Any) -> bool:
    if type(a) is not str or type(b) is not str:
        raise EvalError("startswith(a, b) needs two strings")
    return a.startswith(b)


def _endswith(a: Any, b: Any) -> bool:
    if type(a) is not str or type(b) is not str:
        raise EvalError("endswith(a, b) needs two strings")
    return a.endswith(b)


def _path(a: Any) -> str:
    try:
        return canonical_path(a)
    except UnresolvablePath as exc:
        raise EvalError(str(exc)) from None


_IMPLS: dict[str, Callable[..., Any]] = {
    "startswith": _startswith,
    "endswith": _endswith,
    "path": _path,
}


# --------------------------------------------------------------- compilation


def compile_expr(enc: list[Any]) -> Fn:
    """Encoded expression -> closure ``fn(env) -> value`` (raises ``EvalError``)."""
    kind = enc[0]
    if kind == "lit":
        value = enc[1]
        return lambda env: value
    if kind == "list":
        items = [compile_expr(e) for e in enc[1]]
        return lambda env: [f(env) for f in items]
    if kind == "ref":
        return _compile_ref(enc[1], tuple(enc[2]))
    if kind == "call":
        impl = _IMPLS[enc[1]]
        fargs = [compile_expr(e) for e in enc[2]]
        if len(fargs) == 1:
            (f0,) = fargs
            return lambda env: impl(f0(env))
        if len(fargs) == 2:
            f0, f1 = fargs
            return lambda env: impl(f0(env), f1(env))
        return lambda env: impl(*(f(env) for f in fargs))
    if kind == "cmp":
        op = enc[1]
        left = compile_expr(enc[2])
        right = compile_expr(enc[3])
        if op == "==":
            return lambda env: values_equal(left(env), right(env))
        if op == "!=":
            return lambda env: not values_equal(left(env), right(env))
        if op == "in":
            return lambda env: _in(left, right, env)
        return lambda env: not _in(left, right, env)
    if kind == "and":
        a, b = compile_expr(enc[1]), compile_expr(enc[2])
        return lambda env: _truth(a(env)) and _truth(b(env))
    if kind == "or":
        a, b = compile_expr(enc[1]), compile_expr(enc[2])
        return lambda env: _truth(a(env)) or _truth(b(env))
    inner = compile_expr(enc[1])
    return lambda env: not _truth(inner(env))


def _in(left: Fn, right: Fn, env: Env) -> bool:
    item = left(env)  # left to right, like every other operator
    return contains(right(env), item)


def _compile_ref(root: str, path: tuple[str, ...]) -> Fn:
    idx = _ROOT_INDEX[root]
    if not path:

        def ref0(env: Env) -> Any:
            value = env[idx]
            if value is None:
                raise EvalError(f"{root} is not available")
            return value

        return ref0
    if len(path) == 1:
        (name,) = path

        def ref1(env: Env) -> Any:
            base = env[idx]
            if isinstance(base, Mapping):
                try:
                    return base[name]
                except KeyError:
                    pass
            raise EvalError(f"{root}.{name} is not defined")

        return ref1

    def refn(env: Env) -> Any:
        value = env[idx]
        for name in path:
            if isinstance(value, Mapping) and name in value:
                value = value[name]
            else:
                raise EvalError(f"{'.'.join((root, *path))} is not defined")
        return value

    return refn


def compile_applies(enc: list[Any] | None, kind: str | None, forbid: bool) -> Callable[[Env], bool]:
    """Closure answering "does this rule apply?" with the fail-closed error rule."""
    if enc is None:
        return lambda env: True
    fn = compile_expr(enc)
    want = kind != "unless"
    on_error = forbid

    def applies(env: Env) -> bool:
        try:
            return _truth(fn(env)) is want
        except EvalError:
            return on_error
        except Exception:  # a hostile value in args/context: never a traceback, fail closed
            return on_error

    return applies


def evaluate(enc: list[Any], env: Env) -> tuple[bool | None, str]:
    """Evaluate a boolean condition for explanations: (True/False, "") or (None, error)."""
    try:
        return _truth(compile_expr(enc)(env)), ""
    except EvalError as exc:
        return None, str(exc)
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


# ------------------------------------------------------------ partial evaluation

T, F, E = "T", "F", "E"
_UNKNOWN = object()
_ERROR = object()


def outcomes(enc: list[Any], context: Any, action: str) -> frozenset[str]:
    """Possible results of a boolean condition when args and resource are unknown.

    Context and action are known. Atoms that read ``args``/``resource`` may be
    True, False or an error; everything else is evaluated exactly, with the
    same short-circuit order as the runtime, so the answer agrees with
    ``decide`` for every concrete choice of arguments.
    """
    kind = enc[0]
    if kind == "and":
        a = outcomes(enc[1], context, action)
        out: set[str] = set()
        if F in a:
            out.add(F)
        if E in a:
            out.add(E)
        if T in a:
            out |= outcomes(enc[2], context, action)
        return frozenset(out)
    if kind == "or":
        a = outcomes(enc[1], context, action)
        out = set()
        if T in a:
            out.add(T)
        if E in a:
            out.add(E)
        if F in a:
            out |= outcomes(enc[2], context, action)
        return frozenset(out)
    if kind == "not":
        inner = outcomes(enc[1], context, action)
        return frozenset({T: F, F: T, E: E}[x] for x in inner)
    value = _partial_value(enc, context, action)
    if value is _UNKNOWN:
        return frozenset({T, F, E})
    if value is _ERROR:
        return frozenset({E})
    if value is True:
        return frozenset({T})
    if value is False:
        return frozenset({F})
    return frozenset({E})


def _partial_value(enc: list[Any], context: Any, action: str) -> Any:
    kind = enc[0]
    if kind in ("and", "or", "not"):
        outs = outcomes(enc, context, action)
        if len(outs) == 1:
            (only,) = outs
            return {T: True, F: False, E: _ERROR}[only]
        return _UNKNOWN
    if "args" in roots(enc) or "resource" in roots(enc):
        # Every operand of a comparison, call or list is evaluated (no short
        # circuit), so an operand that certainly errors makes the whole an error.
        if kind == "cmp":
            children = [enc[2], enc[3]]
        elif kind == "call":
            children = list(enc[2])
        elif kind == "list":
            children = list(enc[1])
        else:
            children = []
        if any(_partial_value(c, context, action) is _ERROR for c in children):
            return _ERROR
        return _UNKNOWN
    try:
        return compile_expr(enc)((context, None, None, action))
    except EvalError:
        return _ERROR
    except Exception:
        return _ERROR


def permit_possible(enc: list[Any] | None, kind: str | None, context: Any, action: str) -> bool:
    """Could this permit's condition hold for some arguments?"""
    if enc is None:
        return True
    want = T if kind != "unless" else F
    return want in outcomes(enc, context, action)


def forbid_certain(enc: list[Any] | None, kind: str | None, context: Any, action: str) -> bool:
    """Does this forbid's condition hold (or fail closed) for every choice of arguments?"""
    if enc is None:
        return True
    applies = {T, E} if kind != "unless" else {F, E}
    return outcomes(enc, context, action) <= applies


# ------------------------------------------------------------------- unparse

_PREC = {"or": 1, "and": 2, "not": 3, "cmp": 4}


def unparse(enc: list[Any], parent: int = 0) -> str:
    """Encoded expression -> source text (minimal parentheses)."""
    import json

    kind = enc[0]
    if kind == "lit":
        v = enc[1]
        if v is True:
            return "true"
        if v is False:
            return "false"
        return json.dumps(v, ensure_ascii=False)
    if kind == "list":
        return "[" + ", ".join(unparse(e) for e in enc[1]) + "]"
    if kind == "ref":
        return ".".join([enc[1], *enc[2]])
    if kind == "call":
        return f"{enc[1]}(" + ", ".join(unparse(e) for e in enc[2]) + ")"
    prec = _PREC[kind]
    if kind == "cmp":
        text = f"{unparse(enc[2], prec + 1)} {enc[1]} {unparse(enc[3], prec + 1)}"
    elif kind in ("and", "or"):
        text = f"{unparse(enc[1], prec)} {kind} {unparse(enc[2], prec + 1)}"
    else:
        text = f"not {unparse(enc[1], prec)}"
    return f"({text})" if prec < parent else text


# ------------------------------------------------ joint reasoning over argument atoms
#
# ``outcomes`` looks at one condition at a time. A permit and a forbid often
# test the *same* argument (permit ... when args.mode == "x" / forbid ...
# unless args.mode != "x"); deciding them independently would list a tool no
# call can use. So argument atoms are reasoned about jointly:
#
# * ``a != b`` is ``not (a == b)`` and ``a not in b`` is ``not (a in b)``
#   (identical errors), so both spellings share one atom;
# * an atom comparing one argument ``args.p`` with a value known from the
#   context/literals is a function of that argument's value; the argument
#   ranges over every value such atoms mention, a fresh value, and "missing";
# * any other atom reading args/resource is a free true/false/error variable.
#
# Every combination is tried (bounded by ``MAX_JOINT_CASES``).

#: Beyond this many combinations, fall back to per-condition reasoning.
MAX_JOINT_CASES = 4096

_MISSING = object()
_FRESH = "\x00fresh\x00"  # a string no policy literal can equal


def _normal(node: list[Any]) -> list[Any]:
    if node[0] == "cmp" and node[1] == "!=":
        return ["not", ["cmp", "==", node[2], node[3]]]
    if node[0] == "cmp" and node[1] == "not in":
        return ["not", ["cmp", "in", node[2], node[3]]]
    return node


def _atom_key(enc: list[Any]) -> str:
    import json

    return json.dumps(enc, sort_keys=True, separators=(",", ":"))


def _reads_args(node: list[Any]) -> bool:
    r = roots(node)
    return "args" in r or "resource" in r


class JointSpace:
    """The argument atoms of a set of conditions and the values they range over."""

    def __init__(self, context: Any, action: str) -> None:
        self.context = context
        self.action = action
        # atom key -> (arg path, side, other value, op) for value atoms
        self.value_atoms: dict[str, tuple[tuple[str, ...], str, Any, str]] = {}
        self.domains: dict[tuple[str, ...], list[Any]] = {}
        self.free: list[str] = []

    def add(self, enc: list[Any] | None) -> None:
        """Register every argument atom of a condition."""
        if enc is not None:
            self._walk(enc)

    def _walk(self, node: list[Any]) -> None:
        node = _normal(node)
        kind = node[0]
        if kind in ("and", "or"):
            self._walk(node[1])
            self._walk(node[2])
            return
        if kind == "not":
            self._walk(node[1])
            return
        if not _reads_args(node):
            return
        if _partial_value(node, self.context, self.action) is _ERROR:
            return  # a certain error is a constant, not a variable
        key = _atom_key(node)
        if key in self.value_atoms or key in self.free:
            return
        if kind == "cmp" and node[1] in ("==", "in"):
            for side, mine, other in (("L", node[2], node[3]), ("R", node[3], node[2])):
                if mine[0] == "ref" and mine[1] == "args" and mine[2] and not _reads_args(other):
                    value = _partial_value(other, self.context, self.action)
                    if value is _UNKNOWN or value is _ERROR:
                        break
                    path = tuple(mine[2])
                    self.value_atoms[key] = (path, side, value, node[1])
                    dom = self.domains.setdefault(path, [_MISSING, _FRESH])
                    for candidate in _candidates(node[1], side, value):
                        if not any(
                            c is candidate or (type(c) is type(candidate) and c == candidate)
                            for c in dom
                        ):
                            dom.append(candidate)
                    return
        self.free.append(key)

    def size(self) -> int:
        """How many combinations ``cases`` yields."""
        n: int = 3 ** len(self.free)
        for dom in self.domains.values():
            n *= len(dom)
        return n

    def cases(self) -> Any:
        """Yield one assignment (atom key -> "T"/"F"/"E") per combination."""
        paths = list(self.domains)
        prefixes = self._prefix_conflicts(paths)
        for values in itertools.product(*(self.domains[p] for p in paths)):
            chosen = dict(zip(paths, values, strict=True))
            if prefixes and not self._consistent(chosen, prefixes):
                continue
            base: dict[str, str] = {}
            for key, (path, side, other, op) in self.value_atoms.items():
                base[key] = _value_atom(chosen[path], side, other, op)
            for free_values in itertools.product("TFE", repeat=len(self.free)):
                assign = dict(base)
                assign.update(zip(self.free, free_values, strict=True))
                yield assign

    @staticmethod
    def _prefix_conflicts(
        paths: list[tuple[str, ...]],
    ) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        return [(a, b) for a in paths for b in paths if a != b and b[: len(a)] == a]

    @staticmethod
    def _consistent(
        chosen: dict[tuple[str, ...], Any], pairs: list[tuple[tuple[str, ...], tuple[str, ...]]]
    ) -> bool:
        # args.a and args.a.b both constrained: args.a must then be an object,
        # which no candidate of args.a is, unless args.a.b is missing.
        return all(chosen[b] is _MISSING for _a, b in pairs)


def _candidates(op: str, side: str, value: Any) -> list[Any]:
    if op == "==":
        return [value]
    if side == "L":  # args.p in VALUE
        if isinstance(value, list | tuple):
            return list(value)
        if isinstance(value, str):
            return [value]
        if isinstance(value, Mapping):
            return [k for k in value if isinstance(k, str)]
        return []
    return [[value]]  # VALUE in args.p: a list holding it


def _value_atom(mine: Any, side: str, other: Any, op: str) -> str:
    if mine is _MISSING:
        return E
    try:
        if op == "==":
            return T if values_equal(mine, other) else F
        if side == "L":
            return T if contains(other, mine) else F
        return T if contains(mine, other) else F
    except EvalError:
        return E
    except Exception:
        return E


def outcome_under(enc: list[Any], context: Any, action: str, assign: Mapping[str, str]) -> str:
    """T/F/E of a boolean condition when each argument atom takes the value in ``assign``."""
    enc = _normal(enc)
    kind = enc[0]
    if kind == "and":
        a = outcome_under(enc[1], context, action, assign)
        return a if a != T else outcome_under(enc[2], context, action, assign)
    if kind == "or":
        a = outcome_under(enc[1], context, action, assign)
        return a if a != F else outcome_under(enc[2], context, action, assign)
    if kind == "not":
        return {T: F, F: T, E: E}[outcome_under(enc[1], context, action, assign)]
    if _reads_args(enc):
        key = _atom_key(enc)
        if key in assign:
            return assign[key]
        return E  # an argument atom that certainly errors
    (only,) = outcomes(enc, context, action)
    return only


def rule_applies_under(
    enc: list[Any] | None,
    kind: str | None,
    forbid: bool,
    context: Any,
    action: str,
    assign: Mapping[str, str],
) -> bool:
    """Whether a rule applies under an atom assignment (same fail-closed rule as ``decide``)."""
    if enc is None:
        return True
    result = outcome_under(enc, context, action, assign)
    if result == E:
        return forbid
    return (result == T) is (kind != "unless")
