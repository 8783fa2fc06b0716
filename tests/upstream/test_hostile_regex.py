"""Schema regexes an upstream lists are matched in linear time, or not at all.

jsonschema matches ``pattern`` with Python's ``re``, a backtracking matcher that
holds the GIL while it runs: arguments are checked on the event loop, results in
a worker thread that blocks it just the same. An upstream listing
``"pattern": "^(x+)+$"`` or ``"^(a|aa)+$"`` -- in its inputSchema, for a string the
harness sends, or in its outputSchema, for a string it returns itself -- froze
every turn of the host for seconds at 40 characters (hours a little further).
Schema regexes are now matched by RE2 (``sharedos.catalog.schemaregex``), which
has no backtracking: such a tool is served and its calls are checked at once. A
regex RE2 cannot compile (lookaround, backreferences) is never matched: that
tool is refused by name when the listing is turned into definitions.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sharedos.upstream.definitions import regex_problem
from tests.timing import bound
from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, refusal_payload

pytestmark = pytest.mark.anyio

RULES = hostile_rules("out", "inp", "keys", "look", "back", "uneval", "safe")

#: ambiguous repeats: Python's re takes seconds on 40 characters, RE2 microseconds
NESTED = "^(a+)+$"
OVERLAPPING = "^(a|aa)+$"
HOSTILE_TEXT = "a" * 40 + "!"


def _tool(name: str, **schemas: object) -> dict[str, object]:
    base: dict[str, object] = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "s": {"type": "string"}},
    }
    return {"name": name, "description": name, "inputSchema": base, **schemas}


def _input(**properties: object) -> dict[str, object]:
    return {"type": "object", "properties": {"path": {"type": "string"}, **properties}}


async def test_ambiguous_schema_regexes_are_served_and_matched_at_once(tmp_path: Path) -> None:
    tools = [
        _tool(
            "out",
            outputSchema={
                "type": "object",
                "properties": {"v": {"type": "string", "pattern": OVERLAPPING}},
            },
        ),
        _tool("inp", inputSchema=_input(s={"type": "string", "pattern": NESTED})),
        _tool(
            "keys",
            inputSchema={
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "patternProperties": {OVERLAPPING: {"type": "string"}},
                "additionalProperties": False,
            },
        ),
        _tool("look", inputSchema=_input(s={"type": "string", "pattern": "^(?=a)a+$"})),
        _tool("back", outputSchema={"type": "object", "patternProperties": {r"(a)\1": {}}}),
        _tool(
            "uneval",
            inputSchema={
                "type": "object",
                "patternProperties": {"^x": {}},
                "unevaluatedProperties": False,
            },
        ),
        _tool(
            "safe",
            # a member called "pattern" in data is no regex
            inputSchema=_input(
                t={"type": "string", "default": "(?=", "examples": [{"pattern": "("}]}
            ),
        ),
    ]
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools), encoding="utf-8")
    toml = hostile_upstream("--tools", str(tools_file), "--mode", "redos-v")
    async with brokered(tmp_path, toml, RULES) as env, env.turn() as t:
        names = await t.names()
        report = "\n".join(t.upstreams.report())
        assert names == ["fx.inp", "fx.keys", "fx.out", "fx.safe"]

        t0 = time.monotonic()
        refused = await t.call("fx.inp", {"path": "/public/x", "s": HOSTILE_TEXT})
        by_name = await t.call("fx.keys", {"path": "/public/x", HOSTILE_TEXT: "v"})
        checked = await t.call("fx.out", {"path": "/public/x"})
        elapsed = time.monotonic() - t0

    assert refused.is_error and refusal_payload(refused)["reason"] == "invalid_arguments"
    assert by_name.is_error and refusal_payload(by_name)["reason"] == "invalid_arguments"
    # the upstream's own result breaks its outputSchema: failed, not relayed
    assert checked.is_error
    # Python's re took 14 s of CPU for each of these on an idle machine
    assert elapsed < bound(3.0), elapsed
    assert "inputSchema.properties.s.pattern is a regular expression RE2 cannot match" in report
    assert "outputSchema.patternProperties has a regular expression RE2 cannot match" in report
    assert "unevaluatedProperties and patternProperties" in report


@pytest.mark.parametrize(
    ("pattern", "refused"),
    [
        ("(?=x)", True),  # lookaround needs backtracking
        ("(?<!x)y", True),
        (r"(a)\1", True),  # so do backreferences
        ("(", True),  # not a regex at all
        ("(" * 5000 + ")" * 5000, False),  # deep, and still linear for RE2
        ("^(x+)+$", False),
        ("(a*)*", False),
        ("^(a|aa)+$", False),
        (r"(\w+\s?)*$", False),
        ("^[a-z]+$", False),
        (r"^(\d+\.)*\d+$", False),
        (r"^\p{L}+$", False),  # JSON Schema's (ECMA-262) Unicode classes
        (r"^[A-Za-z0-9_.-]{1,64}$", False),
    ],
)
def test_which_patterns_are_refused(pattern: str, refused: bool) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}
    assert (regex_problem(schema, "inputSchema") is not None) is refused


def test_a_property_named_like_a_data_keyword_is_still_a_schema() -> None:
    schema = {"type": "object", "properties": {"description": {"pattern": "(?=x)"}}}
    assert regex_problem(schema, "inputSchema") is not None
