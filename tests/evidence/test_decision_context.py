# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)
"""Each attempt records the decision context a replay needs, and reads back as an AccessContext (issue 24).

A real ``RuntimeHost`` decides calls for contexts with roles, attributes and
a tenant; the record of each call, read back from either store, rebuilds the
exact ``AccessContext`` the host resolved, and deciding it again with the
same policy gives the same answer. Host secrets in attributes are scrubbed,
and an oversized context is kept as a marker that says so.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from sharedos.catalog import ToolRegistry
from sharedos.catalog.definition import ToolDefinition
from sharedos.evidence.chain import ATTEMPT_FIELDS
from sharedos.evidence.verify import verify_store
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.kernel.handlers import HandlerResult
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy
from tests.evidence.stores import Raw, backend, opener, raw, store  # noqa: F401

POLICY = """
namespace t
requirement t.read { action read; resource path(args.p) }
permit read on "/team/**" when "editor" in context.roles
permit read on "/tenant/{context.tenant}/**"
forbid read on "/secret/**" unless context.attributes.clearance == "high"
"""
RUN = ToolPolicy(name="r", mode=RunMode.OPEN, managed=("t.*",))


async def _ok(args: dict[str, Any], hctx: Any) -> HandlerResult:
    return HandlerResult(content=[{"type": "text", "text": "ok"}])


def host(store: Any, secrets: tuple[str, ...] = ()) -> RuntimeHost:
    tool = ToolDefinition(
        name="t.read",
        description="read",
        input_schema={"type": "object", "properties": {"p": {"type": "string"}}},
        handler=_ok,
    )
    policy = compile_source(POLICY, "t.sos")
    return RuntimeHost(Kernel(policy, ToolRegistry([tool])), store, host_secrets=secrets)


def run(h: RuntimeHost, ctx: AccessContext, paths: list[str]) -> None:
    async def calls() -> None:
        for i, p in enumerate(paths):
            await h.invoke_tool(
                ToolCall(call_id=f"c{i}", tool="t.read", arguments={"p": p}), ctx, RUN
            )

    anyio.run(calls)


def test_a_record_reads_back_as_the_context_it_was_decided_under(store: Any) -> None:
    ctx = AccessContext(
        principal="alice",
        tenant="acme",
        roles=("viewer", "editor"),
        attributes={"clearance": "low", "team": {"name": "blue", "size": 3}},
        turn_id="ctx-turn",
    )
    h = host(store)
    run(h, ctx, ["/team/a", "/tenant/acme/b", "/secret/c"])
    records = store.query("ctx-turn")
    assert [r.status for r in records] == ["succeeded", "succeeded", "denied"]
    for rec in records:
        assert rec.context == {
            "principal": "alice",
            "tenant": "acme",
            "roles": ["viewer", "editor"],
            "attributes": {"clearance": "low", "team": {"name": "blue", "size": 3}},
        }
        again = rec.access_context()
        assert again == ctx
        # decided again under the same policy: the same answer (what a replay builds on)
        decision = h.kernel.policy.decide(
            rec.tool, rec.arguments, again.policy_input, context_key=again.cache_key
        )
        assert str(decision.effect) == rec.effect


def test_host_secrets_in_the_context_are_scrubbed(store: Any) -> None:
    ctx = AccessContext(
        principal="bob", attributes={"token": "host-secret-value-123"}, turn_id="s-turn"
    )
    run(host(store, secrets=("host-secret-value-123",)), ctx, ["/team/x"])
    (rec,) = store.query("s-turn")
    assert "host-secret-value-123" not in str(rec.context)
    assert rec.context is not None and rec.context["principal"] == "bob"


def test_an_oversized_context_is_a_marker_that_says_so(store: Any) -> None:
    ctx = AccessContext(principal="carol", attributes={"blob": "x" * 70_000}, turn_id="big-turn")
    run(host(store), ctx, ["/tenant/default/a"])
    (rec,) = store.query("big-turn")
    assert rec.context is not None and rec.context.get("$truncated") is True
    with pytest.raises(ValueError, match="too large to keep"):
        rec.access_context()


def test_the_context_is_part_of_the_chain(store: Any, raw: Raw) -> None:
    ctx = AccessContext(principal="dave", roles=("editor",), turn_id="chain-turn")
    run(host(store), ctx, ["/team/a"])
    assert verify_store(store).clean
    links = [lk for lk in store.iter_links("chain-turn") if lk.kind == "attempt"]
    context_at = ATTEMPT_FIELDS.index("context")
    assert '"roles":["editor"]' in links[0].values[context_at]
    # granting a role after the fact is an edit the chain shows
    raw("UPDATE chain SET context = replace(context, 'editor', 'admin') WHERE kind = 'attempt'")
    assert [p.kind for p in verify_store(store).problems] == ["edited"]


def test_a_replay_of_a_context_a_secret_was_scrubbed_from_says_so(store: Any) -> None:
    """The recorded context holds ``[redacted]`` where the host's secret was: a replay
    decides it with that text, not with the secret, and must say so, as it does for
    arguments (a condition on the attribute decides otherwise than the host did)."""
    from sharedos.evidence.export import iter_records
    from sharedos.evidence.replay import replay

    secret = "host-secret-value-123"
    ctx = AccessContext(principal="bob", attributes={"token": secret}, turn_id="r-turn")
    run(host(store, secrets=(secret,)), ctx, ["/tenant/default/x"])
    new = compile_source(
        POLICY + f'permit read on "/tenant/**" when context.attributes.token == "{secret}"\n',
        "t.sos",
    )
    report = replay(iter_records(store), new)
    assert report.replayed == 1
    assert report.notes == {
        "the decision context holds a redacted secret (conditions see '[redacted]')": 1
    }, report.notes
    assert "redacted secret" in report.render()
