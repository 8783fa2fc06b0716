"""Schema checks remembered by content hash: a changed schema is always checked again."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sharedos.catalog import ToolDefinition
from sharedos.catalog.schemacheck import SCHEMA_CHECKS, SchemaChecks, check_schema

GOOD: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
}


def test_the_same_schema_is_checked_once_and_a_changed_one_again() -> None:
    checks = SchemaChecks()
    assert checks.problem(GOOD) is None
    assert checks.problem(copy.deepcopy(GOOD)) is None  # equal content: remembered
    assert checks.checked == 1
    changed = copy.deepcopy(GOOD)
    changed["properties"]["n"]["minimum"] = "zero"  # no longer a valid JSON Schema
    assert checks.problem(changed) == check_schema(changed) is not None
    assert checks.checked == 2
    # and the verdicts stay apart in both directions
    assert checks.problem(GOOD) is None
    assert checks.problem(changed) is not None
    assert checks.checked == 2


def test_bounded() -> None:
    checks = SchemaChecks(maxsize=4)
    for i in range(10):
        checks.problem({"type": "object", "properties": {f"p{i}": {"type": "string"}}})
    assert len(checks) == 4


def test_an_uncanonicalizable_schema_is_checked_every_time() -> None:
    checks = SchemaChecks()
    odd = {"type": "object", "properties": {"x": {"type": "number", "maximum": float("nan")}}}
    checks.problem(odd)
    checks.problem(odd)
    assert checks.checked == 2 and len(checks) == 0


def test_a_definition_whose_schema_changed_is_refused_after_its_good_twin() -> None:
    name = "memo.tool"
    ToolDefinition(name=name, description="d", input_schema=GOOD)
    before = SCHEMA_CHECKS.checked
    ToolDefinition(name=name, description="d", input_schema=copy.deepcopy(GOOD))
    assert SCHEMA_CHECKS.checked == before  # the twin was not checked again
    bad = copy.deepcopy(GOOD)
    bad["properties"]["path"]["type"] = 3
    with pytest.raises(ValueError, match="not a valid JSON Schema"):
        ToolDefinition(name=name, description="d", input_schema=bad)
