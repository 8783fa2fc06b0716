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
