"""``any_in`` / ``all_in`` against a list written in the policy: the set built once at
compile time answers (and errs) exactly as the general functions do."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharedos.policy import compile_source
from sharedos.policy.functions import FUNCTIONS, EvalError, with_constant_list
from tests.budget import examples

#: long enough for the set path (eight or more), with every literal kind beside strings
WRITTEN: list[Any] = ["a", "b", "c", "d", "e", "f", "g", "h", 1, 2.5, True, None, "1"]
VALUES = st.one_of(
    st.sampled_from(["a", "h", "z", "1", "", "A"]),
    st.sampled_from([1, 1.0, 2.5, 0, True, False, None]),
    st.lists(st.sampled_from(["a", 1]), max_size=2),
    st.dictionaries(st.sampled_from(["a"]), st.integers(0, 1), max_size=1),
)
ITEMS = st.one_of(st.lists(VALUES, max_size=6), VALUES)


def _answer(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except EvalError as exc:
        return ("error", str(exc))


@pytest.mark.parametrize("name", ["any_in", "all_in"])
@pytest.mark.parametrize("written", [WRITTEN, ["a", "b"], [], [1, 2, 3, 4, 5, 6, 7, 8, 9]])
@settings(max_examples=examples(150), deadline=None)
@given(items=ITEMS)
def test_a_written_list_answers_as_the_general_function(
    name: str, written: list[Any], items: Any
) -> None:
    one = with_constant_list(name, written)
    assert one is not None
    assert _answer(one, items) == _answer(FUNCTIONS[name].impl, items, written)


def test_only_the_list_functions_are_specialized() -> None:
    assert with_constant_list("contains", ["a"]) is None


@pytest.mark.parametrize(
    ("condition", "allowed"),
    [
        ('any_in(context.roles, ["x", "y", "z", "w", "v", "u", "t", "staff"])', True),
        ('any_in(context.roles, ["x", "y", "z", "w", "v", "u", "t", "s"])', False),
        ('all_in(context.roles, ["x", "y", "z", "w", "v", "u", "t", "staff"])', True),
        ('all_in(context.roles, ["x", "y", "z", "w", "v", "u", "t", 1])', False),
        ('any_in(context.tenant, ["x", "y", "z", "w", "v", "u", "t", "s"])', False),  # an error
    ],
)
def test_written_lists_decide_as_documented(condition: str, allowed: bool) -> None:
    text = (
        "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
        f'permit read on "/d/**" when {condition}\n'
    )
    policy = compile_source(text, "p.sos")
    context = {"principal": "alice", "tenant": "t1", "roles": ["staff"]}
    assert policy.decide("files.read", {"path": "/d/x"}, context).allowed is allowed
