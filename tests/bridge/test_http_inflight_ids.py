"""Two requests in flight with the same id on one 2025-11-25 session (HTTP).

Finding 2: the SDK's streamable HTTP transport keys a session's request
streams by ``str(id)``. A second request whose id is already in flight —
the same id, or ``5`` beside ``"5"``, which JSON-RPC counts as different
ids — replaced the first one's stream: the first POST never got its answer
(its stream only carried keep-alive pings from 15 s on) and the connection
stayed held until the turn closed, although the call ran and was recorded.
The second request is refused instead (recorded and answered as a result for
a tools/call), and the first one is answered.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, Runtime
from tests.bridge.rawwire import ACCEPT, json_rpc_messages, legacy_session

pytestmark = pytest.mark.anyio


def _wait(request_id: Any, seconds: float) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "slow.wait", "arguments": {"seconds": seconds}},
    }


@pytest.mark.parametrize(("first", "second"), [(5, 5), (5, "5")])
async def test_a_request_reusing_an_id_in_flight_never_strands_the_first(
    runtime: Runtime, alice: AccessContext, first: Any, second: Any
) -> None:
    answers: dict[str, httpx2.Response] = {}
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=30) as hc:
            session = await legacy_session(hc, turn.url)

            async def post(tag: str, body: dict[str, Any]) -> None:
                answers[tag] = await hc.post(turn.url, json=body, headers=session)

            started = time.monotonic()
            with anyio.move_on_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(post, "first", _wait(first, 1.5))
                    await runtime.probe.started.wait()
                    tg.start_soon(post, "second", _wait(second, 0.2))
            elapsed = time.monotonic() - started
            # the bridge still serves the session afterwards
            ok = await hc.post(turn.url, json=_wait(99, 0), headers=session)
            assert ok.status_code == 200
    assert "first" in answers, f"the first request got no answer in {elapsed:.1f} s"
    got = json_rpc_messages(answers["first"])
    assert [m.get("id") for m in got if "result" in m or "error" in m] == [first]
    assert got[-1]["result"]["isError"] is False  # slow.wait ran and answered "done"
    second_answer = json_rpc_messages(answers["second"])
    assert [m.get("id") for m in second_answer if "result" in m or "error" in m] == [second]
    assert "result" in second_answer[-1], second_answer  # a tools/call: a result, never an error
    # every attempt is recorded, the first, the second (run or refused) and the control
    assert runtime.evidence.counts(turn_id=alice.turn_id).total == 3
