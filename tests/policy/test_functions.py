"""``any_in`` / ``all_in`` against a list written in the policy: the set built once at
compile time, and a written first list looked for string by string, answer (and err)
exactly as the general functions do, and cost no more than the reference's scan."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.engines.langref import LangReference
from benchmarks.engines.sos_lang import policy_text
from benchmarks.workload_random import DSTAR, C, L, LangRule, R, RandomWorkload, Resource, lit_seg
from sharedos.policy import compile_source
from sharedos.policy.functions import (
    FUNCTIONS,
    SCAN_MAX,
    EvalError,
    with_constant_items,
    with_constant_list,
)
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


#: a written first list: strings only (with a repeat), up to the scan's limit and past it
FIRST: list[list[Any]] = [
    [],
    ["a"],
    ["a", "h", "a", "z", "1", "A", "", "b"],
    [f"s{k}" for k in range(SCAN_MAX)] + ["a"],
]
#: a second list from the call: every value kind, long enough for the set path
CONTAINERS = st.one_of(st.lists(VALUES, max_size=12), VALUES)


@pytest.mark.parametrize("name", ["any_in", "all_in"])
@pytest.mark.parametrize("written", FIRST)
@settings(max_examples=examples(150), deadline=None)
@given(container=CONTAINERS)
def test_a_written_first_list_answers_as_the_general_function(
    name: str, written: list[Any], container: Any
) -> None:
    one = with_constant_items(name, written)
    if len(set(written)) > SCAN_MAX:
        assert one is None
        return
    assert one is not None
    assert _answer(one, container) == _answer(FUNCTIONS[name].impl, written, container)


def test_only_the_list_functions_are_specialized() -> None:
    assert with_constant_list("contains", ["a"]) is None
    assert with_constant_items("contains", ["a"]) is None
    assert with_constant_items("any_in", ["a", 1]) is None  # not strings only: general


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


def _cpu(fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def test_a_written_first_list_against_a_long_call_list_costs_what_the_reference_does() -> None:
    """``all_in(["a", ...], args.tags)`` in 200 rules, a call whose tags are 5,000
    strings and a number: each rule built a set of the tags, ten times langref's CPU, which looks
    each written string up in the list (and stops at the first one missing)."""
    rules = [
        LangRule(f"r{i}", "permit", ("read",), True, (lit_seg("d"), DSTAR), w, None)
        for i in range(200)
        for w in [C("all_in", ("list", tuple(L(f"v{i}.{k}") for k in range(8))), R("args", "tags"))]
    ]
    tools, resources = {"ws.read": "read"}, {"ws.read": Resource("path", "path")}
    wl = RandomWorkload("x", "ws", tools, resources, ("read",), {}, rules)
    policy = compile_source(policy_text(wl), "p.sos")
    ref = LangReference.from_workload(wl)
    args = {"path": "/d/x", "tags": [f"w{k}" for k in range(5_000)] + [1]}
    ctx = {"principal": "alice", "tenant": "t1", "roles": []}
    assert policy.decide("ws.read", args, ctx).reason.value == ref.decide("ws.read", args, ctx)
    ours = _cpu(lambda: policy.decide("ws.read", args, ctx))
    theirs = _cpu(lambda: ref.decide("ws.read", args, ctx))
    assert ours < 3 * theirs, (ours, theirs)
