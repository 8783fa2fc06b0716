"""A sound, accept-only shortcut for validating arguments against simple object schemas.

Most tool schemas are a flat object: named properties of scalar type with a
few bounds, some required, perhaps ``additionalProperties: false``. For those,
``compile_fast_check`` builds a plain-Python predicate that answers "these
arguments certainly satisfy the schema" several times faster than walking
jsonschema's ``iter_errors``. It never answers "invalid": ``False`` means
"not decided here", and the caller then runs the full Draft 2020-12
validator, which also produces the error message. So a ``True`` must imply
validity under ``Draft202012Validator`` (no format assertion), and every
check below is at least as strict as the keyword it stands for:

* ``type``: the same Python types jsonschema's type checker accepts, except
  that floats with an integral value are left to the validator for
  ``integer``;
* ``minLength``/``maxLength``/``minimum``/``maximum``/``exclusive*``: the
  same comparisons, applied only to the instance types the keyword governs;
* ``enum`` only when every member is a string (jsonschema's bool/int
  distinction never arises).

A schema using any other keyword (``$ref``, ``items``, ``pattern``,
``oneOf``, nested ``properties`` ...) gets no shortcut (``None``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: keywords that never affect validity (Draft 2020-12 without format assertion)
_ANNOTATIONS = frozenset(
    {
        "description",
        "title",
        "default",
        "examples",
        "$comment",
        "format",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_ROOT_KEYS = frozenset({"type", "properties", "required", "additionalProperties", "$schema"})
_PROPERTY_KEYS = frozenset(
    {
        "type",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "enum",
    }
)
_SIMPLE_TYPES = frozenset({"string", "integer", "number", "boolean", "null", "object", "array"})

FastCheck = Callable[[dict[str, Any]], bool]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_ok(kind: str, value: object) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return _is_number(value)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "object":
        return isinstance(value, dict)
    return isinstance(value, list)  # "array"


def _compile_property(schema: Any) -> Callable[[Any], bool] | None:
    """A predicate for one property's subschema, or None when it is not simple."""
    if schema is True:
        return lambda value: True
    if not isinstance(schema, Mapping):
        return None  # False, or something the validator will judge
    keys = set(schema) - _ANNOTATIONS
    if not keys <= _PROPERTY_KEYS:
        return None
    kinds: tuple[str, ...] | None = None
    if "type" in schema:
        declared = schema["type"]
        listed = [declared] if isinstance(declared, str) else declared
        if not isinstance(listed, list) or not listed:
            return None
        if not all(isinstance(k, str) and k in _SIMPLE_TYPES for k in listed):
            return None
        kinds = tuple(listed)
    bounds: list[tuple[str, Any]] = []
    for key in ("minLength", "maxLength"):
        if key in schema:
            if not (isinstance(schema[key], int) and not isinstance(schema[key], bool)):
                return None
            bounds.append((key, schema[key]))
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in schema:
            if not _is_number(schema[key]):
                return None
            bounds.append((key, schema[key]))
    choices: frozenset[str] | None = None
    if "enum" in schema:
        members = schema["enum"]
        if not isinstance(members, list) or not all(type(m) is str for m in members):
            return None
        choices = frozenset(members)
    frozen_bounds = tuple(bounds)

    def check(value: Any) -> bool:
        if kinds is not None and not any(_type_ok(kind, value) for kind in kinds):
            return False
        if choices is not None and not (type(value) is str and value in choices):
            return False
        for key, limit in frozen_bounds:
            if key in ("minLength", "maxLength"):
                if isinstance(value, str):
                    size = len(value)  # code points, as jsonschema counts them
                    if size < limit if key == "minLength" else size > limit:
                        return False
            elif _is_number(value):
                if key == "minimum" and not value >= limit:
                    return False
                if key == "maximum" and not value <= limit:
                    return False
                if key == "exclusiveMinimum" and not value > limit:
                    return False
                if key == "exclusiveMaximum" and not value < limit:
                    return False
        return True

    return check


def compile_fast_check(schema: Mapping[str, Any]) -> FastCheck | None:
    """A predicate that returns True only for arguments ``schema`` certainly accepts.

    ``None`` when the schema is not a simple flat object schema (see the
    module docstring); then the full validator is the only judge.
    """
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return None
    if not set(schema) - _ANNOTATIONS <= _ROOT_KEYS:
        return None
    if "$schema" in schema and not isinstance(schema["$schema"], str):
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        return None
    if not all(isinstance(name, str) for name in required) or not isinstance(extra, bool):
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, subschema in properties.items():
        compiled = _compile_property(subschema)
        if compiled is None:
            return None
        checks[name] = compiled
    needed = tuple(dict.fromkeys(required))
    closed = extra is False

    def fast_check(args: dict[str, Any]) -> bool:
        for name in needed:
            if name not in args:
                return False
        for name, value in args.items():
            check = checks.get(name)
            if check is None:
                if closed:
                    return False
            elif not check(value):
                return False
        return True

    return fast_check
