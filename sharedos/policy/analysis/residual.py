"""Residual conditions: a rule's condition with the context filled in.

With the context and action known, every part of a condition that reads
neither ``args`` nor ``resource`` has a value (true, false or an error). The
residual keeps the rest, with those values folded in: ``"admin" in
context.roles and args.mode == "x"`` is ``args.mode == "x"`` for an admin and
``false`` for anyone else. Folding keeps the three-valued meaning exactly
(``X and <error>`` stays as it is: it is false when X is false and an error
otherwise), so a residual applies to exactly the calls the rule applies to.
Whether it applies always, never or only under its residual is the partial
evaluator's answer (``partial.outcomes``: every argument atom may be true,
false or an error).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sharedos.policy.conditions import compile_expr, roots, unparse
from sharedos.policy.functions import EvalError
from sharedos.policy.partial import outcomes

T, F, E = "T", "F", "E"

#: How an error constant is shown inside a residual that keeps it.
_ERROR_NODE: list[Any] = ["ref", "<error>", []]


@dataclass(frozen=True, slots=True)
class Residual:
    """Whether a rule applies in a context: ``always``, ``never``, or ``maybe`` under the
    residual ``condition`` (source text, ``when ...``/``unless ...``), which reads the
    arguments and resource named in ``reads``."""

    applies: Literal["always", "never", "maybe"]
    condition: str | None = None
    reads: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"applies": self.applies, "condition": self.condition, "reads": list(self.reads)}


def residual(
    enc: list[Any] | None, kind: str | None, forbid: bool, context: Any, action: str
) -> Residual:
    """The residual of a rule's encoded condition (of ``kind``) for this context."""
    if enc is None:
        return Residual("always")
    # which outcomes the condition can have once the context is known (an argument
    # atom may be true, false or an error), and on which of them the rule applies
    possible = outcomes(enc, context, action)
    applies = {F if kind == "unless" else T} | ({E} if forbid else set())
    if possible <= applies:
        return Residual("always")
    if not possible & applies:
        return Residual("never")
    folded = _fold(enc, context, action)
    if isinstance(folded, str):  # pragma: no cover - outcomes() already knew it
        return Residual("always" if folded in applies else "never")
    reads = sorted(
        {
            ".".join((node[1], *node[2]))
            for node in _nodes(folded)
            if node[0] == "ref" and node[1] in ("args", "resource")
        }
    )
    if kind == "when unless" and _is_when_unless(folded):
        text = f"when {unparse(folded[1])} unless {unparse(folded[2][1])}"
    else:
        text = f"{'unless' if kind == 'unless' else 'when'} {unparse(folded)}"
    return Residual("maybe", text, tuple(reads))


def _is_when_unless(node: list[Any]) -> bool:
    return node[0] == "and" and len(node) == 3 and type(node[2]) is list and node[2][0] == "not"


def _nodes(enc: list[Any]) -> list[list[Any]]:
    out: list[list[Any]] = []
    stack = [enc]
    while stack:
        node = stack.pop()
        out.append(node)
        kind = node[0]
        if kind in ("and", "or", "not", "concat"):
            stack.extend(node[1:])
        elif kind == "cmp":
            stack.extend(node[2:4])
        elif kind in ("call", "list"):
            stack.extend(node[2] if kind == "call" else node[1])
    return out


def _const(value: str) -> list[Any]:
    return ["lit", True] if value == T else ["lit", False] if value == F else _ERROR_NODE


def _fold(node: list[Any], context: Any, action: str) -> str | list[Any]:
    """T, F or E when the value is known, else the node with known parts folded in."""
    kind = node[0]
    if kind in ("and", "or"):
        identity = T if kind == "and" else F
        kept: list[Any] = []
        for operand in node[1:]:
            part = _fold(operand, context, action)
            if isinstance(part, str):
                if part == identity:
                    continue  # 'x and true' is x, exactly (errors included)
                if not kept:
                    return part  # decided before anything unknown is reached
                kept.append(_const(part))
                break  # nothing after it is ever evaluated
            kept.append(part)
        if not kept:
            return identity
        return kept[0] if len(kept) == 1 else [kind, *kept]
    if kind == "not":
        inner = _fold(node[1], context, action)
        if isinstance(inner, str):
            return {T: F, F: T, E: E}[inner]
        return ["not", inner]
    if not ({"args", "resource"} & roots(node)):
        try:
            value = compile_expr(node)((context, None, None, action))
        except EvalError:
            return E
        except Exception:
            return E
        return T if value is True else F if value is False else E
    try:
        return _substitute(node, context, action)
    except _Errors:
        return E


class _Errors(Exception):
    """An operand known to error: the whole atom errors."""


def _literal(value: Any) -> list[Any] | None:
    if type(value) in (str, int, float, bool):
        return ["lit", value]
    if type(value) in (list, tuple):
        items = [_literal(v) for v in value]
        if all(i is not None for i in items):
            return ["list", items]
    return None


def _substitute(node: list[Any], context: Any, action: str) -> list[Any]:
    """An atom with each part that reads only the context replaced by its value."""
    kind = node[0]
    if kind == "lit":
        return node
    if not ({"args", "resource"} & roots(node)):
        try:
            value = compile_expr(node)((context, None, None, action))
        except Exception:
            raise _Errors from None
        return _literal(value) or node
    if kind == "cmp":
        return [
            "cmp",
            node[1],
            _substitute(node[2], context, action),
            _substitute(node[3], context, action),
        ]
    if kind == "call":
        return ["call", node[1], [_substitute(a, context, action) for a in node[2]]]
    if kind == "list":
        return ["list", [_substitute(a, context, action) for a in node[1]]]
    if kind == "concat":
        return ["concat", *(_substitute(a, context, action) for a in node[1:])]
    if kind in ("and", "or", "not"):
        folded = _fold(node, context, action)
        return _const(folded) if isinstance(folded, str) else folded
    return node
