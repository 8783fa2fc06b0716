"""JSON text in, JSON values out: the one reader for policy inputs, with no non-finite numbers.

Python's ``json`` reads ``NaN``, ``Infinity`` and ``-Infinity`` (and turns
``1e999`` into an infinity); JSON has none of them, and a policy comparison
cannot be trusted with one (``NaN > 1048576`` is false, so a forbid on a size
limit would let it through). Every JSON input the policy tools read -- ``eval``
request lines, ``--args``/``--context`` values and files, bundles -- goes
through ``loads``, which refuses them as invalid input.
"""

from __future__ import annotations

import json
from typing import Any

from sharedos.errors import PolicyLanguageError


class NonFiniteNumber(PolicyLanguageError, ValueError):
    """A JSON text holds ``NaN``, an infinity, or a number too large for a 64-bit float."""


def _constant(name: str) -> Any:
    raise NonFiniteNumber(f"{name} is not a JSON number (non-finite numbers are refused)")


def _float(text: str) -> float:
    value = float(text)
    if value - value != 0:
        shown = text if len(text) <= 24 else text[:20] + "..."
        raise NonFiniteNumber(f"{shown} is too large for a 64-bit float (refused, not rounded)")
    return value


def loads(text: str | bytes) -> Any:
    """``json.loads(text)`` that raises ``NonFiniteNumber`` (a ``ValueError``) on a
    non-finite number, and a ``ValueError`` on nesting too deep for the decoder's
    recursion (never a ``RecursionError``); otherwise the same values, errors included."""
    try:
        return json.loads(text, parse_constant=_constant, parse_float=_float)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def has_non_finite(value: Any) -> bool:
    """True when a float anywhere in ``value`` (a JSON-like value) is NaN or infinite."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            if item - item != 0:
                return True
        elif kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
    return False
