"""A turn that closes while a real client's call is still running: the client gets an answer.

The TypeScript SDK client, and so the MCP Inspector CLI built on it,
speaks 2025-11-25 over HTTP. When the turn closed under its call (past the
grace), the session's transport ended the call's stream without an answer,
which this SDK reads as a graceful end: it kept waiting until its own request
timeout, 60 s ("Request timed out"), while a stdio client saw "Connection
closed" at once. Now the call's id is answered with a JSON-RPC error as the
turn closes; the call is recorded once, ``cancelled``.

Over a relayed stdio bridge the same clients read only the end of their input
("Connection closed"): the bridge exited with the call unanswered. It answers
it now with the same error before it exits.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from sharedos.bridge import open_turn
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, build_runtime
from tests.clients.conftest import TS_CLIENT, Clients

pytestmark = pytest.mark.anyio

SLOW = {"name": "slow.wait", "arguments": {"seconds": 30}}
UNANSWERED = "before this request was answered"


async def _close_under(
    clients: Clients, tmp: Path, which: str, transport: str = "http"
) -> tuple[str, list[Any]]:
    """Start ``which`` on a slow call, close the turn under it; its output and the records."""
    runtime = build_runtime(tmp)
    alice = AccessContext(principal="alice", roles=("user",), turn_id="turn-closing")
    async with open_turn(
        runtime.host,
        alice,
        OPEN_POLICY,
        grace_s=0.1,
        transport=transport,  # type: ignore[arg-type]
    ) as turn:
        if transport == "stdio":
            assert turn.command is not None
            head: list[str] = []
            tail = ["--", *turn.command]  # the command comes last, after "--"
        else:
            assert turn.url is not None
            head, tail = [turn.url, "--header", f"Authorization: Bearer {turn.token}"], []
        if which == "ts-sdk":
            spec: dict[str, Any] = {"calls": [SLOW]}
            if transport == "stdio":
                assert turn.command is not None
                spec.update(transport="stdio", command=turn.command[0], args=turn.command[1:])
            else:
                spec.update(transport="http", url=turn.url, headers=turn.headers())
            command = [clients.node, str(TS_CLIENT)]
            stdin = json.dumps(spec).encode()
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(tmp),
                "SHAREDOS_NODE_MODULES": str(clients.node_modules),
            }
        else:
            command = [
                clients.node,
                str(clients.inspector_js),
                "--cli",
                *("--connect-timeout", "90000"),  # a stdio bridge's start on a busy machine
                *head,
                "--method",
                "tools/call",
                "--tool-name",
                "slow.wait",
                "--tool-arg",
                "seconds=30",
                *tail,
            ]
            stdin = b""
            env = {**os.environ, "HOME": str(tmp), "MCP_CATALOG_PATH": str(tmp / "catalog.json")}
        process = await anyio.open_process(command, env=env)
        assert process.stdin is not None
        await process.stdin.send(stdin)
        await process.stdin.aclose()
        with anyio.fail_after(60):
            await runtime.probe.started.wait()  # the call is running: close the turn under it
    output = b""
    # without an answer the client waits for its own 60 s timeout
    with anyio.fail_after(90):
        for stream in (process.stdout, process.stderr):
            assert stream is not None
            async for chunk in stream:
                output += chunk
        await process.wait()
    records = runtime.evidence.query(turn_id=alice.turn_id)
    return output.decode(), [(r.tool, str(r.outcome), str(r.reason)) for r in records]


@pytest.mark.parametrize("transport", ["http", "stdio"])
@pytest.mark.parametrize("which", ["ts-sdk", "inspector"])
async def test_a_call_running_when_the_turn_closes_is_answered_at_once(
    clients: Clients, tmp_path: Path, which: str, transport: str
) -> None:
    output, records = await _close_under(clients, tmp_path, which, transport)
    assert UNANSWERED in output and "timed out" not in output, output[-2000:]
    assert records == [("slow.wait", "cancelled", "cancelled")]
