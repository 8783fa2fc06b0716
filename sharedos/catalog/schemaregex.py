"""Schema regexes (``pattern``, ``patternProperties``) matched by RE2, in linear time.

jsonschema matches them with Python's ``re``, a backtracking matcher that holds
the GIL while it runs. A schema comes from whoever lists a tool (an upstream
MCP server), and the string matched from whoever calls it (the harness) or
from the upstream's own result, so a pattern like ``^(x+)+$`` or ``(a|aa)+$``
and 40 characters of input froze every turn of the host for hours. Spotting
such patterns by their shape catches some forms and misses others; RE2
(``google-re2``) has no backtracking at all, so every pattern it compiles
matches in time linear in the input, whatever its shape.

RE2 does not compile what needs backtracking (lookaround, backreferences)
nor text that is no regex: ``regex_error`` says why, and such a schema is
refused where it enters (``sharedos.upstream.definitions``); the validator
here never falls back to ``re``. Its dialect is closer to JSON Schema's
(ECMA-262) than ``re``'s: ``\\d`` and ``\\w`` are ASCII, ``\\p{L}`` works.
A string RE2 cannot take (a lone surrogate, not UTF-8) fails ``pattern``,
and a property name it cannot take fails ``patternProperties``: an answer
that cannot be computed never lets a value through.

Two more ways jsonschema reaches ``re`` are closed here, not left to chance:

* ``additionalProperties`` weighs each name against the ``patternProperties``
  (jsonschema joins them into one ``re``): replaced, with RE2;
* a subschema naming a dialect (``"$schema"``), or a ``$ref`` back to one that
  does, makes jsonschema switch to its stock validator for that dialect, which
  matches with ``re``: this validator's ``evolve`` keeps its own class, so
  every subschema is read as Draft 2020-12 (MCP's dialect, and what the root
  already was).

``unevaluatedProperties`` also matches names against ``patternProperties``
with ``re``, inside jsonschema; ``regex_problem`` refuses a schema that has
both rather than rewrite that walk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

import attrs
import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError, best_match

from sharedos.catalog.ecmaregex import ecma_problem
from sharedos.errors import CatalogError

__all__ = [
    "SchemaValidator",
    "ValidationTooCostly",
    "best_error",
    "dialect_problem",
    "dialect_validator",
    "names_other_dialect",
    "regex_error",
    "regex_problem",
    "schema_validator",
]


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would print the (upstream's) pattern raw on stderr
    options.never_capture = True  # only "is there a match" is asked
    return options


_OPTIONS = _options()


@lru_cache(maxsize=2048)
def _compiled(pattern: str) -> Any:
    """RE2's program for ``pattern``, or the text of why it has none (a ``str``)."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        return str(reason) or "not a regular expression RE2 can match"
    except (TypeError, ValueError, UnicodeError) as exc:  # a lone surrogate in the pattern
        return f"not a regular expression RE2 can match ({type(exc).__name__})"


def regex_error(pattern: str) -> str | None:
    """Why ``pattern`` cannot be matched in linear time (RE2 cannot compile it), or None."""
    program = _compiled(pattern)
    return program if isinstance(program, str) else None


def _search(pattern: str, text: str) -> bool | None:
    """True when ``pattern`` matches somewhere in ``text``; None when that cannot be known
    (the pattern does not compile, or ``text`` is not encodable as UTF-8)."""
    program = _compiled(pattern)
    if isinstance(program, str):
        return None
    try:
        return program.search(text) is not None
    except (UnicodeError, TypeError, ValueError):
        return None


def _pattern(
    validator: Any, pattern: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string") or not isinstance(pattern, str):
        return
    found = _search(pattern, instance)
    if found is None:
        yield ValidationError(f"the value cannot be matched against {pattern!r}")
    elif not found:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object") or not isinstance(patterns, Mapping):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            found = _search(pattern, name)
            if found is None:
                yield ValidationError(
                    f"a property name cannot be matched against {pattern!r}", path=(name,)
                )
            elif found:
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    if not isinstance(properties, Mapping) or not isinstance(patterns, Mapping):
        return
    # a name no pattern can be asked about counts as additional: the stricter reading
    extras = sorted(
        (
            name
            for name in instance
            if name not in properties and not any(_search(p, name) for p in patterns)
        ),
        key=str,
    )
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        # jsonschema's own wording, which callers and tests know
        one = len(extras) == 1
        shown = ", ".join(repr(name) for name in extras)
        if patterns:
            listed = ", ".join(repr(p) for p in sorted(patterns))
            verb = "does" if one else "do"
            yield ValidationError(f"{shown} {verb} not match any of the regexes: {listed}")
        else:
            verb = "was" if one else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({shown} {verb} unexpected)"
            )


class ValidationTooCostly(CatalogError, RuntimeError):
    """A validation that resolved more references than its budget (``best_error``)."""


#: references a validation may still resolve (a one-item list), or None: no budget
_REFS_LEFT: ContextVar[list[int] | None] = ContextVar("sharedos_schema_refs_left", default=None)
#: references every validation may resolve, and how many more per JSON value validated
REFS_BASE = 2_000
REFS_PER_VALUE = 8


def _counted(keyword: Callable[..., Any]) -> Callable[..., Iterator[ValidationError]]:
    """``keyword`` (a reference keyword: ``$ref``, ``$dynamicRef``...) spending the budget.

    A schema's references may share their targets: ``d0: {anyOf: [{$ref: d1}, {$ref:
    d1}]}``, ``d1`` the same over ``d2``... makes a 2 KB schema take 2^30 descents for
    one value that fails it (minutes, on the event loop, for every turn of the host).
    Every descent that does not follow a reference goes one level into the schema, so
    the references are what the budget counts."""

    def counted(
        validator: Any, value: Any, instance: Any, schema: Mapping[str, Any]
    ) -> Iterator[ValidationError]:
        left = _REFS_LEFT.get()
        if left is not None:
            left[0] -= 1
            if left[0] < 0:
                raise ValidationTooCostly(
                    "checking the value against the schema follows more references than "
                    "it is worth (the schema's references fan out)"
                )
        yield from keyword(validator, value, instance, schema)

    return counted


#: the types of JSON scalars (counted where their container is read, never stacked)
_SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})


def _values(instance: Any) -> int:
    """How many JSON values ``instance`` holds (itself included).

    Runs on the event loop for every call: a container's scalars are counted by its
    length and only its containers are stacked (before: an ABC ``isinstance`` per
    value, ~1 us each, 2.5 s of every turn's loop for a 4 MiB argument array)."""
    count, stack = 1, [instance]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        count += len(children)
        stack.extend([child for child in children if type(child) not in _SCALAR_TYPES])
    return count


def best_error(validator: Any, instance: Any) -> ValidationError | None:
    """``best_match(validator.iter_errors(instance))`` within a budget of references
    (``REFS_BASE`` plus ``REFS_PER_VALUE`` per JSON value in ``instance``); over it,
    ``ValidationTooCostly``: an answer that would take too long is no answer."""
    token = _REFS_LEFT.set([REFS_BASE + REFS_PER_VALUE * _values(instance)])
    try:
        return best_match(validator.iter_errors(instance))
    finally:
        _REFS_LEFT.reset(token)


def _reference_keywords(base: Any) -> dict[str, Any]:
    """``base``'s reference keywords, counted (see ``_counted``)."""
    return {
        name: _counted(base.VALIDATORS[name])
        for name in ("$ref", "$dynamicRef", "$recursiveRef")
        if name in base.VALIDATORS
    }


#: Draft 2020-12, with every regex of a schema matched by RE2 and its references counted
SchemaValidator = validators.extend(
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        **_reference_keywords(Draft202012Validator),
    },
)


def _evolve(self: Any, **changes: Any) -> Any:
    # jsonschema's own ``evolve`` picks the stock validator of any subschema naming a
    # dialect (``validator_for``), and the stock validators match with ``re``.
    changes.setdefault("schema", self.schema)
    for attr_name, init_name in _INIT_FIELDS:
        if init_name not in changes:
            changes[init_name] = getattr(self, attr_name)
    return SchemaValidator(**changes)


_INIT_FIELDS = tuple((f.name, f.alias) for f in attrs.fields(SchemaValidator) if f.init)
SchemaValidator.evolve = _evolve

#: schema keywords whose values are data, not schemas (a "pattern" member there is text)
_DATA_KEYWORDS = frozenset({"default", "examples", "const", "enum"})
#: schema keywords whose values map names (not keywords) to schemas
_NAMED_SCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)


def schema_validator(schema: Any, registry: Any) -> Any:
    """A ``SchemaValidator`` for ``schema``: every subschema read as Draft 2020-12 (a
    ``$schema`` inside changes nothing), every regex matched by RE2, references resolved
    through ``registry`` only."""
    return SchemaValidator(schema, registry=registry)


#: the RE2 keywords every dialect's validator gets
_RE2_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}
#: a stock dialect validator -> its RE2 form (Draft 2020-12's is ``SchemaValidator``)
_DIALECTS: dict[Any, Any] = {}


def _dialect_of(schema: Any, default: Any) -> Any:
    """The stock validator of the dialect ``schema`` names (``$schema``), else ``default``."""
    if isinstance(schema, Mapping) and isinstance(schema.get("$schema"), str):
        return validators.validator_for(schema, default=default)
    return default


def _re2_dialect(base: Any) -> Any:
    """``base`` (a stock dialect validator) with every regex matched by RE2."""
    found = _DIALECTS.get(base)
    if found is None:
        found = validators.extend(base, {**_RE2_KEYWORDS, **_reference_keywords(base)})
        found.evolve = _dialect_evolve
        _DIALECTS[base] = found
    return found


def _dialect_evolve(self: Any, **changes: Any) -> Any:
    # as jsonschema's own ``evolve``: a subschema naming a dialect is read in it (the RE2
    # form of it, never the stock validator, which matches with ``re``)
    schema = changes.setdefault("schema", self.schema)
    for attr_name, init_name in _INIT_FIELDS:
        if init_name not in changes:
            changes[init_name] = getattr(self, attr_name)
    named = _dialect_of(schema, None)
    return (type(self) if named is None else _re2_dialect(named))(**changes)


def dialect_validator(schema: Any, registry: Any) -> Any:
    """A validator for ``schema`` that reads it as a client does: in the dialect its
    ``$schema`` names (Draft 2020-12 when none, or one jsonschema does not know), a
    subschema naming another dialect in that one; every regex matched by RE2, references
    resolved through ``registry`` only.

    For a tool's ``outputSchema``: the MCP SDK clients validate a result in the dialect
    the schema declares (``validator_for``), so a result SharedOS relays must satisfy the
    schema read that way (a draft-07 ``dependencies`` is no keyword in Draft 2020-12).
    """
    return _re2_dialect(_dialect_of(schema, Draft202012Validator))(schema, registry=registry)


def names_other_dialect(schema: Any) -> bool:
    """True when ``schema``'s ``$schema`` names a dialect other than Draft 2020-12."""
    return _dialect_of(schema, Draft202012Validator) is not Draft202012Validator


def dialect_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a valid schema of the dialect its ``$schema`` names, or None
    (also when it names none: Draft 2020-12, checked where the schema enters)."""
    base = _dialect_of(schema, Draft202012Validator)
    if base is Draft202012Validator:
        return None
    try:
        base.check_schema(schema)
    except SchemaError as exc:
        return f"it is not a valid {schema.get('$schema')} schema: {exc.message}"
    return None


def _keys_anywhere(tree: Any, wanted: frozenset[str]) -> set[str]:
    """Which of ``wanted`` are a member name anywhere in ``tree`` (data included)."""
    found: set[str] = set()
    stack = [tree]
    while stack and found != wanted:
        node = stack.pop()
        if isinstance(node, Mapping):
            found.update(wanted.intersection(node))
            stack.extend(v for v in node.values() if isinstance(v, Mapping | list))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, Mapping | list))
    return found


_UNEVALUATED_PAIR = frozenset({"unevaluatedProperties", "patternProperties"})


def regex_problem(schema: Any, field: str, *, ecma: bool = False) -> str | None:
    """Why ``schema`` cannot be validated in linear time, or None: a ``pattern`` or a
    ``patternProperties`` name RE2 cannot compile, or ``unevaluatedProperties`` beside
    ``patternProperties`` (see the module docstring). ``field`` starts the place named.

    ``ecma``: such a regex must also be ECMA-262 syntax (``ecmaregex``), as an
    outputSchema's must: the harnesses' MCP clients compile those when they list tools,
    and refuse the whole listing for one they cannot."""
    stack: list[tuple[Any, str]] = [(schema, field)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, list):
            stack.extend((item, f"{where}[{i}]") for i, item in enumerate(node))
            continue
        if not isinstance(node, Mapping):
            continue
        for key, value in node.items():
            if key in _DATA_KEYWORDS:
                continue
            at = f"{where}.{key}"
            if key == "pattern" and isinstance(value, str):
                error = regex_error(value)
                if error is not None:
                    return f"{at} is a regular expression RE2 cannot match ({error})"
                error = ecma_problem(value) if ecma else None
                if error is not None:
                    return f"{at} is a regular expression MCP clients cannot compile ({error})"
            elif key == "patternProperties" and isinstance(value, Mapping):
                for name in value:
                    error = regex_error(name) if isinstance(name, str) else "not text"
                    if error is not None:
                        return f"{at} has a regular expression RE2 cannot match ({error})"
                    error = ecma_problem(name) if ecma else None
                    if error is not None:
                        return f"{at} has a regular expression MCP clients cannot compile ({error})"
            if key in _NAMED_SCHEMAS and isinstance(value, Mapping):
                stack.extend((sub, f"{at}.{name}") for name, sub in value.items())
            elif isinstance(value, Mapping | list):
                stack.append((value, at))
    if _keys_anywhere(schema, _UNEVALUATED_PAIR) == _UNEVALUATED_PAIR:
        return (
            f"{field} has unevaluatedProperties and patternProperties: jsonschema would "
            "match those names with a backtracking regex"
        )
    return None
