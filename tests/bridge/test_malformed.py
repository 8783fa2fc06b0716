"""A tools/call the SDK rejects as malformed still reaches the kernel, is recorded, and is
answered as a result (a refusal is never a JSON-RPC error)."""

from __future__ import annotations

import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, Runtime
from tests.bridge.rawwire import json_rpc_messages

pytestmark = pytest.mark.anyio

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


async def test_malformed_calls_are_recorded_in_both_eras(
    runtime: Runtime, alice: AccessContext
) -> None:
    replies: list[httpx2.Response] = []
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=10) as hc:
            init = await hc.post(
                turn.url,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "raw-client", "version": "1"},
                    },
                },
            )
            session = {
                "mcp-session-id": init.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-11-25",
            }
            await hc.post(
                turn.url,
                json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                headers=session,
            )
            for params in (
                {"name": 42, "arguments": {}},
                {"name": "files.read", "arguments": [1, 2]},
            ):
                r = await hc.post(
                    turn.url,
                    json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params},
                    headers=session,
                )
                replies.append(r)
            modern = {
                "mcp-protocol-version": "2026-07-28",
                "mcp-method": "tools/call",
                "mcp-name": "files.read",
            }
            r = await hc.post(
                turn.url,
                json={
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "tools/call",
                    "params": {"name": "files.read", "arguments": [1, 2], "_meta": MODERN_META},
                },
                headers=modern,
            )
            replies.append(r)
    # the client gets the kernel's refusal as a result ...
    answers = [json_rpc_messages(r)[-1] for r in replies]
    assert all(a["result"]["isError"] is True for a in answers), answers
    assert [a["result"]["structuredContent"]["reason"] for a in answers] == [
        "tool_unavailable",
        "invalid_arguments",
        "invalid_arguments",
    ]
    # ... and every attempt is in the evidence, refused by the kernel
    records = runtime.evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.outcome), str(r.reason)) for r in records] == [
        ("42", "denied", "tool_unavailable"),
        ("files.read", "failed", "invalid_arguments"),
        ("files.read", "failed", "invalid_arguments"),
    ]
    assert [(r.diagnostics or {}).get("protocolVersion") for r in records] == [
        "2025-11-25",
        "2025-11-25",
        "2026-07-28",
    ]
    assert all((r.diagnostics or {}).get("malformedRequest") for r in records)
    assert (records[0].diagnostics or {}).get("clientName") == "raw-client"


async def test_the_bridges_own_refusals_carry_the_turns_identity(
    runtime: Runtime, alice: AccessContext
) -> None:
    """docs/bridge.md: the turn's ``identity`` (SystemIdentity) is stored on every evidence
    record. A refusal the bridge decides itself -- a frame it cannot deliver, a call that
    reaches a closing turn -- was recorded without it: which harness, column and model
    made that attempt was not on its record, while every other record of the turn said."""
    from tests.bridge.conftest import http_client

    identity = {"harness": "raw-client", "column": "mcp", "declaredModel": "m-1"}
    async with open_turn(runtime.host, alice, OPEN_POLICY, identity=identity) as turn:
        assert turn.url is not None and turn.endpoint is not None
        async with http_client(turn.url, turn.token) as client:
            ran = await client.call_tool("files.read", {"path": "/public/a.txt"})
            turn.endpoint.closed = True  # the window in which the turn is closing
            closed = await client.call_tool("files.read", {"path": "/public/a.txt"})
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=10) as hc:
            cut = await hc.post(turn.url, content=b'{"jsonrpc":"2.0","id":5,"method":"tools/call"')
    assert not ran.is_error and closed.is_error and cut.status_code == 400
    records = runtime.evidence.query(turn_id=alice.turn_id)
    assert [str(r.reason) for r in records] == ["None", "turn_closed", "malformed_request"]
    assert [dict(r.identity or {}) for r in records] == [identity] * 3
