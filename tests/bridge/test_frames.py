"""``sharedos.bridge.frames``: what counts as whitespace around a frame is JSON's, not Python's.

JSON allows four whitespace characters (RFC 8259 section 2: space, tab, CR,
LF). ``str.strip``/``bytes.strip`` strip more (form feed, vertical tab, and
for text NBSP, U+2028 ...): a complete message followed by a form feed was
recorded and answered as ``truncated`` ("ends before its JSON is complete"),
and a stdio line of only a form feed was skipped as blank, with no record.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.frames import Problem, classify, is_blank, oversized
from sharedos.kernel.context import AccessContext
from sharedos.toolpolicy import ToolPolicy
from tests.bridge.conftest import build_runtime
from tests.bridge.rawwire import ACCEPT, StdioBridge, call, frame, legacy_session
from tests.timing import bound

pytestmark = pytest.mark.anyio

FILES_POLICY = ToolPolicy(name="bridge-open", mode="open", managed=("files.*",))
PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
#: whitespace to Python, not to JSON
NOT_JSON_SPACE = ["\x0c", "\x0b", "\x1c", "\u00a0", "\u2028", "\u3000"]


@pytest.mark.parametrize("space", NOT_JSON_SPACE)
def test_bytes_after_a_complete_message_are_not_a_truncation(space: str) -> None:
    after = classify(PING + space.encode())
    assert after.message is None and after.problem is Problem.NOT_JSON, after
    assert after.requests == (1,)  # still answered for its id
    # JSON whitespace after a message is nothing; a cut message is still truncated
    assert classify(PING + b" \t\r\n").message is not None
    assert classify(PING[:-3] + b" \r\n").problem is Problem.TRUNCATED


@pytest.mark.parametrize("space", ["\x0c", "\x0b"])
def test_a_frame_of_python_whitespace_is_not_empty(space: str) -> None:
    assert not is_blank(space.encode())
    assert classify(space.encode()).problem is Problem.NOT_JSON
    assert is_blank(b" \t\r\n") and classify(b" \r\n").problem is Problem.EMPTY


async def test_stdio_a_form_feed_line_is_recorded_and_a_call_before_one_is_not_truncated(
    tmp_path: Path,
) -> None:
    rt = build_runtime(tmp_path, with_slow=False)
    alice = AccessContext(principal="alice")
    read = call(5, "files.read", {"path": "/public/a.txt"})
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.handshake()
            await bridge.send_line(frame(read) + b"\x0c")
            refused = await bridge.wait_reply(5)
            await bridge.send_line(b"\x0c")
            await bridge.send_line(frame({**read, "id": 6}))
            await bridge.wait_reply(6)
        finally:
            await bridge.kill()
    assert refused["error"]["message"] == "the request is not JSON", refused
    records = rt.evidence.query(turn_id=alice.turn_id)
    problems = [
        dict(r.diagnostics or {}).get("malformed", {}).get("problem")
        for r in records
        if str(r.reason) == "malformed_request"
    ]
    assert problems == ["not_json", "not_json"], problems
    assert [str(r.outcome) for r in records][-1] == "succeeded"


def test_a_frame_whose_id_is_not_json_is_answered_for_no_other_request() -> None:
    """``"id":01`` is not JSON; its parse error went to request 0 (``initialize``, for the SDKs)."""
    cut = classify(b'{"jsonrpc":"2.0","id":01,"method":"tools/call","params":{"name":"x"}}')
    assert cut.problem is Problem.NOT_JSON and cut.requests == ()
    assert classify(b'{"jsonrpc":"2.0","id":12abc,"method":"ping"}').requests == ()
    assert classify(b'{"jsonrpc":"2.0","id":12,"method":"ping"} x').requests == (12,)


@pytest.mark.parametrize("method", [b"5", b"null", b'["tools/call"]', b'{"m":1}', b"true"])
def test_a_request_whose_method_is_not_a_string_is_answered_for_its_id(method: bytes) -> None:
    """JSON-RPC answers an invalid request at its id when the id can be made out; with
    ``id: null`` a stdio client (the id is all it matches answers by) waited forever."""
    request = classify(b'{"jsonrpc":"2.0","id":5,"method":%s,"params":{}}' % method)
    assert request.message is None and request.problem is Problem.NOT_JSONRPC
    assert request.requests == (5,)
    # not a request (no method member): no request of the client's may be answered
    assert classify(b'{"jsonrpc":"2.0","id":5}').requests == ()


async def test_stdio_a_request_whose_method_is_not_a_string_is_answered(tmp_path: Path) -> None:
    rt = build_runtime(tmp_path, with_slow=False)
    alice = AccessContext(principal="alice")
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.handshake()
            await bridge.send_line(b'{"jsonrpc":"2.0","id":"m-1","method":7,"params":{}}')
            await bridge.send_line(frame(call(6, "files.read", {"path": "/public/a.txt"})))
            await bridge.wait_reply(6)
            answer = bridge.reply("m-1")
        finally:
            await bridge.kill()
    assert answer is not None and answer["error"]["code"] == -32600, bridge.replies


def test_messages_written_without_their_newline_are_each_made_out() -> None:
    first = frame(call(1, "files.read", {"path": "/a"}))
    ping = b'{"jsonrpc":"2.0","id":"p","method":"ping"}'
    joined = classify(first + b" \r\n " + frame(call(2, "files.write", {"path": "/b"})) + ping)
    assert joined.problem is Problem.NOT_JSON
    assert [(c.request_id, c.name) for c in joined.calls] == [(1, "files.read"), (2, "files.write")]
    assert joined.requests == ("p",)
    assert all(not c.arguments_intact and c.arguments is None for c in joined.calls)
    # anything else between or after them: only the first id can be read, as before
    for damaged in (first + b" x", first + b"\x0c" + first, first + first[:-2]):
        frame_ = classify(damaged)
        assert frame_.calls == () and frame_.requests == (1,)


async def test_stdio_two_calls_on_one_line_are_both_refused_answered_and_recorded(
    tmp_path: Path,
) -> None:
    """The second of two messages written without a newline between was never answered:
    a stdio client waited for it forever."""
    rt = build_runtime(tmp_path, with_slow=False)
    alice = AccessContext(principal="alice")
    write = call(7, "files.write", {"path": "/home/alice/w.txt", "content": "x"})
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.handshake()
            await bridge.send_line(
                frame(call(6, "files.read", {"path": "/public/a.txt"})) + frame(write)
            )
            answers = [await bridge.wait_reply(i, timeout=30) for i in (6, 7)]
        finally:
            await bridge.kill()
    assert all(a["result"]["isError"] is True for a in answers), answers
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.reason)) for r in records] == [
        ("files.read", "malformed_request"),
        ("files.write", "malformed_request"),
    ]
    assert not (rt.sandbox / "home" / "alice" / "w.txt").exists()


#: ids JSON-RPC lets a request carry that MCP does not (string or integer only)
UNUSABLE_IDS = [b"null", b"1.5", b"true", b'{"a":1}', b"[1]"]


@pytest.mark.parametrize("request_id", UNUSABLE_IDS)
def test_a_request_whose_id_mcp_does_not_allow_is_not_taken_for_a_notification(
    request_id: bytes,
) -> None:
    """The SDK's notification model ignores an ``id`` member, so ``{"id": null, "method":
    "ping"}`` was handed on as a notification: never answered (HTTP 202, nothing on
    stdio), and a client waited for its answer forever. JSON-RPC answers such a request
    with an "invalid request" error and ``id: null``, as the bridge already did for a
    ``tools/call`` with such an id."""
    request = classify(b'{"jsonrpc":"2.0","id":%s,"method":"ping"}' % request_id)
    assert request.message is None and request.problem is Problem.NOT_JSONRPC
    assert request.requests == (None,)
    batch = classify(b'[{"jsonrpc":"2.0","id":%s,"method":"ping"},%s]' % (request_id, PING))
    assert batch.requests == (None, 1)
    # a notification (no id member) is still one, and so is one whose absent id was
    # written as null (a struct field without omitempty)
    assert classify(b'{"jsonrpc":"2.0","method":"notifications/initialized"}').message
    assert classify(b'{"jsonrpc":"2.0","method":"notifications/initialized","id":null}').message


async def test_stdio_and_http_answer_a_request_whose_id_mcp_does_not_allow(
    tmp_path: Path,
) -> None:
    rt = build_runtime(tmp_path, with_slow=False)
    alice = AccessContext(principal="alice")
    bad = [b'{"jsonrpc":"2.0","id":%s,"method":"ping"}' % i for i in UNUSABLE_IDS]
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.handshake()
            for line in bad:
                await bridge.send_line(line)
            await bridge.send_line(PING)
            assert bridge.process.stdin is not None
            await bridge.process.stdin.aclose()
            code = await bridge.read_until_exit(bound(10))
        finally:
            await bridge.kill()
    assert code == 0, bridge.stderr
    errors = [r for r in bridge.replies if r.get("id") is None]
    assert [e["error"]["code"] for e in errors] == [-32600] * len(bad), bridge.replies
    assert bridge.reply(1) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    # a turn of its own: a turn id names one turn, and that one has closed
    async with open_turn(rt.host, AccessContext(principal="alice"), FILES_POLICY) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=10) as hc:
            session = await legacy_session(hc, turn.url)
            for body in bad:
                r = await hc.post(turn.url, content=body, headers=session)
                assert r.status_code == 400, (body, r.status_code, r.text)
                assert r.json()["id"] is None and r.json()["error"]["code"] == -32600


@pytest.mark.parametrize(
    "answer",
    [
        b'{"jsonrpc":"2.0","id":1,"result":{"action":"acc',
        b'{"jsonrpc":"2.0","id":1,"result":{"action":"accept"}} x',
        b'{"jsonrpc":"2.0","id":1,"error":{"code":1}}}',
    ],
)
def test_a_damaged_answer_is_not_answered_at_its_id(answer: bytes) -> None:
    """The id of the client's answer names the bridge's request (an elicitation), not one
    of the client's: a parse error sent to it answered the client's own request of that
    id (see test_approvals_elicitation). It gets its error with id null."""
    damaged = classify(answer)
    assert damaged.message is None and damaged.requests == ()
    cut = oversized(5_000_000, answer[:40], b'"}},"id":1}')
    assert cut.requests == ()
    # a damaged request is still answered at its id
    assert classify(PING[:-1]).requests == (1,)
