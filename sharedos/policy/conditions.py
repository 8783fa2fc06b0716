"""Conditions: encoding, compilation to closures, runtime semantics (partial evaluation: ``partial``).

Encoded (JSON-ready) expression form, the one bundles store::

    ["lit", v] | ["list", [e...]] | ["ref", root, [name...]] | ["call", f, [e...]]
    | ["cmp", op, l, r] | ["and", e, e, ...] | ["or", e, e, ...] | ["not", e]
    | ["concat", e, e, ...] | ["has", root, [name...]]

Runtime semantics (fixed, documented in docs/policy-language.md):

* A missing attribute, a value of the wrong type (``"a" in 3``, ``not "x"``)
  or an unresolvable ``path(...)`` is an *error*. ``and``/``or`` short-circuit
  left to right, so an error on the right of a decided ``and``/``or`` is never
  reached.
* A rule whose condition errors is *indeterminate*: a permit does not apply, a
  forbid does apply (fail closed).
* ``has args.x`` is true when the attribute is present, false when it is not
  (never an error), so ``has args.x and args.x == "main"`` decides for a tool
  that lacks ``x`` instead of failing closed.
* ``==`` never equates a boolean with a number, at any depth; lists compare
  element-wise, objects key by key. A non-finite number is an error.
* ``in`` is membership in a list only (a string on the right is an error, not
  a substring test: that is ``contains``); ``< <= > >=`` order numbers only;
  ``+`` joins strings only.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from sharedos.policy.functions import (
    FUNCTIONS,
    EvalError,
    finite,
    member,
    values_equal,
    with_constant_items,
    with_constant_list,
)

if TYPE_CHECKING:
    from sharedos.policy import ast

#: Comparison operators that order numbers.
ORDERING = ("<", "<=", ">", ">=")

# Environment passed to compiled conditions: (context, args, resource, action).
Env = tuple[Any, Any, Any, Any]
Fn = Callable[[Env], Any]

_ROOT_INDEX = {"context": 0, "args": 1, "resource": 2, "action": 3}
#: "no value read yet" (distinct from every JSON value, None included)
_NO_VALUE: Any = object()

#: Encoded kinds whose closures always return a real ``bool`` (their operands of
#: ``and``/``or``/``not`` need no ``_truth`` check).
_BOOLEAN = frozenset(("cmp", "and", "or", "not", "has"))

_ORDER_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


# ----------------------------------------------------------------- encoding


def encode(expr: ast.Expr) -> list[Any]:
    """AST expression -> encoded form."""
    # Imported here: deciding (conditions from a bundle) never needs the AST classes.
    from sharedos.policy import ast as tree

    def enc(e: ast.Expr) -> list[Any]:
        if isinstance(e, tree.Literal):
            return ["lit", e.value]
        if isinstance(e, tree.ListExpr):
            return ["list", [enc(i) for i in e.items]]
        if isinstance(e, tree.Ref):
            return ["ref", e.root, list(e.path)]
        if isinstance(e, tree.Call):
            return ["call", e.func, [enc(a) for a in e.args]]
        if isinstance(e, tree.Compare):
            return ["cmp", e.op, enc(e.left), enc(e.right)]
        if isinstance(e, tree.BoolOp):
            return [e.op, *(enc(o) for o in e.operands)]
        if isinstance(e, tree.Concat):
            return ["concat", *(enc(o) for o in e.operands)]
        if isinstance(e, tree.Has):
            return ["has", e.ref.root, list(e.ref.path)]
        return ["not", enc(e.operand)]

    return enc(expr)


def operands(enc: list[Any]) -> list[list[Any]]:
    """The direct subexpressions of an encoded expression."""
    kind = enc[0]
    if kind == "list":
        return list(enc[1])
    if kind == "call":
        return list(enc[2])
    if kind == "cmp":
        return [enc[2], enc[3]]
    if kind in ("and", "or", "not", "concat"):
        return list(enc[1:])
    return []


def subexpressions(enc: list[Any]) -> Iterator[list[Any]]:
    """An encoded expression and all its subexpressions, pre-order (iterative: any depth).

    The encoded-form twin of ``ast.walk`` (bundles hold encoded conditions).
    """
    stack = [enc]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(operands(node)))


def roots(enc: list[Any]) -> set[str]:
    """Reference roots an encoded expression reads (a presence test reads its root)."""
    return {node[1] for node in subexpressions(enc) if node[0] == "ref" or node[0] == "has"}


# ------------------------------------------------------------------ values


def _truth(value: Any) -> bool:
    if value is True:
        return True
    if value is False:
        return False
    raise EvalError(f"expected a boolean, got {type(value).__name__}")


def _ordered(op: str, a: Any, b: Any) -> bool:
    """``a < b`` and friends: numbers only (booleans are not numbers)."""
    ta, tb = type(a), type(b)
    if ta not in (int, float) or tb not in (int, float):
        raise EvalError(f"'{op}' compares numbers, got {ta.__name__} and {tb.__name__}")
    finite(a)
    finite(b)
    if op == "<":
        return bool(a < b)
    if op == "<=":
        return bool(a <= b)
    if op == ">":
        return bool(a > b)
    return bool(a >= b)


def _concat(parts: list[Any]) -> str:
    for part in parts:
        if type(part) is not str:
            raise EvalError(f"'+' joins strings, got a {type(part).__name__}")
    return "".join(parts)


# --------------------------------------------------------------- compilation


#: Compiled closures of one program, shared by the rules that repeat a condition
#: or a comparison (``"team1" in context.roles`` in every rule of a team):
#: owned by a ``RuleTable``, never shared across programs.
Memo = dict[Any, Any]


def compile_expr(enc: list[Any], memo: Memo | None = None) -> Fn:
    """Encoded expression -> closure ``fn(env) -> value`` (raises ``EvalError``).

    With ``memo``, a comparison compiled before (the same encoded form) is
    reused: closures are pure functions of the environment."""
    kind = enc[0]
    if kind == "cmp" and memo is not None:
        key = repr(enc)  # deterministic for JSON values, and it tells 1, 1.0, True and "1" apart
        fn = memo.get(key)
        if fn is None:
            fn = memo[key] = compile_expr(enc)
        return fn
    if kind == "lit":
        value = enc[1]
        return lambda env: value
    if kind == "list":
        constant = _constant_list(enc)
        if constant is not None:
            # a constant list is built once (nothing reads a list to change it)
            return lambda env: constant
        items = [compile_expr(e) for e in enc[1]]
        return lambda env: [f(env) for f in items]
    if kind == "ref":
        return _compile_ref(enc[1], tuple(enc[2]))
    if kind == "has":
        return _compile_has(enc[1], tuple(enc[2]))
    if kind == "concat":
        parts = [compile_expr(e) for e in enc[1:]]
        return lambda env: _concat([f(env) for f in parts])
    if kind == "call":
        impl = FUNCTIONS[enc[1]].impl
        fargs = [compile_expr(e) for e in enc[2]]
        if len(fargs) == 1:
            (f0,) = fargs
            return lambda env: impl(f0(env))
        if len(fargs) == 2:
            f0, f1 = fargs
            constant = _constant_list(enc[2][1])
            one = with_constant_list(enc[1], constant) if constant is not None else None
            if one is not None:
                # ``any_in(context.roles, ["a", ...])``: the written list's set built once
                return lambda env: one(f0(env))
            written = _constant_list(enc[2][0])
            other = with_constant_items(enc[1], written) if written is not None else None
            if other is not None:
                # ``all_in(["a", "b"], args.tags)``: each string looked for, no set built
                return lambda env: other(f1(env))
            return lambda env: impl(f0(env), f1(env))
        return lambda env: impl(*(f(env) for f in fargs))
    if kind == "cmp":
        op = enc[1]
        fast = _compile_lit_ref(op, enc[2], enc[3]) or _compile_against_constant(op, enc[2], enc[3])
        if fast is not None:
            return fast
        left = compile_expr(enc[2])
        right = compile_expr(enc[3])
        if op == "==":
            return lambda env: values_equal(left(env), right(env))
        if op == "!=":
            return lambda env: not values_equal(left(env), right(env))
        if op == "in":
            return lambda env: _in(left, right, env)
        if op == "not in":
            return lambda env: not _in(left, right, env)
        return lambda env: _ordered(op, left(env), right(env))
    if kind == "and" or kind == "or":
        parts = [_boolean(e, memo) for e in enc[1:]]
        if len(parts) == 2:
            a, b = parts
            if kind == "and":
                return lambda env: a(env) and b(env)
            return lambda env: a(env) or b(env)
        if kind == "and":
            return lambda env: all(f(env) for f in parts)
        return lambda env: any(f(env) for f in parts)
    inner = _boolean(enc[1], memo)
    return lambda env: not inner(env)


def _boolean(enc: list[Any], memo: Memo | None) -> Callable[[Env], bool]:
    """The closure of an operand of ``and``/``or``/``not``: a real ``bool`` or ``EvalError``.

    Comparisons and boolean operators return real booleans already; anything
    else (a reference, a literal, a call) is checked by ``_truth``."""
    fn = compile_expr(enc, memo)
    if enc[0] in _BOOLEAN:
        return fn
    return lambda env: _truth(fn(env))


def _in(left: Fn, right: Fn, env: Env) -> bool:
    item = left(env)  # left to right, like every other operator
    return member(item, right(env))


def _compile_lit_ref(op: str, left: list[Any], right: list[Any]) -> Fn | None:
    """One closure for the commonest atoms, ``"x" in context.roles`` and
    ``context.tenant == "t"`` (a literal against a one-step reference), instead of
    three: a tenth of a large policy's compile is building these. Same order of
    evaluation and the same errors as the general form."""
    if op not in ("in", "not in", "==", "!="):
        return None
    if left[0] == "lit" and right[0] == "ref" and len(right[2]) == 1:
        value, root, name, lit_first = left[1], right[1], right[2][0], True
    elif left[0] == "ref" and right[0] == "lit" and len(left[2]) == 1 and op in ("==", "!="):
        value, root, name, lit_first = right[1], left[1], left[2][0], False
    else:
        return None
    idx = _ROOT_INDEX[root]
    missing = f"{root}.{name} is not defined"

    def read(env: Env) -> Any:
        base = env[idx]
        if type(base) is dict or isinstance(base, Mapping):
            try:
                return base[name]
            except KeyError:
                pass
        raise EvalError(missing)

    if op in ("in", "not in"):
        negate = op == "not in"
        if type(value) is str:

            def member_str(env: Env) -> bool:
                container = read(env)
                tc = type(container)
                found = (
                    value in container if tc is list or tc is tuple else member(value, container)
                )
                return not found if negate else found

            return member_str

        def member_any(env: Env) -> bool:
            found = member(value, read(env))
            return not found if negate else found

        return member_any
    equal = op == "=="
    if lit_first:
        return lambda env: values_equal(value, read(env)) is equal
    return lambda env: values_equal(read(env), value) is equal


def _constant_list(enc: list[Any]) -> list[Any] | None:
    """The values of a list expression made only of literals, else None."""
    if enc[0] != "list" or not all(e[0] == "lit" for e in enc[1]):
        return None
    return [e[1] for e in enc[1]]


def _compile_against_constant(op: str, left: list[Any], right: list[Any]) -> Fn | None:
    """One closure for an operand against a constant on the right: ``args.mode in
    ["a", "b"]`` (a set lookup for strings) and ``args.size <= 1000`` (the type check
    inline). Same order of evaluation, results and errors as the general form."""
    items = _constant_list(right) if op in ("in", "not in") else None
    if items is not None:
        if not all(type(v) is str for v in items):
            return None
        strings = frozenset(items)
        item_fn = compile_expr(left)
        negate = op == "not in"

        def in_strings(env: Env) -> bool:
            item = item_fn(env)
            if type(item) is str:
                found = item in strings
            else:
                found = any(values_equal(item, x) for x in items)
            return not found if negate else found

        return in_strings
    if op in _ORDER_OPS and right[0] == "lit" and type(right[1]) in (int, float):
        bound = right[1]
        value_fn = compile_expr(left)
        order = _ORDER_OPS[op]
        if left[0] == "ref" and len(left[2]) == 1:
            # ``args.size <= 10``: the one-step read inline (ref1's, same error)
            idx = _ROOT_INDEX[left[1]]
            name = left[2][0]

            def ordered_ref(env: Env) -> bool:
                base = env[idx]
                value = base.get(name, _NO_VALUE) if type(base) is dict else _NO_VALUE
                if value is _NO_VALUE:
                    value = value_fn(env)  # missing or not a dict: the general read
                tv = type(value)
                if tv is int or (tv is float and value - value == 0):
                    return order(value, bound)
                return _ordered(op, value, bound)

            return ordered_ref

        def ordered(env: Env) -> bool:
            value = value_fn(env)
            tv = type(value)
            if tv is int or (tv is float and value - value == 0):  # finite: not NaN, not inf
                return order(value, bound)
            return _ordered(op, value, bound)  # raises the error of the general form

        return ordered
    return None


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
            if type(base) is dict or isinstance(base, Mapping):
                try:
                    return base[name]
                except KeyError:
                    pass
            raise EvalError(f"{root}.{name} is not defined")

        return ref1

    def refn(env: Env) -> Any:
        value = env[idx]
        for name in path:
            if (type(value) is dict or isinstance(value, Mapping)) and name in value:
                value = value[name]
            else:
                raise EvalError(f"{'.'.join((root, *path))} is not defined")
        return value

    return refn


def _compile_has(root: str, path: tuple[str, ...]) -> Callable[[Env], bool]:
    """``has root.a.b``: every step is an object holding the next name (never an error)."""
    idx = _ROOT_INDEX[root]

    def has(env: Env) -> bool:
        value = env[idx]
        for name in path:
            if (type(value) is dict or isinstance(value, Mapping)) and name in value:
                value = value[name]
            else:
                return False
        return True

    return has


def compile_applies(
    enc: list[Any] | None, kind: str | None, forbid: bool, memo: Memo | None = None
) -> Callable[[Env], bool]:
    """Closure answering "does this rule apply?" with the fail-closed error rule
    (comparisons shared through ``memo``, see ``compile_expr``)."""
    if enc is None:
        return lambda env: True
    fn = compile_expr(enc, memo)
    want = kind != "unless"
    on_error = forbid
    if enc[0] in _BOOLEAN:  # the closure returns a real bool or raises: no _truth needed

        def applies_bool(env: Env) -> bool:
            try:
                return fn(env) is want
            except Exception:  # EvalError, or a hostile value: fail closed
                return on_error

        return applies_bool

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


def trace(enc: list[Any], env: Env) -> list[tuple[int, str, str]]:
    """Every sub-expression of a condition with what it evaluated to, for explanations.

    Returns ``(depth, source text, outcome)`` in pre-order; the outcome is the
    value as JSON, ``error: ...``, or ``not evaluated`` for operands an
    ``and``/``or`` never reached (the same short-circuit as ``decide``).
    """
    import json

    out: list[tuple[int, str, str]] = []

    def show(value: Any) -> str:
        try:
            return json.dumps(value, ensure_ascii=False, default=repr)[:200]
        except (TypeError, ValueError):
            return repr(value)[:200]

    def visit(node: list[Any], depth: int) -> Any:
        slot = len(out)
        out.append((depth, unparse(node), ""))
        kind = node[0]
        try:
            if kind in ("and", "or"):
                stop = kind == "or"  # or stops at the first true, and at the first false
                value = not stop
                for i, operand in enumerate(node[1:], start=1):
                    result = visit(operand, depth + 1)
                    if _truth(result) is stop:
                        value = stop
                        for rest in node[i + 1 :]:
                            out.append((depth + 1, unparse(rest), "not evaluated"))
                        break
            elif kind == "lit" or kind == "ref" or kind == "has":
                value = compile_expr(node)(env)
            else:
                # operands first (left to right), then this node as decide computes it
                for operand in operands(node):
                    visit(operand, depth + 1)
                value = compile_expr(node)(env)
        except EvalError as exc:
            out[slot] = (depth, out[slot][1], f"error: {exc}")
            raise
        except Exception as exc:
            out[slot] = (depth, out[slot][1], f"error: {type(exc).__name__}")
            raise EvalError(str(exc)) from None
        out[slot] = (depth, out[slot][1], show(value))
        return value

    with contextlib.suppress(EvalError):  # the failing node is already marked
        visit(enc, 0)
    return out


# ------------------------------------------------------------------- unparse

_PREC = {"or": 1, "and": 2, "not": 3, "cmp": 4, "concat": 5}


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
    if kind == "has":
        text = "has " + ".".join([enc[1], *enc[2]])
        return f"({text})" if _PREC["not"] < parent else text
    if kind == "call":
        return f"{enc[1]}(" + ", ".join(unparse(e) for e in enc[2]) + ")"
    prec = _PREC[kind]
    if kind == "cmp":
        text = f"{unparse(enc[2], prec + 1)} {enc[1]} {unparse(enc[3], prec + 1)}"
    elif kind in ("and", "or"):
        text = f" {kind} ".join(unparse(e, prec + 1) for e in enc[1:])
    elif kind == "concat":
        text = " + ".join(unparse(e, prec + 1) for e in enc[1:])
    else:
        text = f"not {unparse(enc[1], prec)}"
    return f"({text})" if prec < parent else text
