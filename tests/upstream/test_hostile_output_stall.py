"""A large ``structuredContent`` checked against its ``outputSchema`` cannot stall the host.

``max_result_bytes`` bounds a result's bytes: 3 MiB is 500,000 short strings.
A tool declaring ``outputSchema`` had such a result validated twice on the
host's event loop -- by the SDK's client session, against the upstream's latest
listing, and by the forwarder, against the schema the turn published --
jsonschema spending ~10 us an item: every turn of the process froze for 8 s
(23 s for 700,000). The SDK's own check is off (the turn's schema is the one
that counts) and the forwarder's runs in a worker thread. The harness's client
runs in a process of its own, as in a real run, so what is measured is the
host alone.
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
        result = await client.session.call_tool("fx.bad", {"path": "/public/x", "n": int(n)})
        items = (result.structured_content or {}).get("v") or []
        print(json.dumps({"isError": result.is_error, "items": len(items)}))

anyio.run(main, *sys.argv[1:])
"""


@pytest.mark.parametrize(
    ("item", "valid"), [({"type": "string"}, True), ({"type": "integer"}, False)]
)
async def test_a_large_structured_result_is_validated_off_the_event_loop(
    tmp_path: Path, item: dict[str, str], valid: bool
) -> None:
    schema = {"type": "object", "properties": {"v": {"type": "array", "items": item}}}
    tools = tmp_path / "tools.json"
    tools.write_text(
        json.dumps(
            [
                {
                    "name": "bad",
                    "description": "many strings",
                    "inputSchema": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
                    },
                    "outputSchema": schema,
                }
            ]
        ),
        encoding="utf-8",
    )
    toml = hostile_upstream("--mode", "many-strings", "--tools", str(tools), call_s=120)
    async with brokered(tmp_path, toml, RULES, handler_timeout_s=150) as env:
        context = env.context()
        run_policy = env.policy.tool_policies["run"]
        async with (
            env.broker.turn(context),
            open_turn(env.host, context, run_policy) as turn,
            loop_gaps() as gaps,
        ):
            # ~3 MiB of structuredContent: under max_result_bytes
            argv = [sys.executable, "-c", CLIENT, str(turn.url), json.dumps(turn.headers())]
            done = await anyio.run_process([*argv, "500000"], check=False)
        [record] = env.records(context.turn_id)
    # the client's own failure, said (a CI run at load 9 once saw exit 1 and nothing else)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    assert max(gaps) < bound(1.0), f"the host's event loop stalled {max(gaps):.2f} s"
    answer = json.loads(done.stdout)
    if valid:
        assert answer == {"isError": False, "items": 500000}
        assert str(record.outcome) == "succeeded"
    else:
        assert answer["isError"] is True
        assert str(record.reason) == "upstream_error"
