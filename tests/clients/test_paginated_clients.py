"""The TypeScript SDK client column lists, and validates against, every page of a catalogue.

The TS SDK's ``client.listTools()`` returns one page (``nextCursor`` is the
caller's to follow), and it replaces its cached ``outputSchema`` validators
with that page's tools on every call. The client column's probe read only the
first page, so it validated nothing on the later pages: a refusal or a result
a schema-validating client rejects passed there as "delivered". Measured with
a turn bridge serving one tool a page, over HTTP and stdio.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.limits import TransportLimits
from sharedos.bridge.turnfile import StdioLaunch
from tests.clients.conftest import Clients
from tests.clients.world import strict_world

pytestmark = pytest.mark.anyio

LIMITS = TransportLimits(list_page_size=1)


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_ts_sdk_probe_lists_every_page(
    clients: Clients, tmp_path: Path, transport: str
) -> None:
    async with strict_world(tmp_path) as world:
        env = world.env
        ctx = env.context("alice")
        tool_policy = env.policy.tool_policies["run"]
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        async with (
            env.broker.turn(ctx),
            open_turn(
                env.host,
                ctx,
                tool_policy,
                transport=transport,  # type: ignore[arg-type]
                stdio=StdioLaunch(directory=scratch, limits=LIMITS),
                limits=LIMITS,
            ) as turn,
        ):
            names = sorted(env.host.kernel.list_tools(ctx, tool_policy).names)
            assert len(names) >= 3 and names[-1] == "strict.stat"
            if transport == "http":
                assert turn.url is not None and turn.token is not None
                spec = {
                    "transport": "http",
                    "url": turn.url,
                    "headers": {"Authorization": f"Bearer {turn.token}"},
                }
            else:
                assert turn.command is not None
                spec = {"transport": "stdio", "command": turn.command[0], "args": turn.command[1:]}
            # the last page's strict tool: the SDK validates its result only if it listed it
            spec["calls"] = [{"name": "strict.stat", "arguments": {"path": "/public/a"}}]
            ts = await clients.ts_sdk(spec, tmp_path)
    assert "fatal" not in ts, ts
    assert sorted(t["name"] for t in ts["tools"]) == names, ts["tools"]
    # every tool that declares an outputSchema has its validator, whatever its page
    assert all(t["validated"] for t in ts["tools"] if t["hasOutputSchema"]), ts["tools"]
    assert sum(t["hasOutputSchema"] for t in ts["tools"]) >= 3
    assert ts["results"][0]["ok"], ts["results"]
