"""Every regex a tool schema holds is matched by RE2: in linear time, with no way back to ``re``."""

from __future__ import annotations

import time
from typing import Any

import pytest
from referencing import Registry

from sharedos.catalog.schemaregex import regex_error, schema_validator
from tests.timing import cpu_bound

#: Python's re needs about 2 s of CPU to say this string does not match ``^(a|aa)+$``
SLOW_FOR_RE = "a" * 36 + "!"
OVERLAPPING = "^(a|aa)+$"
DRAFT7 = "http://json-schema.org/draft-07/schema#"


def _valid(schema: object, instance: object) -> bool:
    return bool(schema_validator(schema, Registry()).is_valid(instance))


def _cpu(fn: object) -> float:
    t0 = time.process_time()
    fn()  # type: ignore[operator]
    return time.process_time() - t0


def _nested(inner: object) -> dict[str, object]:
    return {"s": inner}


@pytest.mark.parametrize(
    ("schema", "wrap"),
    [
        ({"type": "string", "pattern": OVERLAPPING}, None),
        # a subschema naming its dialect: jsonschema would switch to its stock (re) validator
        ({"properties": {"s": {"$schema": DRAFT7, "pattern": OVERLAPPING}}}, _nested),
        # so would a $ref back to a root naming one
        (
            {
                "$schema": DRAFT7,
                "properties": {"s": {"pattern": OVERLAPPING}, "t": {"$ref": "#"}},
            },
            lambda inner: {"t": {"s": inner}},
        ),
    ],
    ids=["pattern", "nested-dialect", "ref-to-dialect-root"],
)
def test_an_ambiguous_pattern_answers_in_linear_time(schema: dict[str, object], wrap: Any) -> None:
    def instance(text: str) -> object:
        return text if wrap is None else wrap(text)

    spent = _cpu(lambda: _valid(schema, instance(SLOW_FOR_RE)))
    assert spent < cpu_bound(0.2), spent
    assert not _valid(schema, instance(SLOW_FOR_RE))
    assert not _valid(schema, instance("aab"))
    assert _valid(schema, instance("aaaa"))


def test_names_weighed_for_additional_properties_are_matched_by_re2() -> None:
    schema = {
        "type": "object",
        "patternProperties": {OVERLAPPING: {"type": "integer"}},
        "additionalProperties": False,
    }
    spent = _cpu(lambda: _valid(schema, {SLOW_FOR_RE: 1}))
    assert spent < cpu_bound(0.2), spent
    assert not _valid(schema, {SLOW_FOR_RE: 1})
    assert _valid(schema, {"aaa": 1})
    assert not _valid(schema, {"aaa": "not an integer"})


def test_digits_and_word_characters_are_ascii_as_in_json_schema() -> None:
    # ECMA-262 (JSON Schema's dialect) and RE2 agree; Python's re took Arabic-Indic digits
    assert not _valid({"type": "string", "pattern": r"^\d+$"}, "١٢")
    assert _valid({"type": "string", "pattern": r"^\d+$"}, "12")
    # a nested dialect reads the same
    assert not _valid({"$schema": DRAFT7, "type": "string", "pattern": r"^\d+$"}, "١٢")


def test_a_value_re2_cannot_read_fails_closed() -> None:
    lone = "a\ud800"  # a lone surrogate: valid JSON text, not UTF-8
    assert not _valid({"type": "string", "pattern": "a"}, lone)
    # a name no pattern can be asked about is neither let through nor skipped
    assert not _valid(
        {"type": "object", "patternProperties": {"^a": {"type": "integer"}}}, {lone: 1}
    )
    assert not _valid(
        {"type": "object", "patternProperties": {"^b": {}}, "additionalProperties": False},
        {lone: 1},
    )


def test_a_regex_re2_cannot_compile_is_never_matched() -> None:
    assert regex_error("(?=a)a") is not None
    assert regex_error("^(a|aa)+$") is None
    # reached anyway (a schema not checked at listing): the value fails, nothing hangs
    assert not _valid({"type": "string", "pattern": "(?=a)a"}, "a")


def test_a_validation_stops_at_its_budget_of_references() -> None:
    """References that share their targets make the work exponential in the schema's
    size; ``best_error`` stops at a budget (linear in the value) instead."""
    from sharedos.catalog.schemaregex import REFS_BASE, ValidationTooCostly, best_error

    defs: dict[str, object] = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(40)
    }
    defs["d40"] = {"type": "string"}
    validator = schema_validator({"$ref": "#/$defs/d0", "$defs": defs}, Registry())
    with pytest.raises(ValidationTooCostly):
        best_error(validator, 1)
    assert best_error(validator, "fine") is None  # anyOf stops at the first branch that holds
    # a recursive schema over a large value is not cut short: the budget grows with it
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    wide = {"kids": [{"kids": []} for _ in range(REFS_BASE * 2)]}
    assert best_error(schema_validator(tree, Registry()), wide) is None
