"""``ecma_problem``: which RE2-compilable schema regexes ECMA-262 (Unicode mode) refuses.

Each case's verdict is V8's (``new RegExp(pattern, "u")`` in the pinned Node), checked
when it was written; 60,000 random RE2-compilable patterns agreed with V8 as well.
"""

from __future__ import annotations

import pytest

from sharedos.catalog.ecmaregex import ecma_problem
from sharedos.catalog.schemaregex import regex_error, regex_problem

ECMA = [
    r"(?<n>a)",
    r"\p{L}",
    r"\p{Lu}+",
    r"\P{N}",
    r"\p{Any}",
    r"a{2,3}",
    r"a{2,}",
    r"a{2}?",
    r"\x41",
    r"\u0041",
    r"\u{1F600}",
    r"[a\-z]",
    r"[\w-]",
    r"[-a]",
    r"[\b]",
    r"(?:a)+",
    r"a/b",
    r"\cA",
    r"\0",
    r"[\s\S]",
    r"[$^]",
    r"^$",
    r"a??",
    r"[\p{L}\d]",
    r"[é-ü]",
    r"[\x41-\x5A]",
    r"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$",
    r"^(\+|-)?\d+$",
]

NOT_ECMA = [
    r"(?i)abc",  # inline flags
    r"(?U)a",
    r"(?P<n>a)",  # Python/RE2 named group
    r"^a\@b$",  # an escape of a character that is no syntax character
    r"\#",
    r"\_",
    r"\-",  # only inside a class
    r"[[:alpha:]]",  # POSIX class: to ECMA-262, "[[:alph]" then a lone "]"
    r"[]a]",  # RE2: "]" or "a"; ECMA-262: an empty class, then "a]"
    r"a{,3}",  # RE2: literal text; ECMA-262: an incomplete quantifier
    r"x{",
    r"x}",
    r"[\d-z]",  # a range from a class escape
    r"\b+",  # nothing to repeat
    r"^*",
    r"\Q.\E",
    r"\pL",
    r"\x{41}",
]


@pytest.mark.parametrize("pattern", ECMA)
def test_ecma_262_patterns_pass(pattern: str) -> None:
    assert ecma_problem(pattern) is None  # (RE2 refuses a few: \u0041, \cA, [\b])


@pytest.mark.parametrize("pattern", NOT_ECMA)
def test_re2_only_syntax_is_named(pattern: str) -> None:
    if regex_error(pattern) is not None:
        return  # RE2 refuses it already (refused either way)
    assert ecma_problem(pattern) is not None


def test_only_an_output_schema_is_held_to_ecma_262() -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": r"(?i)x"}}}
    assert regex_problem(schema, "inputSchema") is None
    problem = regex_problem(schema, "outputSchema", ecma=True)
    assert problem is not None and "MCP clients cannot compile" in problem
    names = {"type": "object", "patternProperties": {r"\@": {}}}
    assert regex_problem(names, "outputSchema", ecma=True) is not None
