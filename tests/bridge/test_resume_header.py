"""A 2025-11-25 GET stream request carrying ``Last-Event-ID`` (resumption).

Finding 4: the bridge runs the SDK's transport without an event store, and
the SDK's ``_replay_events`` then returns without starting a response:
uvicorn answered ``500 Internal Server Error`` and logged an ERROR ("ASGI
callable returned without starting response") for every such GET — a client
can put ERROR lines in the host log at will, and a client resuming after a
dropped stream gets a server error. With nothing to replay, the header is
ignored (the specification lets a server do so) and the GET opens the
session's stream as usual.
"""

from __future__ import annotations

import logging

import anyio
import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, Runtime
from tests.bridge.rawwire import ACCEPT, call, legacy_session

pytestmark = pytest.mark.anyio


async def test_a_get_with_last_event_id_is_no_server_error(
    runtime: Runtime, alice: AccessContext, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    status = None
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=10) as hc:
            session = await legacy_session(hc, turn.url)
            headers = {**session, "accept": "text/event-stream", "last-event-id": "0"}
            with anyio.move_on_after(3):
                async with hc.stream("GET", turn.url, headers=headers) as stream:
                    status = stream.status_code
            ok = await hc.post(
                turn.url, json=call(2, "files.read", {"path": "/public/a.txt"}), headers=session
            )
            assert ok.status_code == 200 and "public text" in ok.text
    assert status is not None and status < 500, status
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
