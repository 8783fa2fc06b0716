"""Bearer token, DNS-rebinding protection and the closed door after the turn."""

from __future__ import annotations

import socket

import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.limits import TransportLimits
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, Runtime, http_client
from tests.bridge.rawwire import call, frame
from tests.timing import bound

pytestmark = pytest.mark.anyio

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def _post(url: str, headers: dict[str, str]) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=10) as hc:
        return await hc.post(url, json=INIT, headers={**HEADERS, **headers})


async def test_token_is_required_and_turn_specific(runtime: Runtime, alice: AccessContext) -> None:
    bob = AccessContext(principal="bob")
    async with (
        open_turn(runtime.host, alice, OPEN_POLICY) as a,
        open_turn(runtime.host, bob, OPEN_POLICY) as b,
    ):
        assert a.token != b.token and a.port != b.port
        assert a.url is not None and a.token is not None and b.token is not None
        none = await _post(a.url, {})
        other = await _post(a.url, {"Authorization": f"Bearer {b.token}"})
        basic = await _post(a.url, {"Authorization": f"Basic {a.token}"})
        truncated = await _post(a.url, {"Authorization": f"Bearer {a.token[:-1]}"})
        good = await _post(a.url, {"Authorization": f"Bearer {a.token}"})
    for response in (none, other, basic, truncated):
        assert response.status_code == 401
        assert "invalid_token" in response.headers.get("www-authenticate", "")
    assert good.status_code == 200
    # refused requests never reached the kernel: nothing recorded
    assert runtime.evidence.query() == []


async def test_only_the_mcp_path_exists_and_only_behind_the_token(
    runtime: Runtime, alice: AccessContext
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None and turn.url.endswith("/mcp")
        base = turn.url.removesuffix("/mcp")
        auth = {"Authorization": f"Bearer {turn.token}"}
        elsewhere = await _post(f"{base}/other", auth)
        slash = await _post(f"{base}/mcp/", auth)
        anonymous = await _post(f"{base}/other", {})
        async with httpx2.AsyncClient(timeout=10) as hc:
            head = await hc.get(f"{base}/", headers=auth)
    assert (elsewhere.status_code, slash.status_code, head.status_code) == (404, 404, 404)
    # without the token nothing about the endpoint's layout is revealed
    assert anonymous.status_code == 401
    assert runtime.evidence.query() == []


async def test_sdk_client_with_another_turns_token_cannot_connect(
    runtime: Runtime, alice: AccessContext
) -> None:
    bob = AccessContext(principal="bob")
    async with (
        open_turn(runtime.host, alice, OPEN_POLICY) as a,
        open_turn(runtime.host, bob, OPEN_POLICY) as b,
    ):
        assert a.url is not None
        with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the 401 in an ExceptionGroup
            async with http_client(a.url, b.token, mode="legacy") as client:
                await client.list_tools()


async def test_dns_rebinding_protection_is_on(runtime: Runtime, alice: AccessContext) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        auth = {"Authorization": f"Bearer {turn.token}"}
        evil_host = await _post(turn.url, {**auth, "Host": "evil.example:80"})
        evil_origin = await _post(turn.url, {**auth, "Origin": "http://evil.example"})
        local_origin = await _post(turn.url, {**auth, "Origin": f"http://127.0.0.1:{turn.port}"})
    assert evil_host.status_code in (400, 403, 421)
    assert evil_origin.status_code == 403
    assert local_origin.status_code == 200


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_connection_refused_after_close(
    runtime: Runtime, alice: AccessContext, mode: str
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        url, token, port = turn.url, turn.token, turn.port
        assert url is not None and port is not None
        async with http_client(url, token, mode=mode) as client:
            assert not (await client.call_tool("files.read", {"path": "/public/a.txt"})).is_error
    # the listener is gone: a raw connect is refused, and so is a new client
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock,
        pytest.raises(ConnectionRefusedError),
    ):
        sock.connect(("127.0.0.1", port))
    with pytest.raises(Exception):  # noqa: B017 - ExceptionGroup[ConnectError]
        async with http_client(url, token, mode=mode) as client:
            await client.list_tools()


async def test_close_with_a_client_still_connected_is_fast_and_final(
    runtime: Runtime, alice: AccessContext
) -> None:
    import time

    import anyio

    ready, done = anyio.Event(), anyio.Event()
    errors: list[BaseException] = []

    async def hold(url: str, token: str | None) -> None:
        # the client lives in its own task, so its cancel scopes nest properly
        try:
            async with http_client(url, token, mode="legacy") as client:
                await client.list_tools()  # session open, GET stream possibly held
                ready.set()
                await done.wait()
                await client.call_tool("files.read", {"path": "/public/a.txt"})
        except Exception as exc:
            errors.append(exc)
        ready.set()

    async with anyio.create_task_group() as tg:
        # a long grace: closing must not depend on waiting it out
        async with open_turn(runtime.host, alice, OPEN_POLICY, grace_s=3.0) as turn:
            assert turn.url is not None
            tg.start_soon(hold, turn.url, turn.token)
            await ready.wait()
            closing = time.perf_counter()
        elapsed = time.perf_counter() - closing
        done.set()
    assert elapsed < bound(1.5), (
        f"closing a turn with a connected legacy client took {elapsed:.3f}s"
    )
    # the client's call after the close did not reach the kernel
    assert errors, "a call after the turn closed must fail"
    assert [str(r.outcome) for r in runtime.evidence.query(turn_id=alice.turn_id)] == []


async def test_two_authorization_headers_are_refused_whatever_their_order(
    runtime: Runtime, alice: AccessContext
) -> None:
    """Authorization is no list (RFC 9110 section 5.3): with two, which one counts would
    depend on their order — the first was read, so ``[token, junk]`` was let in and
    ``[junk, token]`` was not."""
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None and turn.token is not None
        good = ("Authorization", f"Bearer {turn.token}")
        statuses = []
        async with httpx2.AsyncClient(timeout=10) as hc:
            for pair in ([good, ("Authorization", "Bearer junk")], [("Authorization", "x"), good]):
                r = await hc.post(turn.url, json=INIT, headers=[*HEADERS.items(), *pair])
                statuses.append(r.status_code)
            twice = await hc.post(turn.url, json=INIT, headers=[*HEADERS.items(), good, good])
            once = await hc.post(turn.url, json=INIT, headers=[*HEADERS.items(), good])
    assert statuses == [401, 401]
    assert twice.status_code == 401 and "invalid_token" in twice.headers["www-authenticate"]
    assert once.status_code == 200
    assert runtime.evidence.query() == []  # refused before anything could be recorded


async def test_frames_the_bridge_answers_itself_get_the_dns_rebinding_refusal_too(
    runtime: Runtime, alice: AccessContext
) -> None:
    """Finding (fixed): only a POST the SDK's transport received was checked for Host and
    Origin. A batch, a damaged or oversized frame, a notification the bridge answers itself got its
    JSON-RPC answers (200/400/202) whatever the ``Origin`` — the specification requires
    403 for an invalid one. Now those get the transport's refusal too (421 for the Host,
    403 for the Origin); the calls they carry are still recorded, never run."""
    write = call(1, "files.write", {"path": "/home/alice/x.txt", "content": "x"}, modern=True)
    bodies = {
        "batch": frame([write]),
        "damaged": frame(write)[:-7],
        "notifications": frame([{"jsonrpc": "2.0", "method": "notifications/initialized"}]),
    }
    bodies["oversized"] = frame([write, {**write, "id": 2, "pad": "x" * 2048}])
    limits = TransportLimits(max_frame_bytes=1024)
    async with open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn:
        assert turn.url is not None
        port = turn.port
        refused = {"Origin": "http://evil.example", "Host": f"evil.example:{port}"}
        statuses: dict[tuple[str, str], int] = {}
        async with httpx2.AsyncClient(headers={**turn.headers(), **HEADERS}, timeout=10) as hc:
            for header, value in refused.items():
                for kind, body in bodies.items():
                    r = await hc.post(turn.url, content=body, headers={header: value})
                    statuses[(header, kind)] = r.status_code
            local = await hc.post(
                turn.url, content=bodies["batch"], headers={"Origin": f"http://127.0.0.1:{port}"}
            )
    assert statuses == {
        ("Origin", "batch"): 403,
        ("Origin", "damaged"): 403,
        ("Origin", "notifications"): 403,
        ("Origin", "oversized"): 403,
        ("Host", "batch"): 421,
        ("Host", "damaged"): 421,
        ("Host", "notifications"): 421,
        ("Host", "oversized"): 421,
    }
    assert local.status_code == 200 and local.json()[0]["result"]["isError"] is True
    writes = [r for r in runtime.evidence.query() if r.tool == "files.write"]
    seen = [(r.diagnostics or {})["rejectedByTransport"]["httpStatus"] for r in writes]
    # the batch's call each time: refused by Origin, by Host, and from a loopback Origin
    assert sorted(map(str, seen)) == ["403", "421", "None"]
    assert not (runtime.sandbox / "home" / "alice" / "x.txt").exists()  # nothing ran
