"""A schema regex that can take exponential time to match is refused at the catalogue.

jsonschema matches ``pattern`` with Python's ``re``, a backtracking matcher that
holds the GIL while it runs: arguments are checked on the event loop, results in
a worker thread that blocks it just the same. An upstream listing
``"pattern": "^(x+)+$"`` -- in its inputSchema, for a string the harness sends,
or in its outputSchema, for a string it returns itself -- froze every turn of
the host 3.6 s for 26 characters, four times longer for each two more (hours at
40). Such a tool is now refused by name when the listing is turned into
definitions; a pattern whose repetition is delimited (``^[a-z0-9]+(-[a-z0-9]+)*$``)
is served.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sharedos.upstream.definitions import regex_problem
from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream

pytestmark = pytest.mark.anyio

RULES = hostile_rules("out", "inp", "keys", "safe")

EXPONENTIAL = "^(x+)+$"
SAFE = "^[a-z0-9]+(-[a-z0-9]+)*$"


def _tool(name: str, **schemas: object) -> dict[str, object]:
    base: dict[str, object] = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "s": {"type": "string"}},
    }
    return {"name": name, "description": name, "inputSchema": base, **schemas}


async def test_a_tool_whose_schema_regex_can_take_exponential_time_is_refused(
    tmp_path: Path,
) -> None:
    exponential_v = {
        "type": "object",
        "properties": {"v": {"type": "string", "pattern": EXPONENTIAL}},
    }
    tools = [
        _tool("out", outputSchema=exponential_v),
        _tool(
            "inp",
            inputSchema={
                "type": "object",
                "properties": {"path": {"type": "string"}, "s": {"pattern": EXPONENTIAL}},
            },
        ),
        _tool(
            "keys",
            inputSchema={"type": "object", "patternProperties": {"(a*)*b": {"type": "string"}}},
        ),
        _tool(
            "safe",
            inputSchema={
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "s": {"type": "string", "pattern": SAFE},
                    # a member called "pattern" in data is no regex
                    "t": {"type": "string", "default": "(x+)+", "examples": [{"pattern": "(x+)+"}]},
                },
            },
        ),
    ]
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools), encoding="utf-8")
    toml = hostile_upstream("--tools", str(tools_file))
    async with brokered(tmp_path, toml, RULES) as env, env.turn() as t:
        names = await t.names()
        report = "\n".join(t.upstreams.report())
    assert names == ["fx.safe"]
    assert "outputSchema.properties.v.pattern is a regular expression with nested" in report
    assert "inputSchema.properties.s.pattern is a regular expression with nested" in report
    assert "inputSchema.patternProperties has a regular expression with nested" in report


@pytest.mark.parametrize(
    ("pattern", "refused"),
    [
        ("^(x+)+$", True),
        ("(a*)*", True),
        ("(a+a)*", True),
        (r"(\w+\s?)*$", True),
        ("((ab)*c)*", True),
        ("(", True),  # not a regex at all
        ("(" * 5000 + ")" * 5000, True),  # nested deeper than the parser recurses
        ("^[a-z]+$", False),
        (r"^(\d+\.)*\d+$", False),
        ("^[a-z0-9]+(-[a-z0-9]+)*$", False),
        (r"^[A-Za-z0-9_.-]{1,64}$", False),
        ("(x{2})+", False),
        ("(a|b)*", False),
    ],
)
def test_which_patterns_are_refused(pattern: str, refused: bool) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}
    assert (regex_problem(schema, "inputSchema") is not None) is refused
