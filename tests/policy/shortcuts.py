"""Helpers for the tests of the evaluator's load-time shortcuts (value keys, rules cited
in bulk): the same policy with a shortcut off, how many groups use one, and every
decision of a list of calls with and without a context key."""

from __future__ import annotations

from typing import Any

import pytest

from sharedos.policy import compile_source, evaluator
from sharedos.policy.policyset import PolicySet


def compile_without(source: str, threshold: str) -> tuple[PolicySet, PolicySet]:
    """``source`` compiled as is, and with the evaluator's ``threshold`` (``BUCKET_MIN`` or
    ``SURE_MIN``) out of reach, so that no group takes that shortcut."""
    with_it = compile_source(source, "p.sos")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evaluator, threshold, 10**9)
        without = compile_source(source, "p.sos")
    return with_it, without


def bucketed_groups(policy: PolicySet, slot: int) -> list[list[Any]]:
    """The distinct group entries of ``policy``'s decision tries that have entry ``slot``
    set (4: read by value or by a segment, 5: rules cited in bulk)."""
    found: dict[int, list[Any]] = {}
    tries = {id(trie): trie for trie, _slot in policy._decision_walks.values()}
    for trie in tries.values():
        stack = [trie]
        while stack:
            node = stack.pop()
            stack.extend(node[0].values())
            for groups in node[1:]:
                for g in groups:
                    if type(g) is list and g[slot] is not None:
                        found[id(g)] = g
    return list(found.values())


def groups_using(policy: PolicySet, slot: int) -> int:
    """How many distinct group entries have entry ``slot`` set (``bucketed_groups``)."""
    return len(bucketed_groups(policy, slot))


def decide_all(policy: PolicySet, calls: list[tuple[str, Any, Any]]) -> list[Any]:
    """Every call decided twice: without a context key, and with one (cached per context)."""
    out = []
    for i, (tool, args, ctx) in enumerate(calls):
        out.append(policy.decide(tool, args, ctx))
        out.append(policy.decide(tool, args, ctx, context_key=f"k{i % 4}:{ctx!r}:{args!r}"))
    return out


def value_entries(policy: PolicySet) -> list[Any]:
    """The ``(read, table, mode)`` entry of every group of ``policy`` read by value."""
    return [g[4] for g in bucketed_groups(policy, 4)]
