"""The accept-only argument shortcut: never accepts what the Draft 2020-12 validator rejects."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from sharedos.catalog.fastcheck import compile_fast_check

# values of every JSON type, plus the Python values that sit on type boundaries
# (bools vs ints, integral floats, NaN, non-BMP strings)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 1.0, 0.0, -0.0, True, False, 2.5, 3]),
    st.text(max_size=6),
    st.sampled_from(["", "a", "read", "write", "\U0001f600", "ab\U0001f600"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
TYPES = ["string", "integer", "number", "boolean", "null", "object", "array"]


@st.composite
def property_schemas(draw: st.DrawFn) -> Any:
    """Simple subschemas (what the shortcut handles) and a few it must decline."""
    if draw(st.integers(0, 12)) == 0:
        return draw(
            st.sampled_from([True, False, {"pattern": "^a"}, {"items": {"type": "string"}}])
        )
    schema: dict[str, Any] = {}
    if draw(st.booleans()):
        kinds = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True))
        schema["type"] = kinds[0] if len(kinds) == 1 and draw(st.booleans()) else kinds
    for key in ("minLength", "maxLength"):
        if draw(st.integers(0, 3)) == 0:
            schema[key] = draw(st.integers(0, 4))
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if draw(st.integers(0, 3)) == 0:
            schema[key] = draw(st.one_of(st.integers(-3, 3), st.floats(-3, 3)))
    if draw(st.integers(0, 4)) == 0:
        schema["enum"] = draw(
            st.lists(st.sampled_from(["a", "read", "", "1"]), min_size=1, unique=True)
        )
    if draw(st.booleans()):
        schema["description"] = "annotation only"
    if draw(st.integers(0, 6)) == 0:
        schema["format"] = "email"  # annotation only without a format checker
    return schema


@st.composite
def object_schemas(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(["a", "b", "path", "n"]), max_size=4, unique=True))
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: draw(property_schemas()) for name in names},
    }
    if names and draw(st.booleans()):
        schema["required"] = draw(
            st.lists(st.sampled_from(names), max_size=len(names), unique=True)
        )
    extra = draw(st.sampled_from([None, True, False]))
    if extra is not None:
        schema["additionalProperties"] = extra
    return schema


@settings(max_examples=400, deadline=None)
@given(object_schemas(), st.dictionaries(st.sampled_from(["a", "b", "path", "n", "x"]), VALUES))
def test_never_accepts_what_the_validator_rejects(
    schema: dict[str, Any], args: dict[str, Any]
) -> None:
    Draft202012Validator.check_schema(schema)
    check = compile_fast_check(schema)
    if check is not None and check(args):
        assert Draft202012Validator(schema).is_valid(args), (schema, args)


@settings(max_examples=200, deadline=None)
@given(object_schemas(), st.dictionaries(st.sampled_from(["a", "b", "path", "n", "x"]), VALUES))
def test_plain_schemas_agree_with_the_validator_on_plain_values(
    schema: dict[str, Any], args: dict[str, Any]
) -> None:
    """Where the shortcut applies and no float/bool boundary is involved, it decides the same way
    (so the shortcut is actually taken, not merely harmless)."""

    def plain(value: Any) -> bool:
        if isinstance(value, float):
            return False
        if isinstance(value, dict):
            return all(plain(v) for v in value.values())
        if isinstance(value, list):
            return all(plain(v) for v in value)
        return True

    check = compile_fast_check(schema)
    if check is None or not plain(args):
        return
    assert check(args) == Draft202012Validator(schema).is_valid(args), (schema, args)


def test_common_tool_schemas_get_the_shortcut_and_decide_correctly() -> None:
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "absolute path", "minLength": 1},
            "limit": {"type": "integer", "minimum": 1},
            "mode": {"enum": ["read", "write"]},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    check = compile_fast_check(schema)
    assert check is not None
    assert check({"path": "/a", "limit": 2, "mode": "read"})
    assert not check({})  # missing required
    assert not check({"path": ""})  # minLength
    assert not check({"path": "/a", "limit": 0})  # minimum
    assert not check({"path": "/a", "limit": True})  # a bool is not an integer
    assert not check({"path": "/a", "mode": "delete"})  # enum
    assert not check({"path": "/a", "other": 1})  # additionalProperties false


def test_schemas_beyond_the_simple_subset_get_no_shortcut() -> None:
    for schema in (
        {"type": "object", "properties": {"p": {"type": "string", "pattern": "^/"}}},
        {"type": "object", "properties": {"p": {"$ref": "#/$defs/x"}}, "$defs": {"x": {}}},
        {"type": "object", "properties": {"p": {"type": "array", "items": {"type": "string"}}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
        {"type": "object", "properties": {"p": {"enum": [1, True]}}},
        {"type": "object", "properties": {"p": False}},
    ):
        assert compile_fast_check(schema) is None, schema
