"""Decisions agree with a naive evaluator written from the docs (``naive_reference``),
on seeded random policies that mix every construct and requests with edge values.

Each generated policy is decided by the compiled engine with and without a
context key (so per-context caches are exercised, contexts being reused across
calls), after ``fmt`` (the formatted text must decide the same), and from a bundle
written and loaded again; wherever the reference allows a call, ``could_permit``
lists its tool for that context. Any disagreement prints the seed, the policy and
the request, enough to replay it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sharedos.policy import compile_source, load_bundle, save_bundle
from sharedos.policy.formatter import format_source
from sharedos.policy.policyset import PolicySet
from tests.policy.naive_reference import Gen, decide

SEEDS = range(0, 48)
REQUESTS = 40


def _engine(policy: PolicySet, tool: str, args: Any, ctx: Any, key: str | None) -> tuple[Any, ...]:
    d = policy.decide(tool, args, ctx, context_key=key)
    return (d.effect.value, d.reason.value, frozenset(r.id for r in d.rule_ids))


@pytest.mark.parametrize("seed", SEEDS)
def test_engine_agrees_with_the_naive_reference(seed: int, tmp_path: Path) -> None:
    gen = Gen(seed)
    source, rules, named = gen.policy()
    policy = compile_source(source, "p.sos")
    formatted = format_source(source, "p.sos", width=60)
    assert formatted.text is not None, formatted.diagnostics
    assert format_source(formatted.text, "p.sos", width=60).text == formatted.text
    refmt = compile_source(formatted.text, "p.sos")
    save_bundle(policy, tmp_path / "b.json")
    loaded = load_bundle(tmp_path / "b.json")
    pool = [gen.ctx() for _ in range(4)]
    for i in range(REQUESTS):
        tool, args, _ = gen.request()
        ctx = pool[gen.rng.randrange(len(pool))]
        want = decide(rules, named, tool, args, ctx)
        key = json.dumps(ctx, sort_keys=True, default=str)
        for name, engine, k in (
            ("compiled", policy, None),
            ("compiled, keyed", policy, key),
            ("formatted", refmt, None),
            ("bundle, keyed", loaded, key),
        ):
            got = _engine(engine, tool, args, ctx, k)
            assert got == want, (
                f"seed {seed} request {i} ({name}): {tool} {args!r} {ctx!r}\n{source}"
            )
        if want[0] != "deny":
            assert policy.could_permit(tool, ctx, context_key=key), (
                f"seed {seed}: {tool} is allowed for {ctx!r} but not listed\n{source}"
            )
