"""Output schemas are read in the dialect their ``$schema`` names, as the MCP SDK clients read
them (``validator_for``), with every regex still matched by RE2 (the end-to-end case, an
upstream's draft-07 result, is ``tests/upstream/test_hostile_schema_dialect.py``)."""

from __future__ import annotations

from typing import Any

from sharedos.catalog import ToolDefinition

ARGS = {"type": "object", "properties": {"how": {"type": "string"}}}
DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFT4 = "http://json-schema.org/draft-04/schema#"
NEEDS_V = {
    "$schema": DRAFT7,
    "type": "object",
    "properties": {"w": {"type": "string"}, "v": {"type": "integer"}},
    "dependencies": {"w": ["v"]},
}


def definition(output_schema: dict[str, Any]) -> ToolDefinition:
    return ToolDefinition(
        name="fx.bad", description="S.", input_schema=ARGS, output_schema=output_schema
    )


def test_each_dialect_is_read_as_a_client_reads_it() -> None:
    needs_v = definition(NEEDS_V)
    assert needs_v.output_problem({"w": "x"}) is not None
    assert needs_v.output_problem({"w": "x", "v": 1}) is None
    # draft-04: 1.0 is no integer (it is one in Draft 2020-12, and with no $schema)
    draft4 = {"$schema": DRAFT4, "type": "object", "properties": {"v": {"type": "integer"}}}
    assert definition(draft4).output_problem({"v": 1.0}) is not None
    plain = {k: v for k, v in draft4.items() if k != "$schema"}
    assert definition(plain).output_problem({"v": 1.0}) is None
    # a subschema naming a dialect is read in it, as jsonschema reads it
    nested = {"type": "object", "properties": {"o": NEEDS_V}}
    assert definition(nested).output_problem({"o": {"w": "x"}}) is not None
    # regexes still run on RE2 in every dialect: no catastrophic backtracking
    redos = {"$schema": DRAFT7, "type": "object", "properties": {"v": {"pattern": "(a|aa)+$"}}}
    assert definition(redos).output_problem({"v": "a" * 40 + "!"}) is not None
    # a schema its own dialect refuses (the SDK client refuses every result of it)
    # (draft-04's exclusiveMinimum is a boolean; Draft 2020-12's a number)
    broken = {"$schema": DRAFT4, "properties": {"v": {"minimum": 0, "exclusiveMinimum": 1}}}
    assert "cannot be checked" in (definition(broken).output_problem({"v": 2}) or "")
