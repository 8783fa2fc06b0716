"""The docs-based reference of the whole language (``benchmarks/engines/langref.py``)
resolves a template resource as docs/policy-language.md says, and as SharedOS does:
a hole a URL parser reads as a separator, a path's end or a dot segment, a lone
surrogate, an integer of more digits than Python spells, or a hole that composes
with the text before it into text not in NFC, is ``unresolvable_resource``.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.engines.langref import LangReference
from benchmarks.engines.sos_lang import policy_text
from benchmarks.workload_random import build_random
from sharedos.policy import compile_source
from sharedos.policy.policyset import PolicySet

HOLES: list[Any] = [
    "a\\b",
    "a?b",
    "a#b",
    "%2e%2e",
    "%2e",
    "a%2Fb",
    "%00",
    "%5C",
    "\ud800",
    10**5000,
    "\u0301",
    "x\u0301",
    "a%41b",
    "ok",
    7,
]


@pytest.fixture(scope="module")
def engines() -> tuple[LangReference, PolicySet, dict[str, Any]]:
    wl = build_random(60, 20, 3)
    ctx = wl.requests[0].context
    return LangReference.from_workload(wl), compile_source(policy_text(wl), "r.sos"), ctx


@pytest.mark.parametrize("hole", HOLES, ids=[f"hole{i}" for i in range(len(HOLES))])
def test_template_holes_resolve_as_documented(
    engines: tuple[LangReference, PolicySet, dict[str, Any]], hole: Any
) -> None:
    ref, policy, ctx = engines
    for tool, keys in (("ws.repo_get", ("owner", "repo")), ("ws.ticket_get", ("queue", "id"))):
        for key in keys:
            args = {"owner": "o", "repo": "r", "queue": "q", "id": "1", key: hole}
            want = policy.decide(tool, args, ctx).reason.value
            assert ref.decide(tool, args, ctx) == want, (tool, key)


def test_an_integer_past_a_floats_range_is_a_finite_number() -> None:
    # math.isfinite(10**400) raises OverflowError: the reference took the comparison
    # for an error (a permit then did not apply) where the engine compares exactly
    from benchmarks.workload_random import DSTAR, RESOURCES, L, LangRule, R, RandomWorkload, lit_seg

    n_ref = R("args", "n")
    rules = [
        LangRule("p", "permit", ("read",), True, (lit_seg("d"), DSTAR), ("cmp", ">", n_ref, L(2))),
        LangRule("q", "permit", ("read",), True, (lit_seg("e"), DSTAR), ("cmp", "==", n_ref, L(2))),
    ]
    tools = {"ws.read": "read"}
    wl = RandomWorkload("x", "ws", tools, {"ws.read": RESOURCES["ws.read"]}, ("read",), {}, rules)
    ref = LangReference.from_workload(wl)
    policy = compile_source(policy_text(wl), "x.sos")
    for path in ("/d/x", "/e/x"):
        for n in (10**400, -(10**400), 2):
            call = ("ws.read", {"path": path, "n": n}, {})
            assert ref.decide(*call) == policy.decide(*call).reason.value, (path, n)
