"""Kernel.list_tools: what is listed, and that listing and calling never disagree."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharedos.catalog import ToolDefinition, ToolRegistry, catalog_hash
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.toolpolicy import RunMode, ToolPolicy

from .conftest import ADMIN, ALICE, ALL, NO_DELETE, POLICY, compile_source, echo_handler


def test_listing_is_sorted_filtered_and_hashed(kernel: Kernel) -> None:
    alice = kernel.list_tools(ALICE, ALL)
    names = [t.name for t in alice.tools]
    assert names == sorted(names)
    # admin.reset needs the admin role; unruled.tool has no requirement; vault.get
    # and misc.echo have requirements but no registered tool.
    assert names == ["files.delete", "files.list", "files.read", "files.search", "files.write"]
    assert alice.catalog_hash == catalog_hash(alice.tools)
    assert alice.names == frozenset(names)
    admin = kernel.list_tools(ADMIN, ALL)
    assert "admin.reset" in admin.names and admin.catalog_hash != alice.catalog_hash
    assert "files.delete" not in kernel.list_tools(ALICE, NO_DELETE).names


def test_listing_is_stable_across_turns_and_calls(kernel: Kernel) -> None:
    first = kernel.list_tools(ALICE, ALL)
    other_turn = AccessContext(principal="alice", tenant="acme", turn_id="another-turn")
    assert kernel.list_tools(other_turn, ALL).catalog_hash == first.catalog_hash
    assert kernel.list_tools(ALICE, ALL) == first


def test_registering_a_tool_changes_later_listings(kernel: Kernel) -> None:
    before = kernel.list_tools(ADMIN, ALL)
    kernel.registry.register(
        ToolDefinition(
            name="vault.get", description="Get a secret.", input_schema={"type": "object"}
        )
    )
    after = kernel.list_tools(ADMIN, ALL)
    assert "vault.get" in after.names and after.catalog_hash != before.catalog_hash


def test_published_tools_carry_no_authority(kernel: Kernel) -> None:
    for tool in kernel.list_tools(ADMIN, ALL).wire():
        assert set(tool) <= {
            "name",
            "description",
            "inputSchema",
            "outputSchema",
            "annotations",
            "metadata",
        }


# --------------------------------------------------------------- per-context providers

PRINCIPALS = [f"u{i}" for i in range(12)]
PROVIDER_POLICY = "\n".join(
    ["namespace private"]
    + [f"requirement private.{p} {{ action use; resource path(args.path) }}" for p in PRINCIPALS]
    + ['permit use on "/**"']
)


class PerUserProvider:
    def tools_for(self, context: AccessContext) -> Iterable[ToolDefinition]:
        return [
            ToolDefinition(
                name=f"private.{context.principal}",
                description=f"{context.principal}'s own connector",
                input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
                handler=echo_handler,
            )
        ]


OPEN = ToolPolicy(name="open", mode=RunMode.OPEN, managed=("private.*",))


def provider_kernel() -> Kernel:
    registry = ToolRegistry()
    registry.add_provider(PerUserProvider())
    return Kernel(compile_source(PROVIDER_POLICY, "prov.sos"), registry)


def test_concurrent_threads_never_see_each_others_tools() -> None:
    kernel = provider_kernel()
    errors: list[str] = []
    barrier = threading.Barrier(len(PRINCIPALS))

    def worker(p: str) -> None:
        ctx = AccessContext(principal=p)
        barrier.wait()
        for _ in range(100):
            names = kernel.list_tools(ctx, OPEN).names
            if names != {f"private.{p}"}:
                errors.append(f"{p} saw {sorted(names)}")

    threads = [threading.Thread(target=worker, args=(p,)) for p in PRINCIPALS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(kernel.registry) == 0  # nothing was written to the shared registry


@pytest.mark.anyio
async def test_concurrent_tasks_never_see_or_call_each_others_tools(tmp_path: Any) -> None:
    kernel = provider_kernel()
    host = RuntimeHost(kernel, SqliteEvidenceStore(tmp_path / "e.db"))

    async def turn(i: int, p: str) -> None:
        ctx = AccessContext(principal=p, turn_id=f"t{i}")
        for _ in range(5):
            catalog = kernel.list_tools(ctx, OPEN)
            assert catalog.names == {f"private.{p}"}
            await asyncio.sleep(0)  # interleave with the other turns
            mine = await host.invoke_tool(
                ToolCall(tool=f"private.{p}", arguments={"path": "/x"}), ctx, OPEN, catalog=catalog
            )
            assert mine.outcome is Outcome.SUCCEEDED
            other = PRINCIPALS[(PRINCIPALS.index(p) + 1) % len(PRINCIPALS)]
            theirs = await host.invoke_tool(
                ToolCall(tool=f"private.{other}", arguments={"path": "/x"}), ctx, OPEN
            )
            assert theirs.reason is ReasonCode.TOOL_UNAVAILABLE

    async with anyio.create_task_group() as tg:
        for i in range(48):
            tg.start_soon(turn, i, PRINCIPALS[i % len(PRINCIPALS)])


# ------------------------------------------- property: list and call never disagree

TOOLS = ["g.t0", "g.t1", "g.t2", "g.t3"]
ACTIONS = ["read", "write"]
PATTERNS = ["/a/**", "/a/*", "/a/b", "/**", "/b/*/c", "/home/{context.principal}/**", "/c/*.txt"]
CONDITIONS = [
    None,
    'when "admin" in context.roles',
    'unless "admin" in context.roles',
    'when context.tenant == "acme"',
    'unless context.principal == "bob"',
]

rule_st = st.tuples(
    st.sampled_from(["permit", "permit", "forbid"]),
    st.one_of(
        st.just("*"),
        st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=2, unique=True).map(", ".join),
    ),
    st.sampled_from(PATTERNS),
    st.sampled_from(CONDITIONS),
)
policy_st = st.tuples(
    st.lists(st.sampled_from(ACTIONS), min_size=len(TOOLS), max_size=len(TOOLS)),
    st.lists(rule_st, max_size=6),
)
context_st = st.builds(
    lambda p, admin, tenant: AccessContext(
        principal=p, roles=("admin",) if admin else (), tenant=tenant, turn_id="prop"
    ),
    st.sampled_from(["alice", "bob"]),
    st.booleans(),
    st.sampled_from(["acme", "other"]),
)
managed_st = st.lists(st.sampled_from([*TOOLS, "g.t4", "g.*"]), min_size=1, max_size=4, unique=True)


def policy_text(actions: list[str], rules: list[tuple[str, str, str, str | None]]) -> str:
    lines = ["namespace g"]
    lines += [
        f"requirement {tool} {{ action {action}; resource path(args.path) }}"
        for tool, action in zip(TOOLS, actions, strict=True)
    ]
    used = set(actions)
    for effect, acts, pattern, cond in rules:
        if acts != "*":  # the checker refuses an action no requirement of the namespace has
            acts = ", ".join(a for a in acts.split(", ") if a in used)
            if not acts:
                continue
        lines.append(f'{effect} {acts} on "{pattern}"' + (f" {cond}" if cond else ""))
    return "\n".join(lines) + "\n"


def witnesses(context: AccessContext) -> list[str]:
    """Paths that instantiate every pattern (and miss all of them) for this context."""
    out = {"/", "/zz", "/zz/q"}
    for pattern in PATTERNS:
        concrete = pattern.replace("{context.principal}", context.principal)
        for star_star in ("", "/w", "/w/x"):
            path = concrete.replace("/**", star_star).replace("*", "w")
            out.add(path or "/")
    return sorted(out)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policy_st, context=context_st, managed=managed_st)
def test_listed_iff_some_call_succeeds(
    policy: tuple[list[str], list[Any]], context: AccessContext, managed: list[str]
) -> None:
    compiled = compile_source(policy_text(*policy), "gen.sos")
    registry = ToolRegistry(
        ToolDefinition(
            name=name,
            description="generated",
            input_schema={
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
            handler=echo_handler,
        )
        for name in [*TOOLS, "g.t4"]
    )
    kernel = Kernel(compiled, registry)
    run_policy = ToolPolicy(name="gen", mode=RunMode.OPEN, managed=tuple(managed))
    host = RuntimeHost(kernel, SqliteEvidenceStore(":memory:"))
    catalog = kernel.list_tools(context, run_policy)

    async def outcomes(tool: str) -> set[Outcome]:
        seen = set()
        for path in witnesses(context):
            result = await host.invoke_tool(
                ToolCall(tool=tool, arguments={"path": path}), context, run_policy
            )
            seen.add(result.outcome)
        return seen

    for tool in [*TOOLS, "g.t4"]:
        seen = anyio.run(outcomes, tool)
        if tool in catalog.names:
            assert Outcome.SUCCEEDED in seen, f"{tool} listed but no witness call succeeds"
        else:
            assert seen == {Outcome.DENIED}, f"{tool} unlisted but some call was not denied: {seen}"


def test_a_policy_reading_the_turn_id_lists_each_turn_for_itself() -> None:
    """The catalogue cache key leaves the turn out (``cache_key``); a policy that reads
    ``context.turn_id`` must not have one turn's catalogue served to another turn."""
    policy = compile_source(
        "namespace misc\n"
        "requirement misc.echo { action call; resource path(args.path) }\n"
        'permit call on "/**" when context.turn_id == "turn-a"\n',
        "turn.sos",
    )
    assert policy.reads_turn_id
    registry = ToolRegistry(
        [
            ToolDefinition(
                name="misc.echo",
                description="Echo.",
                input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
                handler=echo_handler,
            )
        ]
    )
    kernel = Kernel(policy, registry)
    run = ToolPolicy(name="misc", mode=RunMode.OPEN, managed=("misc.*",))
    turn_a = AccessContext(principal="alice", turn_id="turn-a")
    turn_b = AccessContext(principal="alice", turn_id="turn-b")
    assert kernel.list_tools(turn_a, run).names == {"misc.echo"}
    # listed for turn-b means a call of turn-b could succeed: it cannot
    assert kernel.list_tools(turn_b, run).names == frozenset()
    assert kernel.list_tools(turn_a, run).names == {"misc.echo"}
    # a policy that does not read the turn id still shares one catalogue across turns
    assert not compile_source(POLICY, "k.sos").reads_turn_id
