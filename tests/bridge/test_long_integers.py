"""A tools/call holding an integer longer than the JSON parsers read (> 4,300 digits).

Finding 3: RFC 8259 puts no bound on a number's length, but both the SDK's
parser (pydantic_core) and Python's ``json`` refuse an integer of more than
4,300 digits (CPython's int/str conversion limit), and the bridge's
classification then called the whole frame "not JSON": the call, although
its method, name and id can be read, was answered with a JSON-RPC ``-32700``
parse error (id null) and recorded only as a rate-limited ``<malformed>``
frame — not as a refused ``tools/call`` of that tool. It is refused like a
non-finite number (no canonical JSON can record it), recorded one by one and
answered as a result.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.frames import classify
from sharedos.kernel.context import AccessContext
from sharedos.toolpolicy import ToolPolicy
from tests.bridge.conftest import Runtime, build_runtime, files_launch
from tests.bridge.rawwire import ACCEPT, StdioBridge, json_rpc_messages, legacy_session

pytestmark = pytest.mark.anyio

FILES_POLICY = ToolPolicy(name="bridge-open", mode="open", managed=("files.*",))
LONG = b"9" * 5000


def _call(request_id: int) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"files.write",'
        b'"arguments":{"path":"/home/alice/long.txt","content":"x","n":%s}}}' % (request_id, LONG)
    )


@pytest.fixture
def files_runtime(tmp_path: Path) -> Runtime:
    return build_runtime(tmp_path, with_slow=False)


def test_classify_makes_out_the_call() -> None:
    frame = classify(_call(5))
    assert frame.message is None
    (call,) = frame.calls
    assert call.request_id == 5 and call.name == "files.write"
    assert call.arguments is None  # not kept: they could not be read faithfully


def _check_records(rt: Runtime, alice: AccessContext) -> None:
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.outcome), str(r.reason)) for r in records] == [
        ("files.write", "failed", "malformed_request")
    ]
    assert not (rt.sandbox / "home" / "alice" / "long.txt").exists()


async def test_http_call_with_a_long_integer_is_answered_as_a_result(
    files_runtime: Runtime,
) -> None:
    rt = files_runtime
    alice = AccessContext(principal="alice")
    async with open_turn(rt.host, alice, FILES_POLICY) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=10) as hc:
            session = await legacy_session(hc, turn.url)
            r = await hc.post(turn.url, content=_call(7), headers=session)
    (answer,) = json_rpc_messages(r)
    assert answer.get("id") == 7 and answer["result"]["isError"] is True, answer
    _check_records(rt, alice)


async def test_stdio_call_with_a_long_integer_is_answered_as_a_result(
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
            await bridge.send_line(_call(8))
            answer = await bridge.wait_reply(8, timeout=10)
        finally:
            await bridge.kill()
    assert answer["result"]["isError"] is True, answer
    _check_records(rt, alice)
