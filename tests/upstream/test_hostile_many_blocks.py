"""A result of very many small content blocks cannot stall the host.

``max_result_bytes`` bounds an answer's bytes, not its blocks: 4 MiB is
130,000 one-character text blocks. The SDK's client validated each of them on
the host's event loop (and the bridge serialized each again), so one such
answer froze every turn of the process for seconds (3.8 s here). The harness's
client runs in a process of its own here, as it does in a real run, so what
is measured is the host alone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from sharedos.bridge import open_turn
from tests.timing import bound, loop_gaps
from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream

pytestmark = pytest.mark.anyio

RULES = hostile_rules("bad")

CLIENT = r"""
import json, sys, anyio, httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main(url, headers, n):
    async with httpx2.AsyncClient(headers=json.loads(headers), timeout=120) as http, Client(
        streamable_http_client(url, http_client=http)
    ) as client:
        result = await client.call_tool("fx.bad", {"path": "/public/x", "n": int(n)})
        print(json.dumps({"isError": result.is_error, "blocks": len(result.content)}))

anyio.run(main, *sys.argv[1:])
"""


async def test_a_result_of_130000_blocks_does_not_stall_the_event_loop(tmp_path: Path) -> None:
    toml = hostile_upstream("--mode", "many-blocks", call_s=120)
    async with brokered(tmp_path, toml, RULES, handler_timeout_s=150) as env:
        context = env.context()
        run_policy = env.policy.tool_policies["run"]
        async with (
            env.broker.turn(context),
            open_turn(env.host, context, run_policy) as turn,
            loop_gaps() as gaps,
        ):
            # ~4 MiB: under max_result_bytes
            argv = [
                sys.executable,
                "-c",
                CLIENT,
                str(turn.url),
                json.dumps(turn.headers()),
                "130000",
            ]
            done = await anyio.run_process(argv, check=True)
        [record] = env.records(context.turn_id)
    assert max(gaps) < bound(1.0), f"the host's event loop stalled {max(gaps):.2f} s"
    answer = json.loads(done.stdout)
    assert answer == {"isError": True, "blocks": 1}
    assert str(record.reason) == "upstream_error"
