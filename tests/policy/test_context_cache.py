"""The per-context condition cache must never answer for a context the condition reads differently."""

from __future__ import annotations

from sharedos.context import AccessContext
from sharedos.policy import compile_source

POLICY = (
    "namespace files\n"
    "requirement files.read { action read; resource path(args.path) }\n"
    'permit read on "/data/**" when context.roles == ["admin", "dev"]\n'
)


def _decide(policy, roles: tuple[str, ...]) -> bool:
    ctx = AccessContext(principal="alice", roles=roles)
    d = policy.decide(
        "files.read", {"path": "/data/x"}, ctx.policy_input, context_key=ctx.cache_key
    )
    return d.allowed


def test_role_order_a_condition_can_read_is_not_merged_by_the_cache() -> None:
    fresh = compile_source(POLICY, "p.sos")
    expected = _decide(fresh, ("dev", "admin"))
    assert expected is False  # lists compare element-wise, left to right
    warm = compile_source(POLICY, "p.sos")
    assert _decide(warm, ("admin", "dev")) is True
    # the same call, after another ordering of the same roles was cached:
    assert _decide(warm, ("dev", "admin")) is expected


MANY = (
    "namespace files\n"
    "requirement files.read { action read; resource path(args.path) }\n"
    'permit read on "/data/**" when "dev" in context.roles\n'
    'permit read on "/data/shared/**" when "ops" in context.roles\n'
    'forbid read on "/data/**/secret/**" unless "admin" in context.roles\n'
)


def _first_decisions(policy, n: int, start: int) -> list[bool]:
    out = []
    for i in range(start, start + n):
        ctx = AccessContext(principal=f"u{i}", roles=("dev", "ops") if i % 2 else ("dev",))
        path = f"/data/shared/d{i}/secret/f" if i % 3 == 0 else f"/data/shared/d{i}/f"
        d = policy.decide("files.read", {"path": path}, ctx.policy_input, context_key=ctx.cache_key)
        out.append(d.allowed)
    return out


def test_decisions_seen_once_leave_nothing_for_the_garbage_collector() -> None:
    """Every first decision used to leave a context entry, its role set and the decision
    behind: a first pass over new people and paths filled the collector's youngest
    generation every couple of hundred calls, and each collection paused a call for tens
    of microseconds. What is seen once now leaves only keys (strings) behind."""
    import gc

    policy = compile_source(MANY, "p.sos")
    _first_decisions(policy, 50, 0)  # the tool's plan and the rules' maps, once
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        answers = _first_decisions(policy, 600, 1000)
        left = len(gc.get_objects()) - before
    finally:
        gc.enable()
    assert left < 60, f"600 first decisions left {left} objects for the collector"
    # what a second sight caches answers as the first did, and a third reuses it
    fresh = compile_source(MANY, "p.sos")
    assert _first_decisions(policy, 600, 1000) == answers == _first_decisions(fresh, 600, 1000)
    assert _first_decisions(policy, 600, 1000) == answers
