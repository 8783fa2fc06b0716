"""A POST's ``Content-Type`` is judged the same way in both protocol eras, as HTTP defines it.

A media type is case-insensitive (RFC 9110 section 8.3.1), and only
``application/json`` is one an MCP POST may carry. The SDK checks it twice,
differently: its Host/Origin check took any value starting with
``application/json`` (a 2026-07-28 ``tools/call`` sent as
``application/json-seq`` ran), and its 2025-11-25 transport compared
case-sensitively (``Application/JSON`` was answered 415 on a session and 200
without one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.kernel.context import AccessContext
from sharedos.toolpolicy import ToolPolicy
from tests.bridge.conftest import build_runtime
from tests.bridge.rawwire import call, frame, initialize, legacy_session, modern_headers

pytestmark = pytest.mark.anyio

FILES_POLICY = ToolPolicy(name="bridge-open", mode="open", managed=("files.*",))
ACCEPT = "application/json, text/event-stream"
#: the same media type as application/json
ALLOWED = [
    "Application/JSON",
    "APPLICATION/JSON; charset=UTF-8",
    "application/json ; charset=utf-8",
]
#: other media types (which the SDK took in one era and not the other)
REFUSED = ["application/json-seq", "application/jsonl", "application/jsonx; charset=utf-8"]


async def _post(
    hc: httpx2.AsyncClient, url: str, era: str, session: dict[str, str], rid: str, media: Any
) -> httpx2.Response:
    modern = era == "modern"
    path = f"/home/alice/{rid}.txt"
    body = frame(call(rid, "files.write", {"path": path, "content": "x"}, modern=modern))
    headers = list((modern_headers("files.write") if modern else session).items())
    headers += [("Content-Type", m) for m in (media if isinstance(media, list) else [media])]
    return await hc.post(url, content=body, headers=headers)


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_the_media_type_of_a_call_is_judged_alike_in_both_eras(
    tmp_path: Path, era: str
) -> None:
    rt = build_runtime(tmp_path, with_slow=False)
    alice = AccessContext(principal="alice", roles=("user",))
    async with open_turn(rt.host, alice, FILES_POLICY) as turn:
        assert turn.url is not None and turn.token is not None
        client_headers = {**turn.headers(), "Accept": ACCEPT}
        async with httpx2.AsyncClient(headers=client_headers, timeout=30) as hc:
            session = await legacy_session(hc, turn.url)
            statuses: dict[str, int] = {}
            for i, media in enumerate([*ALLOWED, *REFUSED, ["application/json"] * 2]):
                rid = f"ok{i}" if i < len(ALLOWED) else f"no{i}"
                before = rt.evidence.counts(turn_id=alice.turn_id).total
                r = await _post(hc, turn.url, era, session, rid, media)
                statuses[str(media)] = r.status_code
                assert rt.evidence.counts(turn_id=alice.turn_id).total == before + 1, media
    assert all(statuses[m] == 200 for m in ALLOWED), statuses
    assert all(400 <= statuses[m] < 500 for m in statuses if m not in ALLOWED), statuses
    home = rt.sandbox / "home" / "alice"
    written = sorted(p.stem for p in home.iterdir() if p.name != "notes.txt")
    assert written == [f"ok{i}" for i in range(len(ALLOWED))]  # nothing refused ran
    refused = [r for r in rt.evidence.query(turn_id=alice.turn_id) if str(r.outcome) == "failed"]
    assert len(refused) == len(REFUSED) + 1
    assert all(str(r.reason) == "malformed_request" for r in refused)


async def test_accept_on_several_lines_is_one_list(tmp_path: Path) -> None:
    """``Accept`` is a list: its field lines are one comma-separated value (RFC 9110
    section 5.3), and Go's ``Header.Add`` writes one line per media type. The SDK read only
    the first line: such a client was answered 406 to its ``initialize`` (it could not
    connect) and to its GET stream, and each 2026-07-28 call it sent was refused."""
    rt = build_runtime(tmp_path, with_slow=False)
    alice = AccessContext(principal="alice", roles=("user",))
    accept = [("Accept", "application/json"), ("Accept", "text/event-stream")]
    async with open_turn(rt.host, alice, FILES_POLICY) as turn:
        assert turn.url is not None and turn.token is not None
        base = [*turn.headers().items(), ("Content-Type", "application/json"), *accept]
        async with httpx2.AsyncClient(timeout=30) as hc:
            init = await hc.post(turn.url, content=frame(initialize()), headers=base)
            session = {
                "mcp-session-id": init.headers.get("mcp-session-id", ""),
                "mcp-protocol-version": "2025-11-25",
            }
            stream_headers = [*turn.headers().items(), *session.items(), *accept]
            async with hc.stream("GET", turn.url, headers=stream_headers) as stream:
                streamed = stream.status_code
            body = frame(call(7, "files.read", {"path": "/public/a.txt"}, modern=True))
            modern = await hc.post(
                turn.url, content=body, headers=[*base, *modern_headers("files.read").items()]
            )
    assert init.status_code == 200, init.text
    assert streamed == 200
    assert modern.status_code == 200, modern.text
    assert modern.json()["result"]["isError"] is False
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.outcome)) for r in records] == [("files.read", "succeeded")]
