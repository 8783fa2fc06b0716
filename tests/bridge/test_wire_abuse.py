"""Protocol abuse on the turn bridge's wire (both transports), beyond the garbage corpus.

Finding 1: a ``tools/call`` that also carries an ``error`` member validates
as a JSON-RPC *error response* in the SDK's message union (the nested
``ErrorData`` makes it the better match), so the bridge handed it on as an
answer to a server request: the server dropped it, the HTTP client got
``202`` and the stdio client nothing, and no evidence record was written —
an attempt that vanished. It must be refused, recorded and answered as a
result, like every other tools/call the transport cannot deliver.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.kernel.context import AccessContext
from sharedos.toolpolicy import ToolPolicy
from tests.bridge.conftest import OPEN_POLICY, Runtime, build_runtime, files_launch
from tests.bridge.rawwire import (
    ACCEPT,
    StdioBridge,
    call,
    frame,
    json_rpc_messages,
    legacy_session,
)
from tests.timing import bound

pytestmark = pytest.mark.anyio

FILES_POLICY = ToolPolicy(name="bridge-open", mode="open", managed=("files.*",))


@pytest.fixture
def files_runtime(tmp_path: Path) -> Runtime:
    return build_runtime(tmp_path, with_slow=False)


def _write_with_error(request_id: Any, path: str) -> dict[str, Any]:
    """An allowed ``files.write`` request that also carries a JSON-RPC ``error`` member."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "files.write", "arguments": {"path": path, "content": "x"}},
        "error": {"code": 1, "message": "not an answer"},
    }


def _is_refusal(answer: dict[str, Any]) -> bool:
    result = answer.get("result")
    return isinstance(result, dict) and result.get("isError") is True


async def test_http_tools_call_with_an_error_member_is_refused_recorded_and_answered(
    files_runtime: Runtime,
) -> None:
    rt = files_runtime
    alice = AccessContext(principal="alice")
    async with open_turn(rt.host, alice, FILES_POLICY) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=10) as hc:
            session = await legacy_session(hc, turn.url)
            body = frame(_write_with_error(7, "/home/alice/err.txt"))
            r = await hc.post(turn.url, content=body, headers=session)
            answers = json_rpc_messages(r)
    assert r.status_code == 200, (r.status_code, r.text)
    assert [a.get("id") for a in answers] == [7]
    assert _is_refusal(answers[0]), answers
    records = rt.evidence.query(turn_id=alice.turn_id)
    refused = [x for x in records if x.tool == "files.write"]
    assert len(refused) == 1, [(x.tool, str(x.outcome)) for x in records]
    assert (str(refused[0].outcome), str(refused[0].reason)) == ("failed", "malformed_request")
    assert not (rt.sandbox / "home" / "alice" / "err.txt").exists()


async def test_stdio_tools_call_with_an_error_member_is_refused_recorded_and_answered(
    files_runtime: Runtime,
) -> None:
    rt = files_runtime
    alice = AccessContext(principal="alice")
    launch = files_launch(rt)
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio", stdio=launch) as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.handshake()
            await bridge.send_line(frame(_write_with_error("e1", "/home/alice/err.txt")))
            answer = await bridge.wait_reply("e1", timeout=10)
        finally:
            await bridge.kill()
    assert _is_refusal(answer), answer
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert [(x.tool, str(x.reason)) for x in records] == [("files.write", "malformed_request")]
    assert not (rt.sandbox / "home" / "alice" / "err.txt").exists()


# Finding 2: on stdio the SDK picks the connection's protocol era from the first
# request and checks every later request's 2026-07-28 ``_meta`` envelope in its
# runner, before any server middleware. A ``tools/call`` it turns away there (an
# envelope on a connection opened with ``initialize``, an unsupported or malformed
# protocol version, a missing envelope key) got the SDK's JSON-RPC error and no
# evidence record: an attempt that vanished. Over HTTP the same requests are
# recorded (the transport answers 4xx, and the bridge records what it turned away).

_MODERN = "io.modelcontextprotocol/protocolVersion"
_CAPS = "io.modelcontextprotocol/clientCapabilities"


def _write_with_meta(request_id: str, path: str, meta: dict[str, Any]) -> dict[str, Any]:
    """An allowed ``files.write`` request carrying ``meta`` as its ``_meta``."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": "files.write",
            "arguments": {"path": path, "content": "x"},
            "_meta": meta,
        },
    }


@pytest.mark.parametrize(
    ("handshake", "meta"),
    [
        # a 2026-07-28 envelope on a connection opened with the initialize handshake
        (True, {_MODERN: "2026-07-28", _CAPS: {}}),
        (True, {_MODERN: "2099-01-01", _CAPS: {}}),
        # the first request opens a 2026-07-28 connection; its envelope is refused
        (False, {_MODERN: "2099-01-01", _CAPS: {}}),
        (False, {_MODERN: 5, _CAPS: {}}),
        (False, {_MODERN: "2026-07-28"}),
    ],
    ids=["handshake+envelope", "handshake+unknown", "unknown", "not-a-string", "no-caps"],
)
async def test_stdio_tools_call_the_sdk_turns_away_by_its_envelope_is_recorded(
    files_runtime: Runtime, handshake: bool, meta: dict[str, Any]
) -> None:
    rt = files_runtime
    alice = AccessContext(principal="alice")
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            if handshake:
                await bridge.handshake()
            await bridge.send_line(frame(_write_with_meta("m1", "/home/alice/m.txt", meta)))
            answer = await bridge.wait_reply("m1", timeout=10)
        finally:
            await bridge.kill()
    # the SDK's own answer stays (a client negotiates its protocol version on it)
    assert "error" in answer, answer
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert [(x.tool, str(x.outcome), str(x.reason)) for x in records] == [
        ("files.write", "failed", "malformed_request")
    ]
    rejected = (records[0].diagnostics or {}).get("rejectedByTransport") or {}
    assert rejected.get("problem") == "rejected_by_transport", records[0].diagnostics
    assert rejected.get("jsonrpcId") == "m1"
    assert not (rt.sandbox / "home" / "alice" / "m.txt").exists()


# Finding 3: the stdio bridge counts the requests it owes an answer so that, at the
# end of input, it answers them before it exits; a ``notifications/cancelled`` takes
# one off the count. It read ``params.requestId`` as a dictionary key, as is: a
# ``requestId`` that is a list or an object (unhashable) raised TypeError in its
# reader and the whole bridge exited 2 ("unhandled errors in a TaskGroup") with the
# calls in flight unanswered. And the SDK correlates a cancellation by the id as a
# number when it is a numeric string ("7" cancels request 7, as the TypeScript SDK
# does): the call was cancelled and never answered, yet the bridge still waited for
# that answer after the end of input, for the whole handler timeout (31 s). And with an
# id in flight twice, one cancellation (the SDK cancels the newer request) took both
# off the count: at the end of input the older call was cut off ("Connection closed")
# instead of answered.


def _cancel(request_id: Any) -> bytes:
    return frame(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
    )


@pytest.mark.parametrize("request_id", [[1], {"id": 1}], ids=["list", "object"])
async def test_stdio_a_cancellation_naming_no_usable_id_leaves_the_bridge_serving(
    runtime: Runtime, request_id: Any
) -> None:
    rt = runtime
    alice = AccessContext(principal="alice")
    async with open_turn(rt.host, alice, OPEN_POLICY, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.handshake()
            await bridge.send_line(frame(call("w", "slow.wait", {"seconds": 30})))
            with anyio.fail_after(10):
                await rt.probe.started.wait()  # a request is in flight
            await bridge.send_line(_cancel(request_id))
            await bridge.send_line(frame(call(2, "files.read", {"path": "/public/a.txt"})))
            answer = await bridge.wait_reply(2, timeout=10)
            assert answer["result"]["isError"] is False, answer
            await bridge.send_line(_cancel("w"))
            assert bridge.process.stdin is not None
            await bridge.process.stdin.aclose()
            code, _ = await bridge.wait_exit(bound(10))
        finally:
            await bridge.kill()
    assert code == 0, bridge.stderr
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert sorted((r.tool, str(r.outcome)) for r in records) == [
        ("files.read", "succeeded"),
        ("slow.wait", "cancelled"),
    ]


async def test_stdio_a_cancellation_by_the_id_as_a_string_owes_no_answer_at_eof(
    runtime: Runtime,
) -> None:
    rt = runtime
    alice = AccessContext(principal="alice")
    async with open_turn(rt.host, alice, OPEN_POLICY, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.handshake()
            await bridge.send_line(frame(call(7, "slow.wait", {"seconds": 30})))
            with anyio.fail_after(10):
                await rt.probe.started.wait()
            await bridge.send_line(_cancel("7"))  # the SDK cancels request 7 on it
            with anyio.fail_after(10):
                while not rt.probe.cancelled:
                    await anyio.sleep(0.02)
            assert bridge.process.stdin is not None
            await bridge.process.stdin.aclose()
            # nothing is owed now: the bridge leaves at the end of input (before: 31 s)
            code, _ = await bridge.wait_exit(bound(5))
        finally:
            await bridge.kill()
    assert code == 0
    assert bridge.reply(7) is None  # a cancelled request is never answered
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.outcome)) for r in records] == [("slow.wait", "cancelled")]


async def test_stdio_a_cancellation_of_an_id_in_flight_twice_still_answers_the_other(
    runtime: Runtime,
) -> None:
    rt = runtime
    alice = AccessContext(principal="alice")
    async with open_turn(rt.host, alice, OPEN_POLICY, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            # 2026-07-28 (the SDK client's default): a request still in flight when the
            # server's input ends is cut off ("Connection closed")
            await bridge.send_line(frame(call(5, "slow.wait", {"seconds": 2}, modern=True)))
            with anyio.fail_after(10):
                await rt.probe.started.wait()
            await bridge.send_line(frame(call(5, "slow.wait", {"seconds": 30}, modern=True)))
            with anyio.fail_after(10):
                while len(rt.evidence.query(turn_id=alice.turn_id)) < 2:
                    await anyio.sleep(0.02)  # both calls began (write-ahead records)
            await bridge.send_line(_cancel(5))  # the SDK cancels the newer one
            assert bridge.process.stdin is not None
            await bridge.process.stdin.aclose()
            answer = await bridge.wait_reply(5, timeout=10)
            code, _ = await bridge.wait_exit(bound(10))
        finally:
            await bridge.kill()
    assert "result" in answer and answer["result"]["isError"] is False, answer
    assert code == 0
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert sorted(str(r.outcome) for r in records) == ["cancelled", "succeeded"]
