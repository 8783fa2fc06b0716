"""A call with its turn's catalogue looks its tool up in that catalogue's snapshot (no view rebuilt).

Counted, not timed: a provider that counts how often it is asked for its
tools. Before, every ``tools/call`` merged the providers' tools into a new
view (``ToolRegistry.view``): with an upstream of 10,000 tools that was 70 %
of a brokered call's CPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy
from tests.kernel.conftest import echo_handler

TOOLS = 200
POLICY = "\n".join(
    ["namespace big"]
    + [f"requirement big.t{i} {{ action call; resource path(args.path) }}" for i in range(TOOLS)]
    + ['permit call on "/public/**"', "namespace own", 'permit call on "/**"']
    + ["requirement own.tool { action call; resource path(args.path) }"]
)
RUN = ToolPolicy(name="run", mode=RunMode.OPEN, managed=("big.*", "own.*"))
SECRET = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "token": {"type": "string"}},
    "required": ["path"],
}


def owned_by(principal: str) -> object:
    """A handler that says whose provider tool ran."""

    async def handler(args: dict[str, object], hctx: HandlerContext) -> HandlerResult:
        return HandlerResult.text(f"{principal}'s tool")

    return handler


class CountingProvider:
    """Many tools per turn (like a brokered upstream), and a count of every ``tools_for``."""

    def __init__(self) -> None:
        self.asked = 0

    def tools_for(self, context: AccessContext) -> Iterable[ToolDefinition]:
        self.asked += 1
        return [
            ToolDefinition(
                name=f"big.t{i}",
                description=f"tool {i} for {context.principal}",
                input_schema=SECRET,
                handler=owned_by(context.principal),
                secret_arguments=frozenset({"token"}),
            )
            for i in range(TOOLS)
        ]


@pytest.fixture
def setup(tmp_path: Path) -> tuple[RuntimeHost, CountingProvider]:
    registry = ToolRegistry(
        [
            ToolDefinition(
                name="own.tool",
                description="a shared tool",
                input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
                handler=echo_handler,
            )
        ]
    )
    provider = CountingProvider()
    registry.add_provider(provider)
    kernel = Kernel(compile_source(POLICY, "big.sos"), registry)
    return RuntimeHost(kernel, SqliteEvidenceStore(tmp_path / "e.db")), provider


def call(tool: str, token: str = "s3cr3t-value") -> ToolCall:
    return ToolCall(tool=tool, arguments={"path": "/public/x", "token": token})


@pytest.mark.anyio
async def test_calls_with_the_turn_catalogue_never_rebuild_the_view(
    setup: tuple[RuntimeHost, CountingProvider],
) -> None:
    host, provider = setup
    ctx = AccessContext(principal="alice", turn_id="turn-1")
    catalog = host.kernel.list_tools(ctx, RUN)
    assert len(catalog) == TOOLS + 1
    listed = provider.asked
    for i in range(50):
        result = await host.invoke_tool(call(f"big.t{i}"), ctx, RUN, catalog=catalog)
        assert result.outcome is Outcome.SUCCEEDED, result
    # refused calls and unknown names too (their secret fields are redacted from the
    # snapshot's tools, also without rebuilding it)
    denied = await host.invoke_tool(
        ToolCall(tool="big.t1", arguments={"path": "/private/x"}), ctx, RUN, catalog=catalog
    )
    unknown = await host.invoke_tool(call("big.t99999"), ctx, RUN, catalog=catalog)
    refused = await host.refuse(call("big.t2"), ctx, RUN, ReasonCode.TURN_CLOSED, catalog=catalog)
    assert denied.reason is ReasonCode.NO_MATCHING_PERMIT
    assert unknown.reason is ReasonCode.TOOL_UNAVAILABLE
    assert refused.reason is ReasonCode.TURN_CLOSED
    assert provider.asked == listed  # not once more for 53 calls
    records = host.evidence.query(turn_id=None)
    assert not any("s3cr3t-value" in str(r.arguments) for r in records)


@pytest.mark.anyio
async def test_without_its_own_catalogue_a_call_gets_a_fresh_view(
    setup: tuple[RuntimeHost, CountingProvider],
) -> None:
    host, provider = setup
    alice = AccessContext(principal="alice", turn_id="turn-a")
    bob = AccessContext(principal="bob", turn_id="turn-b")
    alices = host.kernel.list_tools(alice, RUN)
    asked = provider.asked
    # no catalogue: the view is built for the call, as before
    assert (await host.invoke_tool(call("big.t0"), alice, RUN)).outcome is Outcome.SUCCEEDED
    assert provider.asked == asked + 1
    # alice's catalogue handed to bob's call is not bob's snapshot: bob's own view is built
    borrowed = await host.invoke_tool(call("big.t0"), bob, RUN, catalog=alices)
    assert provider.asked == asked + 2
    assert borrowed.outcome is Outcome.SUCCEEDED
    assert borrowed.content[0]["text"] == "bob's tool"  # never alice's provider tool
    # the same user in another turn: another snapshot
    later = AccessContext(principal="alice", turn_id="turn-a2")
    await host.invoke_tool(call("big.t0"), later, RUN, catalog=alices)
    assert provider.asked == asked + 3


@pytest.mark.anyio
async def test_a_registry_change_mid_turn_is_seen_by_the_next_call(
    setup: tuple[RuntimeHost, CountingProvider],
) -> None:
    host, _ = setup
    ctx = AccessContext(principal="alice", turn_id="turn-1")
    catalog = host.kernel.list_tools(ctx, RUN)
    args = {"path": "/x"}
    ok = await host.invoke_tool(
        ToolCall(tool="own.tool", arguments=args), ctx, RUN, catalog=catalog
    )
    assert ok.outcome is Outcome.SUCCEEDED
    host.kernel.registry.unregister("own.tool")
    gone = await host.invoke_tool(
        ToolCall(tool="own.tool", arguments=args), ctx, RUN, catalog=catalog
    )
    assert gone.reason is ReasonCode.TOOL_UNAVAILABLE
