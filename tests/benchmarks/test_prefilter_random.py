"""On the randomized workload, the prefilter changes no decision (issue 27).

The ``random`` workload (``benchmarks/workload_random.py``) mixes every
pattern and condition form; SharedOS decides each of its requests with the
program as compiled (role buckets, copies of rules tested once, context
pattern plans, and the value keys the load adds) and with the same program
stripped of them: every decision
(effect, reason, rules cited, detail) must be identical, with and without a
context key.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.engines.sharedos_engine import SharedOSEngine  # noqa: E402
from benchmarks.workload import build  # noqa: E402
from sharedos.policy import evaluator  # noqa: E402
from sharedos.policy.policyset import PolicySet  # noqa: E402


def stripped(policy: PolicySet) -> PolicySet:
    """The same program without role keys, buckets, twins, context plans, value keys or
    rules cited in bulk."""
    program = copy.deepcopy(policy._program)
    rules = program["rules"]
    n = len(rules["id"])
    rules["rkey"] = [None] * n
    rules["rform"] = [0] * n
    rules["mplan"] = [None] * n
    program["buckets"] = [0] * len(program["groups"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evaluator, "BUCKET_MIN", 10**9)  # no group is keyed by value at load
        mp.setattr(evaluator, "SURE_MIN", 10**9)  # nor cites rules in bulk
        return PolicySet(program)


@pytest.mark.parametrize("seed", [3, 41, 977])
def test_prefiltered_and_stripped_programs_decide_alike(seed: int) -> None:
    wl = build("random", 400, 300, seed)
    engine = SharedOSEngine()
    engine.load(engine.native(wl), wl)
    fast, slow = engine.policy, stripped(engine.policy)
    assert any(b != 0 for b in fast._program["buckets"])  # the shortcuts are there
    assert any(  # and groups read by value
        type(g) is list and g[4] is not None
        for trie, slot in fast._decision_walks.values()
        for g in _groups(trie, slot)
    )
    for req in wl.requests:
        for key in (None, req.context_key):
            got = fast.decide(req.tool, req.args, req.context, context_key=key)
            want = slow.decide(req.tool, req.args, req.context, context_key=key)
            assert got == want, (req.tool, req.args, req.context)


def _groups(trie: tuple, slot: int) -> list:
    """Every group entry of one action's slots in a decision trie."""
    out, stack = [], [trie]
    while stack:
        node = stack.pop()
        stack.extend(node[0].values())
        out.extend(node[slot])
        out.extend(node[slot + 1])
    return out
