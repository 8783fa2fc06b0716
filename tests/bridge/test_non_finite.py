"""A call carrying NaN, Infinity or a number too large for a float is refused and
recorded like any malformed call, on both transports; nothing runs on it.

JSON has no non-finite numbers, but Python's and the SDK's parsers read them,
and a comparison cannot be trusted with one: ``NaN > 1048576`` is false (a
forbid on a size limit lets it through), and ``NaN >= 0`` is false too (here
``slow.wait``'s ``minimum: 0`` schema let the handler run).
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.frames import Problem, classify
from sharedos.bridge.turnfile import StdioLaunch
from sharedos.kernel.context import AccessContext
from sharedos.toolpolicy import ToolPolicy
from tests.bridge.conftest import DATA, OPEN_POLICY, Runtime, build_runtime
from tests.bridge.rawwire import ACCEPT, StdioBridge, json_rpc_messages, legacy_session

pytestmark = pytest.mark.anyio

NON_FINITE = [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-2.5e400"]


def _call(request_id: int, name: str, args: bytes) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s}}'
        % (request_id, name.encode(), args)
    )


@pytest.mark.parametrize("number", NON_FINITE)
def test_classify_refuses_a_non_finite_number_anywhere(number: bytes) -> None:
    frame = classify(_call(5, "slow.wait", b'{"seconds":%s}' % number))
    assert frame.message is None and frame.problem is Problem.NON_FINITE
    (call,) = frame.calls
    assert call.request_id == 5 and call.name == "slow.wait"
    assert call.arguments is None  # not kept: no canonical JSON can record it
    deep = classify(_call(6, "files.read", b'{"path":"/a","x":[{"y":[%s]}]}' % number))
    assert deep.problem is Problem.NON_FINITE
    # finite numbers, and the words inside strings, are untouched
    fine = classify(_call(7, "files.read", b'{"path":"/NaN/Infinity","n":1e308,"m":-0.0}'))
    assert fine.message is not None and fine.problem is None


async def test_http_call_with_a_non_finite_argument_is_refused_and_recorded(
    runtime: Runtime,
) -> None:
    alice = AccessContext(principal="alice", roles=("user",))
    answers = []
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=10) as hc:
            session = await legacy_session(hc, turn.url)
            for i, number in enumerate(NON_FINITE):
                body = _call(10 + i, "slow.wait", b'{"seconds":%s}' % number)
                r = await hc.post(turn.url, content=body, headers=session)
                answers.append(json_rpc_messages(r)[-1])
            # the bridge still serves
            r = await hc.post(
                turn.url, content=_call(99, "slow.wait", b'{"seconds":0}'), headers=session
            )
            assert json_rpc_messages(r)[-1]["result"]["isError"] is False
    assert [a["id"] for a in answers] == [10, 11, 12, 13, 14]
    for a in answers:
        assert a["result"]["isError"] is True
        assert a["result"]["structuredContent"]["reason"] == "malformed_request"
    records = runtime.evidence.query(turn_id=alice.turn_id)
    refused = [r for r in records if str(r.reason) == "malformed_request"]
    assert len(refused) == len(NON_FINITE)
    assert all(r.tool == "slow.wait" and str(r.outcome) == "failed" for r in refused)
    assert all(
        (r.diagnostics or {})["rejectedByTransport"]["problem"] == "non_finite_number"
        for r in refused
    )
    # only the control call ran the handler
    assert [str(r.outcome) for r in records if str(r.reason) != "malformed_request"] == [
        "succeeded"
    ]


async def test_stdio_call_with_a_non_finite_argument_is_refused_and_recorded(
    tmp_path: Path,
) -> None:
    rt = build_runtime(tmp_path, with_slow=False)
    alice = AccessContext(principal="alice")
    policy = ToolPolicy(name="bridge-open", mode="open", managed=("files.*",))
    launch = StdioLaunch(
        rules=(DATA / "files.sos",),
        evidence_db=rt.evidence_path,
        tool_sets=("files",),
        sandbox_root=rt.sandbox,
        run_policy="bridge-open",
    )
    async with open_turn(rt.host, alice, policy, transport="stdio", stdio=launch) as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.handshake()
            await bridge.send_line(
                _call(3, "files.write", b'{"path":"/home/alice/n.txt","content":"x","n":NaN}')
            )
            refused = await bridge.wait_reply(3)
            await bridge.send_line(_call(4, "files.read", b'{"path":"/public/a.txt"}'))
            served = await bridge.wait_reply(4)
        finally:
            await bridge.kill()
    assert refused["result"]["isError"] is True
    assert refused["result"]["structuredContent"]["reason"] == "malformed_request"
    assert served["result"]["isError"] is False
    assert not (rt.sandbox / "home" / "alice" / "n.txt").exists()
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.outcome)) for r in records] == [
        ("files.write", "failed"),
        ("files.read", "succeeded"),
    ]
    assert str(records[0].reason) == "malformed_request"
