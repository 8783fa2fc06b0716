"""Which answers go back as one JSON body and which as an SSE stream (issue 27).

A request's answer is ``application/json`` when the SSE stream the SDK's
2025-11-25 transport opens for it would carry nothing but that answer; a
request whose stream carries anything before its answer (progress, a log, an
approval's elicitation) gets the stream exactly as before. Checked with the
real SDK client in both eras, and on the raw wire.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult

from sharedos.bridge import open_turn, sse_answer
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, Runtime
from tests.bridge.test_approvals_elicitation import ARGS, MAYA, RUN, Person, Setup

pytestmark = pytest.mark.anyio

JSON = "application/json"
SSE = "text/event-stream"


class Wire:
    """What came back for each POSTed request: (JSON-RPC method, response content type)."""

    def __init__(self) -> None:
        self.answers: list[tuple[str, str]] = []

    async def on_response(self, response: httpx2.Response) -> None:
        request = response.request
        if request.method != "POST":
            return
        try:
            sent = json.loads(request.content)
        except ValueError:
            return
        if isinstance(sent, dict) and "id" in sent and "method" in sent:
            kind = response.headers.get("content-type", "").split(";")[0].strip()
            self.answers.append((str(sent["method"]), kind))

    def of(self, method: str) -> list[str]:
        """The content types of the answers to ``method``, in order."""
        return [kind for m, kind in self.answers if m == method]


@asynccontextmanager
async def watched_client(
    url: str, token: str, wire: Wire, *, mode: str, **kwargs: Any
) -> AsyncIterator[Client]:
    """The SDK client over streamable HTTP, every POST's answer noted in ``wire``."""
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
            event_hooks={"response": [wire.on_response]},
        ) as hc,
        Client(streamable_http_client(url, http_client=hc), mode=mode, **kwargs) as client,
    ):
        yield client


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_calls_with_nothing_to_stream_are_answered_with_json(
    runtime: Runtime, alice: AccessContext, mode: str
) -> None:
    wire = Wire()
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with watched_client(turn.url, turn.token, wire, mode=mode) as client:
            ok = await client.call_tool("files.read", {"path": "/public/a.txt"})
            refused = await client.call_tool("files.read", {"path": "/private/secret.txt"})
            listed = await client.list_tools()
    assert not ok.is_error and "public text" in json.dumps(ok.model_dump(mode="json"))
    # a refusal is still a result, and still arrives whole
    assert refused.is_error and "top secret" not in json.dumps(refused.model_dump(mode="json"))
    assert {t.name for t in listed.tools} >= {"files.read", "slow.wait"}
    assert wire.of("tools/call") == [JSON, JSON]
    # every request of the session, the handshake's included, came back as one JSON body
    assert wire.answers and {kind for _, kind in wire.answers} == {JSON}
    outcomes = sorted(str(r.outcome) for r in runtime.evidence.query(turn_id=alice.turn_id))
    assert outcomes == ["denied", "succeeded"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_progress_keeps_the_stream(runtime: Runtime, alice: AccessContext, mode: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    wire = Wire()
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with watched_client(turn.url, turn.token, wire, mode=mode) as client:
            streamed = await client.call_tool(
                "slow.wait", {"seconds": 0.05}, progress_callback=on_progress
            )
            # a progress token alone changes nothing: files.read reports no progress
            plain = await client.call_tool(
                "files.read", {"path": "/public/a.txt"}, progress_callback=on_progress
            )
    assert not streamed.is_error and not plain.is_error
    assert seen == [(0.0, 1.0, "started")]
    assert wire.of("tools/call") == [SSE, JSON]


async def test_an_approval_prompt_keeps_the_stream(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    person = Person(ElicitResult(action="accept", content={"approve": True}))
    wire = Wire()
    async with (
        open_turn(s.host, MAYA, RUN) as turn,
        watched_client(
            turn.url, turn.token, wire, mode="legacy", elicitation_callback=person
        ) as client,
    ):
        asked = await client.call_tool("files.write", ARGS)
        # the same client, a call that needs no approval: nothing to stream
        plain = await client.call_tool("files.read", {"path": "/shared/release/notes.txt"})
    assert not asked.is_error and not plain.is_error
    assert len(person.asked) == 1 and s.written.read_text() == "v1\n"
    assert wire.of("tools/call") == [SSE, JSON]


async def _post(client: httpx2.AsyncClient, url: str, body: dict[str, Any], **headers: str) -> Any:
    return await client.post(
        url,
        json=body,
        headers={"Accept": f"{JSON}, {SSE}", "Content-Type": JSON, **headers},
    )


async def _open_session(hc: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """A 2025-11-25 session opened on the raw wire; the headers its requests carry."""
    opened = await _post(
        hc,
        url,
        {
            "jsonrpc": "2.0",
            "id": "init-1",
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        },
    )
    assert opened.status_code == 200
    assert opened.headers["content-type"] == JSON
    assert opened.json()["id"] == "init-1"
    headers = {
        "Mcp-Session-Id": opened.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    await _post(hc, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, **headers)
    return headers


@asynccontextmanager
async def raw_session(
    runtime: Runtime, alice: AccessContext
) -> AsyncIterator[tuple[httpx2.AsyncClient, str, dict[str, str]]]:
    """A turn, an HTTP client with its token and a session opened on the raw wire:
    ``(client, url, the headers its requests carry)``."""
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {turn.token}"}, timeout=30
        ) as hc:
            yield hc, turn.url, await _open_session(hc, turn.url)


def _slow_call(ident: int, seconds: float) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": ident,
        "method": "tools/call",
        "params": {"name": "slow.wait", "arguments": {"seconds": seconds}},
    }


async def test_the_raw_wire(runtime: Runtime, alice: AccessContext) -> None:
    """What a client without the SDK sees: the session header kept, the body one JSON-RPC response."""
    async with raw_session(runtime, alice) as (hc, url, headers):
        session = headers["Mcp-Session-Id"]
        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "files.read", "arguments": {"path": "/public/a.txt"}},
        }
        answered = await _post(hc, url, call, **headers)
        assert answered.status_code == 200
        assert answered.headers["content-type"] == JSON
        assert answered.headers["mcp-session-id"] == session
        assert int(answered.headers["content-length"]) == len(answered.content)
        body = answered.json()
        assert body["id"] == 7 and body["result"]["isError"] is False
        # with progress to report, the stream: the notification, then the answer
        call["id"] = 8
        call["params"] = {
            "name": "slow.wait",
            "arguments": {"seconds": 0.05},
            "_meta": {"progressToken": "p-8"},
        }
        streamed = await _post(hc, url, call, **headers)
        assert streamed.headers["content-type"].startswith(SSE)
        events = [
            json.loads(line[len("data: ") :])
            for line in streamed.text.splitlines()
            if line.startswith("data: ")
        ]
        assert [e.get("method") for e in events] == ["notifications/progress", None]
        assert events[0]["params"]["progressToken"] == "p-8"
        assert events[1]["id"] == 8 and "result" in events[1]


async def test_a_handlers_log_messages_keep_the_stream(tmp_path: Path) -> None:
    """A tool that logs while it runs: its log messages arrive, on its call's stream."""
    from sharedos.catalog.registry import ToolRegistry
    from sharedos.evidence.sqlite import SqliteEvidenceStore
    from sharedos.kernel.kernel import Kernel
    from sharedos.kernel.runtime import RuntimeHost
    from sharedos.testing.conformance_tools import conformance_tools
    from tests.bridge.conftest import compile_rules

    policy = compile_rules("conformance.sos")
    host = RuntimeHost(
        Kernel(policy, ToolRegistry(conformance_tools())),
        SqliteEvidenceStore(tmp_path / "evidence.db"),
    )
    ctx = AccessContext(principal="conformance-suite", roles=("conformance",))
    logged: list[Any] = []

    async def on_log(params: Any) -> None:
        logged.append(params.data)

    wire = Wire()
    async with (
        open_turn(host, ctx, policy.tool_policies["conformance"]) as turn,
        watched_client(
            turn.url, turn.token, wire, mode="legacy", logging_callback=on_log
        ) as client,
    ):
        said = await client.call_tool("test_tool_with_logging", {})
        plain = await client.call_tool("test_simple_text", {})
    assert not said.is_error and not plain.is_error
    assert logged == ["Tool execution started", "Tool processing data", "Tool execution completed"]
    assert wire.of("tools/call") == [SSE, JSON]


async def test_a_silent_call_gets_its_stream_kept_alive(
    runtime: Runtime, alice: AccessContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call silent for longer than the keepalive interval: the stream starts with a ping,
    then carries the answer (a long call's connection is never left idle)."""
    monkeypatch.setattr(sse_answer, "SILENCE_S", 0.2)
    async with raw_session(runtime, alice) as (hc, url, headers):
        quick = await _post(hc, url, _slow_call(1, 0.0), **headers)
        slow = await _post(hc, url, _slow_call(2, 0.8), **headers)
    assert quick.headers["content-type"] == JSON
    assert quick.json()["result"]["isError"] is False
    assert slow.headers["content-type"].startswith(SSE)
    assert slow.headers["mcp-session-id"] == headers["Mcp-Session-Id"]
    lines = slow.text.splitlines()
    assert lines[0].startswith(": ping")
    data = [json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: ")]
    assert len(data) == 1 and data[0]["id"] == 2 and data[0]["result"]["isError"] is False


async def test_a_client_that_leaves_a_silent_call(runtime: Runtime, alice: AccessContext) -> None:
    """The client gives up on a call before it answers: the call still ends and is recorded,
    and the session keeps answering."""
    async with raw_session(runtime, alice) as (hc, url, headers):
        with pytest.raises(httpx2.ReadTimeout):
            await hc.post(
                url,
                json=_slow_call(1, 0.6),
                headers={"Accept": f"{JSON}, {SSE}", "Content-Type": JSON, **headers},
                timeout=httpx2.Timeout(30, read=0.2),
            )
        after = await _post(hc, url, _slow_call(2, 0.0), **headers)
        assert after.headers["content-type"] == JSON
        assert after.json()["result"]["isError"] is False
        await anyio.sleep(0.8)  # the abandoned call finishes meanwhile
        again = await _post(hc, url, _slow_call(3, 0.0), **headers)
        assert again.json()["id"] == 3
    outcomes = [str(r.outcome) for r in runtime.evidence.query(turn_id=alice.turn_id)]
    assert outcomes == ["succeeded"] * 3
