"""``sharedos.jsonshape``: nesting depth found without recursion, whatever the depth."""

from __future__ import annotations

from typing import Any

from sharedos.jsonshape import nests_deeper_than


def nested(levels: int) -> Any:
    value: Any = "leaf"
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


def test_the_value_itself_is_level_one_and_a_scalar_nests_nothing() -> None:
    assert not nests_deeper_than("text", 0)
    assert not nests_deeper_than({}, 1) and nests_deeper_than({}, 0)
    assert not nests_deeper_than(nested(5), 5) and nests_deeper_than(nested(5), 4)
    assert nests_deeper_than(({"a": (1,)},), 2)  # tuples nest like lists


def test_a_value_deeper_than_the_recursion_limit_is_measured() -> None:
    assert nests_deeper_than(nested(100_000), 64)
    assert not nests_deeper_than(nested(100_000), 100_000)
