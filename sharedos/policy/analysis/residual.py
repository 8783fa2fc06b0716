"""Residual conditions: a rule's condition with the context filled in.

With the context and action known, every part of a condition that reads
neither ``args`` nor ``resource`` has a value (true, false or an error), but
for the members of ``context.now`` the context does not give (none, when it
holds no time): the time of the call is supplied per call, and listing
(``could_permit``) treats it as unknown, like the arguments, so a residual
keeps it (``when context.now.hour < 12``). The
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sharedos.policy.clock import FIELDS
from sharedos.policy.conditions import compile_expr, subexpressions, unparse
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
    #: a forbid's ``maybe`` that also holds where the condition cannot be evaluated
    #: (an argument it reads missing or of another type): it fails closed there
    fails_closed: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "applies": self.applies,
            "condition": self.condition,
            "reads": list(self.reads),
            "fails_closed": self.fails_closed,
        }

    @property
    def shown(self) -> str:
        """The condition as the text form prints it (empty when there is none): a
        forbid's says it also applies where the condition cannot be evaluated."""
        if not self.condition:
            return ""
        if self.fails_closed:
            return f" {self.condition} (or where that cannot be evaluated)"
        return f" {self.condition}"


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
    if isinstance(folded, str):  # the context gives the members of 'now' it reads
        return Residual("always" if folded in applies else "never")
    # outcomes() takes every member of context.now as unknown; the folded condition
    # holds those the context gives: 'A and context.now.hour < 12' at 13:00 is
    # 'A and false', which never applies (it was shown as an allow)
    possible = outcomes(folded, context, action)
    if E in possible and not may_error(folded):
        # outcomes() weighs each atom alone: 'has args.n and args.n == 1' cannot err
        possible -= {E}
    if possible <= applies:
        return Residual("always")
    if not possible & applies:
        return Residual("never")
    reads = sorted(
        {
            ".".join((node[1], *node[2]))
            for node in _nodes(folded)
            if node[0] == "ref" and _unknown(node, context)
        }
    )
    if kind == "when unless" and _is_when_unless(folded):
        text = f"when {unparse(folded[1])} unless {unparse(folded[2][1])}"
    else:
        text = f"{'unless' if kind == 'unless' else 'when'} {unparse(folded)}"
    return Residual("maybe", text, tuple(reads), forbid and E in possible and may_error(folded))


def may_error(node: list[Any], present: frozenset[tuple[str, ...]] = frozenset()) -> bool:
    """Can a residual (the context filled in) fail to evaluate for some arguments?

    An argument read may be missing (unless a ``has`` before it in the same
    ``and``, or a ``not has`` in the same ``or``, says it is there: ``present``)
    or of any type, so an ordering, a membership in what is not a list literal,
    a function or a join that reads one can fail; an equality of present values
    cannot, nor can ``has``. The resource and the time of the call are always
    there. Over-approximate: True whenever in doubt."""
    kind = node[0]
    if kind in ("lit", "has"):
        return False
    if kind == "ref":
        if node[1] == "args":
            return tuple(node[2]) not in present
        return node[1] not in ("resource", "context")
    if kind in ("and", "or"):
        known = set(present)
        for operand in node[1:]:
            if may_error(operand, frozenset(known)):
                return True
            inner = operand[1] if operand[0] == "not" else operand
            if inner[0] == "has" and inner[1] == "args" and (operand[0] == "not") == (kind == "or"):
                known.add(tuple(inner[2]))
        return False
    if kind == "not":
        return may_error(node[1], present)
    if kind == "list":
        return any(may_error(item, present) for item in node[1])
    if kind == "cmp":
        op, left, right = node[1], node[2], node[3]
        if may_error(left, present) or may_error(right, present):
            return True
        if op in ("==", "!="):
            return False
        if op in ("in", "not in"):
            is_list = right[0] == "list" or (right[0] == "lit" and type(right[1]) is list)
            return not is_list
        return _reads_args(left) or _reads_args(right)
    # a function or a join: its arguments' types are what the call sends, and a
    # segment of the resource may be out of range
    return _reads_args(node) or any(
        (sub[0] == "ref" and sub[1] not in ("resource", "context"))
        or (sub[0] == "call" and sub[1] == "segment")
        for sub in _nodes(node)
    )


def _unknown(node: list[Any], context: Any) -> bool:
    """Does ``node`` read what the context does not fix: the arguments, the resource, or
    a member of the time of the call (``context.now``) the context does not give?"""
    for sub in subexpressions(node):
        if sub[0] in ("ref", "has"):
            if sub[1] in ("args", "resource"):
                return True
            if (
                sub[1] == "context"
                and list(sub[2][:1]) == ["now"]
                and not _time_given(context, sub[2][1:2])
            ):
                return True
    return False


def _time_given(context: Any, member: Sequence[Any]) -> bool:
    """Does ``context`` give the member of ``context.now`` named in ``member`` (empty:
    the whole time)? A context without a ``now`` object gives none of it; one holding
    some members (``{"hour": 9}``: nine o'clock, any day) gives those alone: every
    call has a time with every member (``clock.FIELDS``), so the others are unknown,
    as the arguments are, never missing. A name that is no member of a time is never
    there, and is known to be missing."""
    now = context.get("now") if isinstance(context, Mapping) else None
    if not isinstance(now, Mapping):
        return False
    if not member:
        return all(name in now for name in FIELDS)
    return member[0] in now or member[0] not in FIELDS


def _reads_args(node: list[Any]) -> bool:
    return any(sub[0] == "ref" and sub[1] == "args" for sub in _nodes(node))


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
    if not _unknown(node, context):
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
    if not _unknown(node, context):
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
