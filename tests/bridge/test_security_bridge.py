"""Adversarial review of the turn bridge (HTTP and the stdio turn file).

Finding (fixed): a ``tools/call`` the SDK's transport rejects before the
server sees it — inside a JSON-RPC batch, with non-object ``params``, a wrong
``jsonrpc`` version, or sent without an ``id`` (answered 202 as a
"notification") — left no evidence record. The bridge's POST gate now
records each as a refusal (``malformed_request``, never run) and answers it
as a result where its id allows.

Regression guards: 127.0.0.1 only; the bearer token is required on every
method and never appears in logs, evidence, diagnostics or ``repr``; bodies
are bounded (413); sessions are bounded; the stdio turn file refuses links,
foreign owners and wide modes.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.turnfile import (
    StdioLaunch,
    TurnFile,
    TurnFileError,
    read_turn_file,
    write_turn_file,
)
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import DATA, OPEN_POLICY, Runtime, http_client

pytestmark = pytest.mark.anyio

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}


async def _session(hc: httpx2.AsyncClient, url: str) -> dict[str, str]:
    init = await hc.post(url, json=INIT)
    assert init.status_code == 200
    session = {
        "mcp-session-id": init.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    await hc.post(
        url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
    )
    return session


def _write(path: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "files.write", "arguments": {"path": path, "content": "pwned"}},
    }


async def test_tools_calls_the_transport_rejects_are_recorded_and_never_run(
    runtime: Runtime, alice: AccessContext
) -> None:
    # each body carries a call that would be ALLOWED if run (alice writes her home)
    bodies: dict[str, Any] = {
        "batch": [_write("/home/alice/batch.txt"), _write("/home/alice/batch2.txt")],
        "params-list": {**_write("/home/alice/p1.txt"), "params": ["files.write"]},
        "jsonrpc-1.0": {**_write("/home/alice/v1.txt"), "jsonrpc": "1.0"},
        "no-id": {k: v for k, v in _write("/home/alice/noid.txt").items() if k != "id"},
        "object-id": {**_write("/home/alice/oid.txt"), "id": {"x": 1}},
    }
    statuses: dict[str, int] = {}
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=10) as hc:
            session = await _session(hc, turn.url)
            for label, body in bodies.items():
                before = len(runtime.evidence.query())
                r = await hc.post(turn.url, content=json.dumps(body), headers=session)
                statuses[label] = r.status_code
                # recorded before the rejection was answered
                expected = len(body) if isinstance(body, list) else 1
                assert len(runtime.evidence.query()) - before == expected, label
            # the bridge still serves normally afterwards
            ok = await hc.post(turn.url, json=_write("/home/alice/ok.txt"), headers=session)
            assert ok.status_code == 200
    # answered as results where the id allows; a notification is owed nothing; an
    # object id cannot be answered (JSON-RPC error, id null)
    assert statuses == {
        "batch": 200,
        "params-list": 200,
        "jsonrpc-1.0": 200,
        "no-id": 202,
        "object-id": 400,
    }
    home = runtime.sandbox / "home" / "alice"
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt", "ok.txt"]  # nothing else ran
    records = runtime.evidence.query()
    rejected = [r for r in records if (r.diagnostics or {}).get("rejectedByTransport")]
    assert len(rejected) == 6
    assert all((str(r.outcome), str(r.reason)) == ("failed", "malformed_request") for r in rejected)
    assert {r.tool for r in rejected} == {"files.write", "null"}


async def test_unauthenticated_rejected_calls_are_not_recorded(
    runtime: Runtime, alice: AccessContext
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers=ACCEPT, timeout=10) as hc:
            r = await hc.post(turn.url, json=[_write("/home/alice/x.txt")])
    assert r.status_code == 401
    assert runtime.evidence.query() == []


def _other_addresses() -> list[tuple[int, str]]:
    """This machine's non-loopback addresses (IPv4 and IPv6), best effort."""
    found: set[tuple[int, str]] = set()
    for family, target in (
        (socket.AF_INET, ("192.0.2.1", 9)),
        (socket.AF_INET6, ("2001:db8::1", 9)),
    ):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect(target)
                addr = s.getsockname()[0]
                if not addr.startswith("127.") and addr != "::1":
                    found.add((family, addr))
        except OSError:
            pass
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            addr = str(info[4][0])
            if not addr.startswith("127.") and addr != "::1":
                found.add((info[0], addr))
    except OSError:
        pass
    return sorted(found)


async def test_the_listener_is_bound_to_127_0_0_1_only(
    runtime: Runtime, alice: AccessContext
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None and turn.url.startswith("http://127.0.0.1:")
        port = turn.port
        assert port is not None
        # the listening socket itself
        assert f"{port:04X}" in Path("/proc/net/tcp").read_text().upper()
        listening = [
            line.split()[1]
            for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
            if line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "0A"
        ]
        assert listening == [f"0100007F:{port:04X}"]  # 127.0.0.1, not 0.0.0.0
        tcp6 = Path("/proc/net/tcp6")
        if tcp6.exists():
            assert not any(
                line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "0A"
                for line in tcp6.read_text().splitlines()[1:]
            )
        for family, addr in [*_other_addresses(), (socket.AF_INET6, "::1")]:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.settimeout(2)
                with pytest.raises(OSError):
                    s.connect((addr, port))


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE", "OPTIONS", "PUT"])
async def test_every_method_needs_the_exact_token(
    runtime: Runtime, alice: AccessContext, method: str
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None and turn.token is not None
        bad = [
            {},
            {"Authorization": f"Bearer  {turn.token}"},
            {"Authorization": f"Bearer {turn.token}x"},
            {"Authorization": f"Bearer {turn.token.upper()}"},
            {"Authorization": f"Token {turn.token}"},
            {"Authorization": turn.token},
            {"X-Authorization": f"Bearer {turn.token}"},
        ]
        async with httpx2.AsyncClient(timeout=10) as hc:
            for headers in bad:
                r = await hc.request(method, turn.url, headers={**ACCEPT, **headers})
                assert r.status_code == 401, (method, headers)
            lower = await hc.request(
                "POST",
                turn.url,
                json=INIT,
                headers={**ACCEPT, "Authorization": f"bearer {turn.token}"},
            )
            assert lower.status_code == 200  # the scheme is case-insensitive (RFC 7235)


async def test_the_token_never_reaches_logs_evidence_or_diagnostics(
    runtime: Runtime, alice: AccessContext, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        token = turn.token
        assert turn.url is not None and token is not None
        assert token not in repr(turn) and token not in json.dumps(turn.diagnostics)
        async with http_client(turn.url, token, mode="legacy") as client:
            await client.call_tool("files.read", {"path": "/public/a.txt"})
            await client.call_tool("files.read", {"path": "/private/secret.txt"})
            await client.call_tool("no.such.tool", {})
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=10) as hc:
            session = await _session(hc, turn.url)
            await hc.post(turn.url, json=[_write("/x")], headers=session)
    runtime.evidence.close()
    assert len(token) >= 40
    raw = b"".join(p.read_bytes() for p in runtime.evidence_path.parent.glob("evidence.db*"))
    assert token.encode() not in raw
    assert token not in caplog.text
    records_text = caplog.text + raw.decode("latin-1")
    assert token[:16] not in records_text


async def test_huge_bodies_are_refused_and_the_bridge_keeps_serving(
    runtime: Runtime, alice: AccessContext
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        big = (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"files.read","arguments":{"path":"/public/a.txt","pad":"'
            + b"x" * (64 * 1024 * 1024)
            + b'"}}}'
        )
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=60) as hc:
            r = await hc.post(turn.url, content=big)
            assert r.status_code == 413
            assert (await hc.post(turn.url, json=INIT)).status_code == 200


async def test_sessions_per_turn_are_bounded(runtime: Runtime, alice: AccessContext) -> None:
    """At the session cap the longest-idle session makes room: never more than 256 open,
    and abandoned sessions cannot lock the turn out (each 'initialize' still gets 200)."""
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=10) as hc:
            replies = [await hc.post(turn.url, json=INIT) for _ in range(260)]
            first = replies[0].headers["mcp-session-id"]
            gone = await hc.post(
                turn.url,
                json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"},
                headers={"mcp-session-id": first, "mcp-protocol-version": "2025-11-25"},
            )
    assert [r.status_code for r in replies] == [200] * 260
    assert turn.transport_stats.sessions_evicted == 4
    assert gone.status_code == 404  # the oldest session was the one evicted


# ------------------------------------------------------------------ stdio turn file


def _turn_file(runtime: Runtime, tmp: Path) -> TurnFile:
    marker = tmp / "open"
    marker.touch()
    return TurnFile.model_validate(
        {
            "context": AccessContext(principal="alice"),
            "run_policy": "bridge-open",
            "rules": (DATA / "files.sos",),
            "evidence_db": runtime.evidence_path,
            "sandbox_root": runtime.sandbox,
            "open_marker": marker,
        }
    )


def test_a_symlink_at_the_turn_file_path_is_refused(runtime: Runtime, tmp_path: Path) -> None:
    real = write_turn_file(_turn_file(runtime, tmp_path), tmp_path / "real.json")
    link = tmp_path / "turn.json"
    link.symlink_to(real)
    with pytest.raises(TurnFileError, match="cannot open"):
        read_turn_file(link)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_turn_file_owned_by_someone_else_is_refused(runtime: Runtime, tmp_path: Path) -> None:
    path = write_turn_file(_turn_file(runtime, tmp_path), tmp_path / "turn.json")
    os.chown(path, 65534, 65534)
    with pytest.raises(TurnFileError, match="not owned"):
        read_turn_file(path)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o611])
def test_any_group_or_other_bit_on_the_turn_file_is_refused(
    runtime: Runtime, tmp_path: Path, mode: int
) -> None:
    path = write_turn_file(_turn_file(runtime, tmp_path), tmp_path / "turn.json")
    os.chmod(path, mode)
    with pytest.raises(TurnFileError, match="0600"):
        read_turn_file(path)


async def test_the_stdio_turn_is_written_private_and_carries_no_secret(
    runtime: Runtime, alice: AccessContext, tmp_path: Path
) -> None:
    launch = StdioLaunch(
        rules=(DATA / "files.sos",),
        evidence_db=runtime.evidence_path,
        tool_sets=("files",),
        sandbox_root=runtime.sandbox,
        run_policy="bridge-open",
        directory=tmp_path,
    )
    policy = OPEN_POLICY.model_copy(update={"name": "bridge-open"})
    async with open_turn(runtime.host, alice, policy, transport="stdio", stdio=launch) as turn:
        assert turn.turn_file is not None and turn.command is not None and turn.token is None
        workdir = turn.turn_file.parent
        assert workdir.stat().st_mode & 0o777 == 0o700
        for entry in workdir.iterdir():
            assert entry.stat().st_mode & 0o077 == 0, entry
        text = turn.turn_file.read_text()
        assert "token" not in text.lower() and "bearer" not in text.lower()
        # the command line names only the turn file
        assert turn.command[-2:] == ["--turn", str(turn.turn_file)]
    assert not workdir.exists()


async def test_a_result_json_cannot_carry_is_an_answered_failure_not_a_hang(
    tmp_path: Path, alice: AccessContext
) -> None:
    import anyio

    from sharedos.catalog.definition import ToolDefinition
    from sharedos.catalog.registry import ToolRegistry
    from sharedos.evidence.sqlite import SqliteEvidenceStore
    from sharedos.kernel.handlers import HandlerContext, HandlerResult
    from sharedos.kernel.kernel import Kernel
    from sharedos.kernel.runtime import RuntimeHost
    from sharedos.policy import compile_source
    from sharedos.toolpolicy import ToolPolicy

    async def odd(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        where = args.get("where", "text")
        if where == "text":
            return HandlerResult.text("name: bad\udcff.txt")
        if where == "none":
            return HandlerResult.text("caf\u00e9", structured={"name": "caf\u00e9"})
        return HandlerResult.text("fine", structured={"names": ["bad\udcff.txt"]})

    tool = ToolDefinition(
        name="odd.get",
        description="Returns text with a lone surrogate.",
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}, "where": {"type": "string"}},
        },
        handler=odd,
    )
    policy = compile_source(
        'namespace odd\nrequirement odd.get { action get; resource path(args.path) }\npermit get on "/**"\n'
    )
    store = SqliteEvidenceStore(tmp_path / "odd.db")
    host = RuntimeHost(Kernel(policy, ToolRegistry([tool])), store)
    run = ToolPolicy(name="odd", mode="open", managed=("odd.*",))
    async with open_turn(host, alice, run) as turn:
        assert turn.url is not None
        async with http_client(turn.url, turn.token, mode="legacy") as client:
            with anyio.fail_after(15):
                for where in ("text", "structured"):
                    result = await client.call_tool("odd.get", {"path": "/a", "where": where})
                    assert result.is_error
                    assert (result.structured_content or {})["reason"] == "internal_error"
                ok = await client.call_tool("odd.get", {"path": "/a\u00e9", "where": "none"})
                assert not ok.is_error  # non-ASCII but valid text is untouched
    reasons = [str(r.reason) for r in store.query()]
    assert reasons.count("internal_error") == 2


def test_stdio_tools_calls_the_transport_cannot_deliver_are_recorded_and_never_run(
    runtime: Runtime, tmp_path: Path
) -> None:
    import subprocess
    import sys

    path = write_turn_file(_turn_file(runtime, tmp_path), tmp_path / "turn.json")
    lines = [
        INIT,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        [_write("/home/alice/batch1.txt"), _write("/home/alice/batch2.txt")],
        {**_write("/home/alice/p.txt"), "params": "files.write"},
        {**_write("/home/alice/v.txt"), "jsonrpc": "1.0"},
        {k: v for k, v in _write("/home/alice/noid.txt").items() if k != "id"},
        {"jsonrpc": "2.0", "id": 9, "method": "tools/list"},  # still served afterwards
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "sharedos.bridge", "--stdio", "--turn", str(path)],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    replies = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert any(r.get("id") == 9 and "tools" in r.get("result", {}) for r in replies), proc.stderr
    records = runtime.evidence.query()
    assert len(records) == 5, [(r.tool, r.reason) for r in records]  # the batch held two
    assert all((str(r.outcome), str(r.reason)) == ("failed", "malformed_request") for r in records)
    # every one with an id was answered, as a result (the notification is owed nothing)
    answered = [r for r in replies if r.get("id") == 7]
    assert len(answered) == 4 and all(r["result"]["isError"] for r in answered)
    assert all((r.diagnostics or {}).get("rejectedByTransport") for r in records)
    home = runtime.sandbox / "home" / "alice"
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"]  # nothing ran


async def test_lookalike_hosts_and_origins_are_refused(
    runtime: Runtime, alice: AccessContext
) -> None:
    # (another loopback port as Origin is accepted by the SDK; the bearer token, which a
    # browser page does not have and cannot get past a CORS preflight, is the guard there)
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        port = turn.port
        refused = [
            {"Host": f"127.0.0.1.evil.example:{port}"},
            {"Host": f"localhost.evil.example:{port}"},
            {"Host": f"evil.example:{port}"},
            {"Origin": "null"},
            {"Origin": f"http://127.0.0.1.evil.example:{port}"},
            {"Origin": f"http://evil.example:{port}"},
        ]
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=10) as hc:
            for headers in refused:
                r = await hc.post(turn.url, json=INIT, headers=headers)
                assert r.status_code in (403, 421), (headers, r.status_code)
            ok = await hc.post(turn.url, json=INIT, headers={"Origin": f"http://localhost:{port}"})
            assert ok.status_code == 200
    assert runtime.evidence.query() == []


async def test_a_batch_of_thousands_of_calls_is_refused_in_bounded_records(
    runtime: Runtime, alice: AccessContext
) -> None:
    # one body of ~1 MiB: 10,000 calls that would be allowed if run
    calls = [{**_write(f"/home/alice/b{i}.txt"), "id": i + 100} for i in range(10_000)] + [
        {k: v for k, v in _write("/home/alice/n.txt").items() if k != "id"}
    ]
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=60) as hc:
            session = await _session(hc, turn.url)
            before = len(runtime.evidence.query())
            r = await hc.post(turn.url, content=json.dumps(calls), headers=session)
            assert r.status_code == 200
            answers = r.json()
            records = runtime.evidence.query()[before:]
            ok = await hc.post(turn.url, json=_write("/home/alice/ok.txt"), headers=session)
            assert ok.status_code == 200
    # every call with an id is answered: the first 100 as results, the rest as errors
    assert len(answers) == 10_000
    assert [a["id"] for a in answers] == [i + 100 for i in range(10_000)]
    assert all(a["result"]["isError"] for a in answers[:100])
    assert all(a["error"]["code"] == -32600 for a in answers[100:])
    # 100 records one by one, and one for the other 9,901 (the notification among them)
    assert len(records) == 101, len(records)
    aggregate = (records[-1].diagnostics or {})["rejectedByTransport"]
    assert aggregate["aggregated"] == 9_901
    assert aggregate["tools"] == {"files.write": 9_901}
    assert all(str(r.reason) == "malformed_request" for r in records)
    home = runtime.sandbox / "home" / "alice"
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt", "ok.txt"]  # nothing else ran
