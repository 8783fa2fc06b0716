"""At the session cap, only a request that can open a session makes room for one.

Finding: the POST gate evicted the longest-idle 2025-11-25 session for every
POST without an ``Mcp-Session-Id`` once the turn was at ``max_sessions`` —
before the SDK had a look at it. But without a session id only an
``initialize`` of a handshake-era version, from an allowed Host and Origin,
opens a session: a ``tools/call`` or a notification sent without the header
(a client that lost its session), a request routed to the stateless
2026-07-28 entry by an unknown ``MCP-Protocol-Version``, or an ``initialize``
the DNS-rebinding check refuses (403) opened none, yet each ended a live
client's session (its next request: 404 "Session not found").
"""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.limits import TransportLimits
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, Runtime
from tests.bridge.rawwire import ACCEPT, INITIALIZED, call, initialize, legacy_session

pytestmark = pytest.mark.anyio

_LIST = {"jsonrpc": "2.0", "id": 50, "method": "tools/list"}


def _no_session_posts() -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    return [
        ("tools/call without a session", call(7, "files.read", {"path": "/public/a.txt"}), {}),
        ("tools/list without a session", _LIST, {}),
        ("a notification without a session", INITIALIZED, {}),
        (
            "initialize, unknown version header",
            initialize(),
            {"mcp-protocol-version": "2099-01-01"},
        ),
        ("initialize, foreign Origin", initialize(), {"origin": "http://evil.example"}),
        ("initialize, foreign Host", initialize(), {"host": "evil.example"}),
    ]


async def test_a_post_that_opens_no_session_evicts_none(
    runtime: Runtime, alice: AccessContext
) -> None:
    limits = TransportLimits(max_sessions=2)
    async with open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=10) as hc:
            sessions = [await legacy_session(hc, turn.url) for _ in range(2)]
            statuses = {}
            for what, body, headers in _no_session_posts():
                statuses[what] = (await hc.post(turn.url, json=body, headers=headers)).status_code
            alive = [(await hc.post(turn.url, json=_LIST, headers=s)).status_code for s in sessions]
            # an initialize that does open a session still makes room for itself
            opened = await hc.post(turn.url, json=initialize())
    assert all(
        status >= 400 or what.startswith("a notification") for what, status in statuses.items()
    ), statuses
    assert alive == [200, 200], (alive, statuses)
    assert opened.status_code == 200
    assert turn.transport_stats.sessions_evicted == 1
