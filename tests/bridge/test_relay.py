"""The stdio relay's channel: who may use it, what it carries, and what happens when a side goes.

A relayed stdio turn file names a Unix socket and a per-turn secret, and
nothing else that affects authorization: the host keeps the trusted context,
the policy and the evidence store, and runs every call itself. A peer must run
as the host's user and present the secret; whatever it sends, the context of
every record is the host's.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from sharedos.bridge import open_turn
from sharedos.bridge.limits import TransportLimits
from sharedos.bridge.relay import RelayHost, RelayTurn
from sharedos.bridge.relay_client import RelayChannel, RelayError, RelayRuntime
from sharedos.bridge.relay_wire import RelayProtocolError, decode, encode
from sharedos.bridge.results import to_wire_result
from sharedos.bridge.turnfile import StdioLaunch, read_turn_file, write_turn_file
from sharedos.catalog.definition import ToolDefinition, ToolMetadata
from sharedos.context import ToolCall
from sharedos.kernel.context import AccessContext
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.kernel.kernel import Kernel
from sharedos.kernel.runtime import RuntimeHost
from sharedos.outcomes import ReasonCode
from sharedos.policy import compile_paths
from sharedos.toolpolicy import ToolPolicy
from tests.bridge.conftest import DATA, OPEN_POLICY, Runtime
from tests.bridge.rawwire import INITIALIZED, StdioBridge, call, frame, initialize
from tests.timing import bound

pytestmark = pytest.mark.anyio


async def _raw(path: Path, hello: dict[str, Any]) -> tuple[Any, BufferedByteReceiveStream]:
    stream = await anyio.connect_unix(path)
    await stream.send(encode(hello))
    return stream, BufferedByteReceiveStream(stream)


async def test_the_relayed_turn_file_holds_no_authority_and_the_socket_is_private(
    runtime: Runtime, alice: AccessContext
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY, transport="stdio") as turn:
        assert turn.turn_file is not None
        data = json.loads(turn.turn_file.read_text())
        spec = read_turn_file(turn.turn_file)
        assert spec.relay is not None
        sock = spec.relay.socket
        mode = os.stat(sock).st_mode
        assert stat.S_ISSOCK(mode) and mode & 0o077 == 0
        assert os.stat(sock.parent).st_mode & 0o077 == 0
        assert spec.relay.secret not in repr(spec)
    # nothing the harness could read says who asks or where the policy and evidence live
    for key in ("context", "rules", "bundle", "evidence_db", "sandbox_root", "tool_policy"):
        assert data.get(key) in (None, [], ()), key
    assert "alice" not in json.dumps(data)
    assert not sock.exists()  # closing the turn removed the socket


async def test_a_peer_without_the_secret_gets_nothing(
    runtime: Runtime, alice: AccessContext
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY, transport="stdio") as turn:
        assert turn.turn_file is not None
        spec = read_turn_file(turn.turn_file)
        assert spec.relay is not None
        for wrong in ("", spec.relay.secret[:-1], spec.relay.secret + "x", "x" * 43):
            stream, reader = await _raw(spec.relay.socket, {"version": 1, "secret": wrong})
            with anyio.fail_after(10):
                answer = decode(await reader.receive_until(b"\n", 4096))
            assert answer == {"ok": False, "error": "unauthorized"}
            await stream.aclose()
        # a bridge launched on a turn file with a wrong secret exits 2 with one line
        forged = spec.model_copy(
            update={"relay": spec.relay.model_copy(update={"secret": "y" * 43})}
        )
        path = write_turn_file(forged, turn.turn_file.parent / "forged.json")
        proc = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [sys.executable, "-m", "sharedos.bridge", "--stdio", "--turn", str(path)],
                input="",
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        )
        path.unlink()
    assert proc.returncode == 2, proc.stderr
    assert "refused this bridge" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert runtime.evidence.query(turn_id=alice.turn_id) == []


async def test_a_peer_cannot_choose_the_context_or_the_reason(
    runtime: Runtime, alice: AccessContext
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY, transport="stdio") as turn:
        assert turn.turn_file is not None
        spec = read_turn_file(turn.turn_file)
        assert spec.relay is not None
        stream, reader = await _raw(spec.relay.socket, {"version": 1, "secret": spec.relay.secret})
        with anyio.fail_after(10):
            hello = decode(await reader.receive_until(b"\n", 1 << 24))
            assert hello["ok"] is True and hello["turnId"] == alice.turn_id
            assert "principal" not in json.dumps(hello)  # the context never leaves the host
            forged = {"principal": "root", "roles": ["admin"]}
            await stream.send(
                encode(
                    {
                        "id": 1,
                        "op": "invoke",
                        "tool": "files.read",
                        "arguments": {"path": "/private/secret.txt"},
                        "context": forged,
                        "turn_id": "other-turn",
                    }
                )
            )
            await stream.send(
                encode({"id": 2, "op": "refuse", "tool": "files.read", "reason": "allowed"})
            )
            answers = {}
            while len(answers) < 2:
                message = decode(await reader.receive_until(b"\n", 1 << 24))
                answers[message["id"]] = message["result"]
        await stream.aclose()
    assert answers[1]["outcome"] == "denied"  # alice's context, not the forged one
    assert answers[2]["reason"] == "internal_error"  # a peer records only transport refusals
    records = runtime.evidence.query(turn_id=alice.turn_id)
    assert [(r.principal, str(r.reason)) for r in records] == [
        ("alice", "forbidden"),
        ("alice", "internal_error"),
    ]


async def test_a_peer_cannot_write_what_the_host_attests_on_a_record(
    runtime: Runtime, alice: AccessContext
) -> None:
    """``servedBy`` (the credential that served a brokered call) and ``approval`` (the
    approval a call ran on) are the host's word on a record; a bridge process is on the
    harness's side, and its diagnostics must not claim either (before: a peer's
    ``servedBy`` stood on a denied call, and ``sharedos evidence list`` showed it)."""
    forged = {
        "servedBy": {"upstream": "github", "credential": "principal:root", "via": "static"},
        "approval": {"approvalId": "apr-forged", "approver": "root", "via": "elicitation"},
        "jsonrpcId": 7,
    }
    async with open_turn(runtime.host, alice, OPEN_POLICY, transport="stdio") as turn:
        assert turn.turn_file is not None
        spec = read_turn_file(turn.turn_file)
        assert spec.relay is not None
        stream, reader = await _raw(spec.relay.socket, {"version": 1, "secret": spec.relay.secret})
        with anyio.fail_after(10):
            decode(await reader.receive_until(b"\n", 1 << 24))
            calls = [
                ("invoke", "/private/secret.txt"),  # denied
                ("invoke", "/public/a.txt"),  # allowed, a built-in tool: no upstream served it
                ("refuse", "/public/a.txt"),  # a transport refusal the peer asks to record
            ]
            for rid, (op, path) in enumerate(calls, 1):
                await stream.send(
                    encode(
                        {
                            "id": rid,
                            "op": op,
                            "tool": "files.read",
                            "arguments": {"path": path},
                            "diagnostics": forged,
                            "reason": "malformed_request",
                        }
                    )
                )
            answers = {}
            while len(answers) < len(calls):
                message = decode(await reader.receive_until(b"\n", 1 << 24))
                answers[message["id"]] = message["result"]
        await stream.aclose()
    assert [answers[i]["outcome"] for i in (1, 2, 3)] == ["denied", "succeeded", "failed"]
    records = runtime.evidence.query(turn_id=alice.turn_id)
    assert len(records) == 3
    for record in records:
        diag = record.diagnostics or {}
        assert "servedBy" not in diag and "approval" not in diag, diag
        assert record.served_by is None
        assert diag.get("jsonrpcId") == 7  # the rest of what the peer says is kept


async def test_a_long_turn_directory_keeps_the_socket_in_it(
    runtime: Runtime, alice: AccessContext, tmp_path: Path
) -> None:
    """Past the 107 bytes of ``sun_path`` the socket stays in the turn's private directory
    (reached through a descriptor of it): it used to move to a fresh directory in the
    temporary directory, where a sandbox given that directory saw it
    (``test_relay_socket_place.py``)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    launch = StdioLaunch(directory=deep)
    async with open_turn(runtime.host, alice, OPEN_POLICY, transport="stdio", stdio=launch) as t:
        assert t.turn_file is not None and str(t.turn_file).startswith(str(deep))
        spec = read_turn_file(t.turn_file)
        assert spec.relay is not None
        sock = spec.relay.socket
        assert len(os.fsencode(sock)) > 107 and sock.parent == t.turn_file.parent
        assert os.stat(sock.parent).st_mode & 0o077 == 0
        async with RelayChannel.connect(sock, spec.relay.secret) as channel:
            result = await RelayRuntime(channel).invoke_tool(
                ToolCall(tool="files.read", arguments={"path": "/public/a.txt"}),
                channel.context(),
                channel.tool_policy(),
            )
    assert not result.is_error
    assert not sock.exists() and not sock.parent.exists()


async def test_when_the_host_goes_calls_are_refused_unrecorded(
    runtime: Runtime, alice: AccessContext, tmp_path: Path
) -> None:
    catalog = runtime.host.kernel.list_tools(alice, OPEN_POLICY)
    host = RelayHost(
        RelayTurn(runtime.host, alice, OPEN_POLICY, catalog), tmp_path / "r.sock", "s" * 43
    )
    await host.start()
    async with RelayChannel.connect(tmp_path / "r.sock", "s" * 43) as channel:
        relay = RelayRuntime(channel)
        first = await relay.invoke_tool(
            ToolCall(tool="files.read", arguments={"path": "/public/a.txt"}),
            channel.context(),
            channel.tool_policy(),
        )
        await host.close(linger_s=0)  # the host goes away (its process ended)
        with anyio.fail_after(5):
            await channel.lost.wait()
        after = await relay.invoke_tool(
            ToolCall(tool="files.read", arguments={"path": "/public/a.txt"}),
            channel.context(),
            channel.tool_policy(),
        )
    assert not first.is_error and first.evidence_seq >= 0
    assert after.reason is ReasonCode.TURN_CLOSED and after.evidence_seq == -1
    assert "host of this turn is gone" in (after.error or "")
    assert len(runtime.evidence.query(turn_id=alice.turn_id)) == 1
    with pytest.raises(RelayError, match="cannot reach the host"):
        async with RelayChannel.connect(tmp_path / "r.sock", "s" * 43):
            pass


#: a process that connects to a socket ``argv[2]`` times, says so, and holds on until stdin closes
_FLOOD = """
import resource, socket, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = [socket.socket(socket.AF_UNIX) for _ in range(int(sys.argv[2]))]
for s in held:
    s.connect(sys.argv[1])
print("connected", flush=True)
sys.stdin.read()
"""


def _flood(sock: Path, count: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _FLOOD, str(sock), str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "connected"
    return proc


def _open_fds() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None  # out of descriptors this very moment


async def _read_a_file(sock: Path, secret: str) -> Any:
    async with RelayChannel.connect(sock, secret) as channel:
        return await RelayRuntime(channel).invoke_tool(
            ToolCall(tool="files.read", arguments={"path": "/public/a.txt"}),
            channel.context(),
            channel.tool_policy(),
        )


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
async def test_a_host_out_of_descriptors_for_a_moment_still_serves_the_turn_after(
    runtime: Runtime, alice: AccessContext
) -> None:
    """One failed accept (EMFILE) used to end the relay's listener: every bridge the
    harness launched after it got no answer for the rest of the turn."""
    import gc
    import resource

    # far more connections than spare descriptors: descriptors an earlier test in this
    # process leaked and the collector closes meanwhile must not let the relay take them all
    launch = StdioLaunch(limits=TransportLimits(max_connections=1000))
    async with open_turn(runtime.host, alice, OPEN_POLICY, transport="stdio", stdio=launch) as turn:
        assert turn.turn_file is not None
        spec = read_turn_file(turn.turn_file)
        assert spec.relay is not None
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        gc.collect()
        used = _open_fds()
        assert used is not None
        flood: subprocess.Popen[str] | None = None
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (used + 16, hard))
            flood = _flood(spec.relay.socket, 400)
            with anyio.fail_after(bound(30)):
                while _open_fds() is not None:  # until the listener has used every one
                    await anyio.sleep(0.01)
            await anyio.sleep(0.2)  # the listener's next accept fails meanwhile
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            if flood is not None:
                flood.communicate("")
        with anyio.fail_after(bound(30)):
            result = await _read_a_file(spec.relay.socket, spec.relay.secret)
        assert not result.is_error and result.evidence_seq >= 0


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
async def test_connections_to_the_relay_are_capped_and_the_oldest_unauthenticated_goes(
    runtime: Runtime, alice: AccessContext
) -> None:
    """Each connection holds one of the host's descriptors: a harness connecting without
    end must not take them all (the HTTP door caps its connections the same way)."""
    launch = StdioLaunch(limits=TransportLimits(max_connections=16))
    async with open_turn(runtime.host, alice, OPEN_POLICY, transport="stdio", stdio=launch) as turn:
        assert turn.turn_file is not None
        spec = read_turn_file(turn.turn_file)
        assert spec.relay is not None
        before = _open_fds()
        assert before is not None
        flood = _flood(spec.relay.socket, 200)
        try:
            # accepted in order: when this one is answered, every flood connection was seen
            with anyio.fail_after(bound(30)):
                result = await _read_a_file(spec.relay.socket, spec.relay.secret)
            during = _open_fds()
        finally:
            flood.communicate("")
        assert not result.is_error and result.evidence_seq >= 0
        assert during is not None and during - before <= 16 + 4, (before, during)


async def test_a_message_nested_too_deep_drops_the_peer_in_one_line_and_the_relay_serves_on(
    runtime: Runtime, alice: AccessContext, caplog: pytest.LogCaptureFixture
) -> None:
    # json.loads raises RecursionError (not ValueError) past ~1,000 levels: it escaped
    # decode() as an exception group, logged with a whole traceback by the listener
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(RelayProtocolError):
        decode(deep)
    async with open_turn(runtime.host, alice, OPEN_POLICY, transport="stdio") as turn:
        assert turn.turn_file is not None
        spec = read_turn_file(turn.turn_file)
        assert spec.relay is not None
        secret = spec.relay.secret
        stream, reader = await _raw(spec.relay.socket, {"version": 1, "secret": secret})
        with anyio.fail_after(10):
            assert decode(await reader.receive_until(b"\n", 1 << 24))["ok"] is True
            await stream.send(
                b'{"id":1,"op":"invoke","tool":"files.read","arguments":' + deep + b"}\n"
            )
            with pytest.raises((anyio.EndOfStream, anyio.IncompleteRead)):
                await reader.receive_until(b"\n", 1 << 24)  # the peer is dropped
        await stream.aclose()
        with anyio.fail_after(10):
            answer = await _read_a_file(spec.relay.socket, secret)
        assert str(answer.outcome) == "succeeded", answer
    dropped = [r for r in caplog.records if r.name == "sharedos.bridge.relay"]
    assert dropped and all(r.exc_info is None for r in dropped), [r.getMessage() for r in dropped]
    assert all("Traceback" not in r.getMessage() for r in caplog.records)


_SHAPED_RULES = """namespace shaped
requirement shaped.wait { action call; resource "/shaped/wait" }
permit call on "/shaped/**"
"""

_SHAPED_POLICY = ToolPolicy(name="relay-shaped", mode="open", managed=("files.*", "shaped.*"))


async def test_when_the_host_goes_a_tool_with_an_output_schema_still_gets_a_result_shape_clients_accept(
    runtime: Runtime, alice: AccessContext, tmp_path: Path
) -> None:
    """Finding: the answers a relayed bridge makes up itself when the host is gone
    (``evidence_unavailable`` for the call in flight, ``turn_closed`` after it) carried
    the refusal payload as ``structuredContent`` even for a tool that declares an
    ``outputSchema``, which a schema-validating client (TypeScript SDK, Inspector)
    rejects as a protocol error; every other refusal of such a tool folds the payload
    into the text."""
    started = anyio.Event()

    async def wait(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        started.set()
        await anyio.sleep(30)
        return HandlerResult(content=[], structured={"waited": True})

    registry = runtime.host.kernel.registry
    registry.register(
        ToolDefinition(
            name="shaped.wait",
            description="Waits; declares an outputSchema no refusal payload matches.",
            input_schema={"type": "object"},
            output_schema={
                "type": "object",
                "properties": {"waited": {"type": "boolean"}},
                "required": ["waited"],
                "additionalProperties": False,
            },
            metadata=ToolMetadata(namespace="shaped", source="tests"),
            handler=wait,
        )
    )
    rules = tmp_path / "shaped.sos"
    rules.write_text(_SHAPED_RULES)
    host_runtime = RuntimeHost(
        Kernel(compile_paths([DATA / "files.sos", rules]), registry), runtime.evidence
    )
    catalog = host_runtime.kernel.list_tools(alice, _SHAPED_POLICY)
    assert "shaped.wait" in catalog.names
    host = RelayHost(
        RelayTurn(host_runtime, alice, _SHAPED_POLICY, catalog), tmp_path / "r.sock", "s" * 43
    )
    await host.start()
    answers = []
    async with RelayChannel.connect(tmp_path / "r.sock", "s" * 43) as channel:
        relay = RelayRuntime(channel)

        async def in_flight() -> None:
            answers.append(
                await relay.invoke_tool(
                    ToolCall(tool="shaped.wait", arguments={}),
                    channel.context(),
                    channel.tool_policy(),
                )
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(in_flight)
            with anyio.fail_after(10):
                await started.wait()
            await host.close(linger_s=0)  # the host goes away with the call running
        with anyio.fail_after(5):
            await channel.lost.wait()
        answers.append(
            await relay.invoke_tool(
                ToolCall(tool="shaped.wait", arguments={}),
                channel.context(),
                channel.tool_policy(),
            )
        )
    reasons = [a.reason for a in answers]
    assert reasons == [ReasonCode.EVIDENCE_UNAVAILABLE, ReasonCode.TURN_CLOSED]
    for answer in answers:
        wire = to_wire_result(answer)
        dumped = wire if isinstance(wire, dict) else wire.model_dump(by_alias=True)
        assert dumped.get("structuredContent") is None, dumped
        assert dumped["isError"] is True
        payload = json.loads(dumped["content"][-1]["text"])
        assert payload["reason"] == str(answer.reason)


@pytest.mark.parametrize("modern", [False, True], ids=["2025-11-25", "2026-07-28"])
async def test_a_call_cancelled_as_soon_as_it_is_sent_is_still_recorded(
    runtime: Runtime, alice: AccessContext, modern: bool
) -> None:
    """A tools/call and its notifications/cancelled in one write: the bridge process's send
    of the call to the host was cancelled, only the cancel went out, and the attempt left
    no record at all (a bridge without the relay records each one as cancelled)."""
    async with open_turn(runtime.host, alice, OPEN_POLICY, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            if not modern:
                await bridge.send_line(frame(initialize(0)))
                await bridge.wait_reply(0)
                await bridge.send_line(frame(INITIALIZED))
            lines = []
            for n in range(10, 20):
                write = {"path": f"/home/alice/c{n}.txt", "content": "x"}
                lines.append(frame(call(n, "files.write", write, modern=modern)))
                cancel = {"requestId": n}
                lines.append(
                    frame({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
                )
            await bridge.send(b"\n".join(lines) + b"\n")
            read = call("after", "files.read", {"path": "/public/a.txt"}, modern=modern)
            await bridge.send_line(frame(read))
            await bridge.wait_reply("after", timeout=bound(20))
            with anyio.fail_after(bound(10)):  # a cancelled call's record lands after it
                while len(runtime.evidence.query(turn_id=alice.turn_id)) < 11:
                    await anyio.sleep(0.05)
        finally:
            await bridge.kill()
    records = runtime.evidence.query(turn_id=alice.turn_id)
    assert sorted(r.tool for r in records) == ["files.read"] + ["files.write"] * 10


async def test_an_unlisted_tool_called_by_its_portable_name_over_the_relay_is_that_tool(
    runtime: Runtime,
) -> None:
    """A relayed bridge has no registry to map a portable name the turn did not publish:
    the host does, as an in-process bridge does (``files_ddelete`` is files.delete,
    refused ``not_in_turn_catalog`` with its namespace recorded)."""
    bob = AccessContext(principal="bob")
    async with open_turn(
        runtime.host, bob, OPEN_POLICY, transport="stdio", portable_names=True
    ) as turn:
        assert turn.turn_file is not None
        spec = read_turn_file(turn.turn_file)
        assert spec.relay is not None
        stream, reader = await _raw(spec.relay.socket, {"version": 1, "secret": spec.relay.secret})
        with anyio.fail_after(10):
            assert decode(await reader.receive_until(b"\n", 1 << 24))["ok"] is True
            for n, tool in enumerate(["files_ddelete", "no_dsuch"]):
                message = {"id": n, "op": "invoke", "tool": tool, "arguments": {"path": "/x"}}
                await stream.send(encode(message))
                assert decode(await reader.receive_until(b"\n", 1 << 24))["id"] == n
        await stream.aclose()
    deleted, unknown = runtime.evidence.query(turn_id=bob.turn_id)
    assert (deleted.tool, deleted.namespace) == ("files.delete", "files")
    assert str(deleted.reason) == "not_in_turn_catalog"
    assert (deleted.diagnostics or {})["portableName"] == "files_ddelete"
    assert (unknown.tool, unknown.namespace, str(unknown.reason)) == (
        "no_dsuch",
        None,
        "tool_unavailable",
    )
