"""Check 4 of a call (``arguments_problem``): the arguments, their schema error written
without leaking them, and the copy a handler is given (``handler_copy``).

``schema_problem`` writes the ``invalid_arguments`` detail. jsonschema's own
messages embed ``repr(instance)``; for an object or an array (at the root
that is the whole argument object) that is a copy of every argument, secret
ones included, in an escaping a plain string search for the secret does not
find. So a message is jsonschema's only when its instance is a scalar outside
any secret field (a scalar's repr is one of the encodings ``Redactor`` scrubs)
or when the validator names keys rather than the instance; otherwise the
message is written here from the validator and the JSON type alone.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

from jsonschema.exceptions import ValidationError

from sharedos.catalog.definition import ToolDefinition
from sharedos.catalog.schemaregex import ValidationTooCostly, best_error

#: deeper arguments are refused as invalid (no JSON tool input needs more, and
#: validating or copying them recursively would exhaust the stack)
MAX_ARGUMENT_DEPTH = 64
#: validators whose jsonschema message names keys (of the schema or the object), never the instance
_KEY_MESSAGES = frozenset(
    {"required", "additionalProperties", "unevaluatedProperties", "dependentRequired"}
)
_SCALARS = frozenset({str, int, bool, type(None)})
_NON_FINITE = "arguments hold a non-finite number (NaN or an infinity), which JSON does not have"
_ENCODE = json.JSONEncoder().encode


def json_type(value: object) -> str:
    """The JSON type name of a Python value (``object``, ``array``, ``string``, ...)."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return type(value).__name__


def shape_problem(value: Any, limit: int = MAX_ARGUMENT_DEPTH) -> str | None:
    """Why arguments cannot be taken as JSON, or None: nesting deeper than ``limit``;
    a non-finite number (NaN, an infinity), which JSON does not have and which no
    comparison can be trusted with (``NaN >= 0`` is false, so a ``minimum`` passes it);
    or an object with two keys that differ only by case. One iterative walk.

    Two such keys are two arguments to the policy (``args.path`` reads one of them),
    but one to an upstream that matches keys ignoring case, as Go's ``encoding/json``
    does when it fills a struct (the last key wins): the upstream would act on the
    value the policy never read."""
    # The walk runs on the event loop for every call: a 4 MiB body holds some two
    # million values, so a scalar is judged where its container is read and only
    # containers are stacked (before: a tuple and two ``isinstance`` per value, ~1 us
    # each, 1.8 s of every turn's loop for one such call).
    stack: list[tuple[Any, int]] = [(value, 1)]
    push = stack.append
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if len(item) > 1 and _keys_collide(item):
                return "arguments hold an object with two keys that differ only by case"
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            if type(item) is float and item - item != 0:
                return _NON_FINITE
            continue
        if depth > limit:
            return f"arguments nest deeper than {limit} levels"
        nested = depth + 1
        for child in children:
            kind = type(child)
            if kind in _SCALARS:  # a float needs a look: it may be non-finite
                continue
            if kind is float:
                if child - child != 0:
                    return _NON_FINITE
                continue
            push((child, nested))
    return None


def _keys_collide(obj: dict[Any, Any]) -> bool:
    """True when two string keys of ``obj`` are equal ignoring case (Unicode full case
    folding, which covers the simple folding Go matches keys with: ``K`` the Kelvin sign
    is ``k``, ``ſ`` is ``s``)."""
    folded = {key.casefold() if type(key) is str else key for key in obj}
    return len(folded) != len(obj)


def schema_problem(error: ValidationError, secret_names: Iterable[str]) -> str:
    """The ``invalid_arguments`` detail for ``error``: where, and what is wrong, never a repr of an object."""
    where = error.json_path
    top = error.absolute_path[0] if error.absolute_path else None
    validator = str(error.validator)
    if top is not None and top in frozenset(secret_names):
        return f"{where}: value does not satisfy {validator!r}"
    instance = error.instance
    if validator in _KEY_MESSAGES or type(instance) in _SCALARS or isinstance(instance, float):
        return f"{where}: {error.message}"
    if validator == "type":
        expected = error.validator_value
        wanted = " or ".join(expected) if isinstance(expected, list) else str(expected)
        return f"{where}: expected {wanted}, got {json_type(instance)}"
    return f"{where}: the {json_type(instance)} does not satisfy {validator!r}"


def arguments_problem(tool: ToolDefinition, args: Any) -> str | None:
    """Why ``args`` are not valid input for ``tool`` (the ``invalid_arguments`` detail), or None.

    An object, at most ``MAX_ARGUMENT_DEPTH`` deep, no non-finite number, valid for
    the tool's ``inputSchema`` (the accept-only shortcut first, the full validator
    as the judge).
    """
    if not isinstance(args, dict):
        return f"arguments must be a JSON object, got {json_type(args)}"
    shape = shape_problem(args, MAX_ARGUMENT_DEPTH)
    if shape is not None:
        return shape
    try:
        # The shortcut only ever says "certainly valid"; anything else goes to the
        # full validator, which is the judge.
        fast = tool.input_fast_check
        if fast is not None and fast(args):
            return None
        problem = best_error(tool.input_validator, args)
    except ValidationTooCostly as exc:
        return f"arguments could not be validated: {exc}"
    except Exception as exc:  # values no JSON could carry (hostile objects from a Python caller)
        return f"arguments could not be validated ({type(exc).__name__})"
    return schema_problem(problem, tool.secret_arguments) if problem is not None else None


def handler_copy(args: dict[str, Any], encoded: bytes | None) -> dict[str, Any]:
    """A copy of validated arguments that shares nothing with the caller's object (nor with
    the record): from their RFC 8785 bytes ``encoded`` when the fast encoder made them."""
    if all(type(v) in _SCALARS for v in args.values()):
        return dict(args)  # flat, immutable values: a shallow copy shares nothing
    if encoded is not None:
        decoded: dict[str, Any] = json.loads(encoded)
        return decoded
    try:
        copied: dict[str, Any] = json.loads(_ENCODE(args))
        return copied
    except (TypeError, ValueError):  # non-JSON values a Python caller passed; schema allowed them
        return copy.deepcopy(args)
