"""Requests that reach the HTTP bridge while its turn closes: refused and recorded, never a 500.

Closing a turn ends the SDK's session transports first (a legacy client's GET
stream would otherwise hold its connection), then the listener and the
connections. Finding (fixed): a request on a kept-alive connection in between
reached the ended sessions: a call on its session was recorded as a transport
rejection (``malformed_request``, HTTP 404) instead of ``turn_closed``, and an
``initialize`` opened a new session on the closed turn (200).
"""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

import sharedos.bridge.http as bridge_http
from sharedos.bridge import open_turn
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, Runtime
from tests.bridge.rawwire import ACCEPT, call, initialize, legacy_session, modern_headers

pytestmark = pytest.mark.anyio


def _write(request_id: int, name: str, *, modern: bool = False) -> dict[str, Any]:
    return call(
        request_id, "files.write", {"path": f"/home/alice/{name}", "content": "x"}, modern=modern
    )


async def test_requests_after_the_sessions_ended_are_refused_as_turn_closed(
    runtime: Runtime, alice: AccessContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    late: dict[str, httpx2.Response] = {}
    ended = bridge_http.close_sessions
    async with httpx2.AsyncClient(headers=ACCEPT, timeout=10) as hc:

        async def end_then_ask(manager: Any) -> None:
            await ended(manager)
            # the listener and this kept-alive connection are still open: the window
            late["legacy"] = await hc.post(url, json=_write(2, "late.txt"), headers=session)
            late["modern"] = await hc.post(
                url, json=_write(3, "late2.txt", modern=True), headers=modern_headers("files.write")
            )
            late["initialize"] = await hc.post(url, json=initialize(4))

        monkeypatch.setattr(bridge_http, "close_sessions", end_then_ask)
        async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
            assert turn.url is not None
            url = turn.url
            hc.headers.update(turn.headers())
            session = await legacy_session(hc, url)
            during = await hc.post(
                url, json=call(1, "files.read", {"path": "/public/a.txt"}), headers=session
            )
    assert during.status_code == 200
    for kind in ("legacy", "modern"):
        answer = late[kind]
        assert answer.status_code == 200, (kind, answer.status_code, answer.text)
        result = answer.json()["result"]
        assert result["isError"] is True and result["structuredContent"]["reason"] == "turn_closed"
    opened = late["initialize"]
    assert opened.status_code == 404 and "mcp-session-id" not in opened.headers, opened.text
    writes = [r for r in runtime.evidence.query() if r.tool == "files.write"]
    assert [(str(r.outcome), str(r.reason)) for r in writes] == [("denied", "turn_closed")] * 2
    assert sorted(p.name for p in (runtime.sandbox / "home" / "alice").iterdir()) == ["notes.txt"]
