"""``sharedos bridge --stdio --turn FILE`` launched as a real subprocess by the SDK client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import PARSE_ERROR

from sharedos.bridge import open_turn
from sharedos.bridge.turnfile import StdioLaunch, TurnFile, read_turn_file, write_turn_file
from sharedos.kernel.context import AccessContext
from sharedos.toolpolicy import ToolPolicy
from tests.bridge.conftest import DATA, Runtime, build_runtime, make_sandbox
from tests.bridge.rawwire import INITIALIZED, StdioBridge, frame, initialize
from tests.bridge.rawwire import call as call_request
from tests.timing import bound

pytestmark = pytest.mark.anyio

FILES_POLICY = ToolPolicy(name="bridge-open", mode="open", managed=("files.*",))


@pytest.fixture
def files_runtime(tmp_path: Path) -> Runtime:
    return build_runtime(tmp_path, with_slow=False)


def _launch(rt: Runtime, **kw: object) -> StdioLaunch:
    return StdioLaunch(
        rules=(DATA / "files.sos",),
        evidence_db=rt.evidence_path,
        tool_sets=("files",),
        sandbox_root=rt.sandbox,
        run_policy="bridge-open",
        **kw,  # type: ignore[arg-type]
    )


def _params(command: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=command[0], args=command[1:])


@pytest.mark.parametrize(("mode", "version"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
async def test_stdio_turn_lists_calls_and_records(
    files_runtime: Runtime, mode: str, version: str
) -> None:
    rt = files_runtime
    alice = AccessContext(principal="alice")
    identity = {"harness": "sdk-client", "column": "mcp", "catalogHash": "from-the-host"}
    async with open_turn(
        rt.host, alice, FILES_POLICY, transport="stdio", stdio=_launch(rt), identity=identity
    ) as turn:
        assert turn.command is not None and turn.turn_file is not None
        assert turn.turn_file.stat().st_mode & 0o777 == 0o600
        async with Client(_params(turn.command), mode=mode) as client:
            assert client.protocol_version == version
            names = sorted(t.name for t in (await client.list_tools()).tools)
            ok = await client.call_tool("files.read", {"path": "/home/alice/notes.txt"})
            denied = await client.call_tool("files.read", {"path": "/home/bob/notes.txt"})
    assert names == sorted(turn.catalog.names)
    assert not ok.is_error and "notes of alice" in str(ok.content)
    assert denied.is_error and (denied.structured_content or {})["outcome"] == "denied"
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert [str(r.outcome) for r in records] == ["succeeded", "denied"]
    assert all(r.catalog_hash == turn.catalog_hash for r in records)
    diag = dict(records[0].diagnostics or {})
    assert diag["bridge"]["transport"] == "stdio" and diag["protocolVersion"] == version
    assert all(dict(r.identity or {}) == identity for r in records)
    # the turn file and its marker are gone once the turn closed
    assert not turn.turn_file.exists()


async def test_closed_turn_refuses_recorded_then_exits(files_runtime: Runtime) -> None:
    rt = files_runtime
    alice = AccessContext(principal="alice")
    launch = _launch(rt, close_linger_s=1.5)
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio", stdio=launch) as turn:
        assert turn.command is not None
        marker = read_turn_file(turn.turn_file).open_marker  # type: ignore[arg-type]
        async with Client(_params(turn.command), mode="legacy") as client:
            assert not (await client.call_tool("files.read", {"path": "/public/a.txt"})).is_error
            marker.unlink()  # the host closes the turn
            refused = await client.call_tool("files.read", {"path": "/public/a.txt"})
            assert refused.is_error
            assert (refused.structured_content or {})["reason"] == "turn_closed"
            # ... and then the process goes away: further calls fail at the transport
            with anyio.fail_after(10):
                while True:
                    try:
                        await client.call_tool(
                            "files.read", {"path": "/public/a.txt"}, read_timeout_seconds=2
                        )
                    except Exception:
                        break
                    await anyio.sleep(0.1)
    outcomes = [(str(r.outcome), str(r.reason)) for r in rt.evidence.query(turn_id=alice.turn_id)]
    assert outcomes[0] == ("succeeded", "None")
    assert outcomes[1] == ("denied", "turn_closed")
    assert all(o == ("denied", "turn_closed") for o in outcomes[1:])


def _run_cli(turn_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sharedos.bridge", "--stdio", "--turn", str(turn_file)],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _turn(rt: Runtime, tmp: Path, **kw: object) -> TurnFile:
    marker = tmp / "open"
    marker.touch()
    values: dict[str, object] = {
        "context": AccessContext(principal="alice"),
        "run_policy": "bridge-open",
        "rules": (DATA / "files.sos",),
        "evidence_db": rt.evidence_path,
        "sandbox_root": rt.sandbox,
        "open_marker": marker,
    }
    values.update(kw)
    return TurnFile.model_validate(values)


def test_refuses_a_turn_file_others_can_read(files_runtime: Runtime, tmp_path: Path) -> None:
    path = write_turn_file(_turn(files_runtime, tmp_path), tmp_path / "turn.json")
    os.chmod(path, 0o644)
    proc = _run_cli(path)
    assert proc.returncode == 2
    assert "must be 0600" in proc.stderr and "Traceback" not in proc.stderr


def test_refuses_a_closed_turn_and_catalogue_drift(files_runtime: Runtime, tmp_path: Path) -> None:
    turn = _turn(files_runtime, tmp_path)
    turn.open_marker.unlink()
    closed = _run_cli(write_turn_file(turn, tmp_path / "closed.json"))
    assert closed.returncode == 3 and "closed" in closed.stderr

    drift = _turn(files_runtime, tmp_path, catalog_hash="0" * 64)
    proc = _run_cli(write_turn_file(drift, tmp_path / "drift.json"))
    assert (
        proc.returncode == 2 and "catalogue drift" in proc.stderr and "Traceback" not in proc.stderr
    )


def test_garbage_turn_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, json.dumps({"version": 1, "context": {"principal": "x"}}).encode())
    os.close(fd)
    proc = _run_cli(path)
    assert proc.returncode == 2
    assert "not a valid SharedOS turn file" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_stdio_bundle_progress_logs_and_back_channel(tmp_path: Path, mode: str) -> None:
    """A compiled bundle, the conformance tool set, and the transport hooks over stdio."""
    from mcp_types import ElicitResult

    from sharedos.catalog.registry import ToolRegistry
    from sharedos.evidence.sqlite import SqliteEvidenceStore
    from sharedos.kernel.kernel import Kernel
    from sharedos.kernel.runtime import RuntimeHost
    from sharedos.testing.conformance_tools import conformance_tools
    from tests.bridge.conftest import compile_rules

    policy = compile_rules("conformance.sos")
    bundle = tmp_path / "conformance.bundle.json"
    policy.save_bundle(bundle)
    evidence = SqliteEvidenceStore(tmp_path / "evidence.db")
    host = RuntimeHost(Kernel(policy, ToolRegistry(conformance_tools())), evidence)
    ctx = AccessContext(principal="suite", roles=("conformance",))
    launch = StdioLaunch(
        bundle=bundle,
        evidence_db=tmp_path / "evidence.db",
        tool_sets=("conformance",),
        run_policy="conformance",
    )
    progress: list[float] = []
    logs: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async def on_log(params: object) -> None:
        logs.append(str(getattr(params, "data", params)))

    async def on_elicit(context: object, params: object) -> ElicitResult:
        return ElicitResult(action="accept", content={"username": "u", "email": "e@x"})

    tool_policy = policy.tool_policies["conformance"]
    async with open_turn(host, ctx, tool_policy, transport="stdio", stdio=launch) as turn:
        assert turn.command is not None
        async with Client(
            _params(turn.command),
            mode=mode,
            logging_callback=on_log,
            elicitation_callback=on_elicit,
        ) as client:
            prog = await client.call_tool(
                "test_tool_with_progress", {}, progress_callback=on_progress
            )
            elicit = await client.call_tool("test_elicitation", {"message": "who are you?"})
            logged = await client.call_tool("test_tool_with_logging", {})
    assert not prog.is_error and progress == [0.0, 50.0, 100.0]
    assert not logged.is_error
    if mode == "legacy":
        assert logs == [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed",
        ]
    else:
        assert logs == []  # 2026-07-28: logs only when the request opts in through _meta
    if mode == "legacy":
        # stdio has a back channel on the handshake era: the elicitation reached our callback
        assert not elicit.is_error and "accept" in str(elicit.content)
    else:
        # 2026-07-28 has no server->client requests: the tool fails, as a result, recorded
        assert elicit.is_error and (elicit.structured_content or {})["outcome"] == "failed"
    outcomes = [(r.tool, str(r.outcome)) for r in evidence.query(turn_id=ctx.turn_id)]
    assert outcomes[0] == ("test_tool_with_progress", "succeeded")
    assert outcomes[1][0] == "test_elicitation"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_stdio_cancellation_is_recorded(tmp_path: Path, mode: str) -> None:
    """Cancelling a call over stdio cancels the handler; the kernel records ``cancelled``."""
    from sharedos.catalog.registry import ToolRegistry
    from sharedos.evidence.sqlite import SqliteEvidenceStore
    from sharedos.kernel.kernel import Kernel
    from sharedos.kernel.runtime import RuntimeHost
    from sharedos.testing.conformance_tools import conformance_tools
    from tests.bridge.conftest import compile_rules

    policy = compile_rules("conformance.sos")
    evidence = SqliteEvidenceStore(tmp_path / "evidence.db")
    host = RuntimeHost(Kernel(policy, ToolRegistry(conformance_tools())), evidence)
    ctx = AccessContext(principal="suite", roles=("conformance",))
    launch = StdioLaunch(
        rules=(DATA / "conformance.sos",),
        evidence_db=tmp_path / "evidence.db",
        tool_sets=("conformance",),
        run_policy="conformance",
    )
    async with open_turn(
        host, ctx, policy.tool_policies["conformance"], transport="stdio", stdio=launch
    ) as turn:
        assert turn.command is not None
        async with Client(_params(turn.command), mode=mode) as client:
            await client.list_tools()
            started = anyio.Event()

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                started.set()

            async def call() -> None:
                await client.call_tool("test_wait", {"seconds": 30}, progress_callback=on_progress)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                with anyio.fail_after(10):
                    await started.wait()  # the handler is running
                tg.cancel_scope.cancel()
            with anyio.fail_after(10):
                while not evidence.query(turn_id=ctx.turn_id):
                    await anyio.sleep(0.02)
            after = await client.call_tool("test_simple_text", {})
    assert not after.is_error
    outcomes = [(r.tool, str(r.outcome)) for r in evidence.query(turn_id=ctx.turn_id)]
    assert outcomes == [("test_wait", "cancelled"), ("test_simple_text", "succeeded")]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_oversized_call_is_answered_for_its_id_not_left_waiting(
    files_runtime: Runtime, mode: str
) -> None:
    """A line over the frame limit is never held whole, but its request is answered.

    On stdio the id is the only way a client matches an answer to its request:
    the refusal went out with ``id: null`` and the SDK client waited until its
    own timeout (it has none by default) for a call the bridge had refused.
    """
    rt = files_runtime
    alice = AccessContext(principal="alice")
    big = {"path": "/home/alice/big.txt", "content": "x" * (5 * 1024 * 1024)}
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio") as turn:
        assert turn.command is not None
        async with Client(_params(turn.command), mode=mode) as client:
            await client.list_tools()
            with pytest.raises(MCPError) as raised:
                await client.call_tool("files.write", big, read_timeout_seconds=bound(60))
            after = await client.call_tool("files.read", {"path": "/home/alice/notes.txt"})
    assert raised.value.error.code == PARSE_ERROR, raised.value.error  # not -32001, a timeout
    assert "larger than the transport accepts" in raised.value.error.message
    assert not after.is_error
    assert not (rt.sandbox / "home" / "alice" / "big.txt").exists()
    (refused, read) = rt.evidence.query(turn_id=alice.turn_id)
    assert str(refused.reason) == "malformed_request" and str(read.outcome) == "succeeded"
    assert dict(refused.diagnostics or {})["malformed"]["problem"] == "oversized"


async def test_lines_that_cannot_be_parsed_are_answered_for_a_legible_id(
    files_runtime: Runtime,
) -> None:
    """The TypeScript SDK writes ``id`` last; a line of another request, a line cut short
    and one with trailing bytes are answered for their ids too."""
    rt = files_runtime
    alice = AccessContext(principal="alice")
    filler = "x" * (5 * 1024 * 1024)
    ts_order = {
        "method": "tools/call",
        "params": {
            "name": "files.write",
            "arguments": {"path": "/home/alice/b", "content": filler},
        },
        "jsonrpc": "2.0",
        "id": "ts-7",
    }
    other = {"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {"cursor": filler}}
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.send_line(frame(initialize(1)))
            await bridge.wait_reply(1)
            await bridge.send_line(frame(INITIALIZED))
            call = frame(call_request(9, "files.write", {"path": "/home/alice/b", "content": "x"}))
            for line in (json.dumps(ts_order).encode(), json.dumps(other).encode()):
                await bridge.send_line(line)
            await bridge.send_line(call[:-2])  # cut short
            await bridge.send_line(call.replace(b'"id":9', b'"id":10') + b" trailing")
            answers = [
                await bridge.wait_reply(request_id, timeout=bound(60))
                for request_id in ("ts-7", 8, 9, 10)
            ]
        finally:
            await bridge.process.aclose()
    for answer in answers:
        assert answer["error"]["code"] == PARSE_ERROR, answer
    assert not (rt.sandbox / "home" / "alice" / "b").exists()
    assert len(rt.evidence.query(turn_id=alice.turn_id)) == 4  # each recorded, nothing run


async def test_a_standalone_bridge_records_at_exit_the_calls_a_lock_refused(
    files_runtime: Runtime,
) -> None:
    """A standalone stdio bridge is a host of its own: a call it refused because another
    writer held the store's lock is owed its record (docs/kernel.md), written once a later
    write lands or, at the latest, when the bridge exits. The bridge exited without trying:
    the lock gone, the client gone, the call it answered ``evidence_unavailable`` had no
    record at all (``sharedos run`` writes them at exit, or says how many it could not)."""
    import sqlite3

    rt = files_runtime
    alice = AccessContext(principal="alice")
    async with open_turn(
        rt.host, alice, FILES_POLICY, transport="stdio", stdio=_launch(rt, relay=False)
    ) as turn:
        assert turn.command is not None
        async with Client(_params(turn.command), mode="legacy") as client:
            ok = await client.call_tool("files.read", {"path": "/public/a.txt"})
            assert not ok.is_error
            blocker = sqlite3.connect(rt.evidence_path, isolation_level=None)
            blocker.execute("BEGIN IMMEDIATE")  # another writer holds the store
            try:
                refused = await client.call_tool("files.read", {"path": "/public/a.txt"})
            finally:
                blocker.execute("COMMIT")
                blocker.close()
            assert refused.is_error
            assert (refused.structured_content or {})["reason"] == "evidence_unavailable"
        # the client is gone: the bridge has exited
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert [(str(r.outcome), str(r.reason)) for r in records] == [
        ("succeeded", "None"),
        ("failed", "evidence_unavailable"),
    ]
    assert "nothing ran" in str(records[1].error)


def test_a_standalone_turn_file_whose_sandbox_holds_the_evidence_is_refused(
    tmp_path: Path,
) -> None:
    """A standalone stdio bridge serves the files tools over ``sandbox_root``: a turn file
    that puts the evidence store under it is refused (a permitted files.delete would take
    the record of its own calls)."""
    from sharedos.bridge.stdio import build_runtime as build_stdio_runtime
    from sharedos.bridge.turnfile import TurnFileError

    sandbox = make_sandbox(tmp_path / "sandbox")
    turn = TurnFile(
        context=AccessContext(principal="alice"),
        rules=(DATA / "files.sos",),
        evidence_db=sandbox / "public" / "evidence.sqlite",
        sandbox_root=sandbox,
        run_policy="bridge-open",
        open_marker=tmp_path / "open",
    )
    with pytest.raises(TurnFileError, match="holds SharedOS's own state"):
        build_stdio_runtime(turn)
    assert not (sandbox / "public" / "evidence.sqlite").exists()


def test_a_standalone_turn_file_whose_sandbox_holds_sharedos_itself_is_refused(
    tmp_path: Path,
) -> None:
    """A ``sandbox_root`` over SharedOS's own installation (a project holding its
    virtualenv) let a permitted ``files.write`` rewrite the kernel the next run decides
    with: refused, as ``sharedos run --sandbox`` refuses it."""
    from sharedos.bridge.stdio import build_runtime as build_stdio_runtime
    from sharedos.bridge.turnfile import TurnFileError

    turn = TurnFile(
        context=AccessContext(principal="alice"),
        rules=(DATA / "files.sos",),
        evidence_db=tmp_path / "evidence.sqlite",
        sandbox_root=Path(sys.prefix),  # the Python environment SharedOS runs in
        run_policy="bridge-open",
        open_marker=tmp_path / "open",
    )
    with pytest.raises(TurnFileError, match="holds code SharedOS runs outside any sandbox"):
        build_stdio_runtime(turn)
    assert not (tmp_path / "evidence.sqlite").exists()


def test_a_standalone_turn_file_whose_sandbox_holds_an_import_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``sandbox_root`` holding a directory on the bridge's ``sys.path`` (``PYTHONPATH``)
    let a permitted ``files.write`` of ``/sitecustomize.py`` run as the host at the next
    start of any SharedOS process: refused, as ``sharedos run --sandbox`` refuses it."""
    from sharedos.bridge.stdio import build_runtime as build_stdio_runtime
    from sharedos.bridge.turnfile import TurnFileError

    sandbox = tmp_path / "sandbox"
    (sandbox / "lib").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(sandbox / "lib"))  # as PYTHONPATH puts it there
    turn = TurnFile(
        context=AccessContext(principal="alice"),
        rules=(DATA / "files.sos",),
        evidence_db=tmp_path / "evidence.sqlite",
        sandbox_root=sandbox,
        run_policy="bridge-open",
        open_marker=tmp_path / "open",
    )
    with pytest.raises(TurnFileError, match=r"holds code SharedOS runs .*/sandbox/lib"):
        build_stdio_runtime(turn)
    assert not (tmp_path / "evidence.sqlite").exists()


async def test_a_client_whose_stream_opens_with_a_byte_order_mark_is_served(
    files_runtime: Runtime,
) -> None:
    """A harness that writes a UTF-8 BOM before its first frame and ends lines with CRLF
    (PowerShell, .NET writers) gets its session: before, its ``initialize`` was answered
    -32700 "not JSON" and the client could not connect at all."""
    rt = files_runtime
    alice = AccessContext(principal="alice")
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.send(b"\xef\xbb\xbf" + frame(initialize(0)) + b"\r\n")
            opened = await bridge.wait_reply(0)
            await bridge.send(frame(INITIALIZED) + b"\r\n")
            await bridge.send(frame(call_request(1, "files.read", {"path": "/public/a.txt"})))
            await bridge.send(b"\r\n")
            answered = await bridge.wait_reply(1)
        finally:
            await bridge.kill()
    assert opened["result"]["protocolVersion"] == "2025-11-25", opened
    assert answered["result"]["isError"] is False and "public text" in json.dumps(answered)
    assert [str(r.outcome) for r in rt.evidence.query(turn_id=alice.turn_id)] == ["succeeded"]


async def test_a_standalone_bridge_serves_only_the_policy_the_host_opened_the_turn_under(
    tmp_path: Path,
) -> None:
    """The rules (or bundle) a standalone turn file names are read again when the harness
    launches the bridge, maybe long after the host opened the turn (a relaunch mid-turn, a
    rollout into the same file meanwhile). A new policy that publishes the same catalogue
    passed the catalogue check, and its decisions were recorded under the identity and the
    revision of the policy the host opened the turn with: one turn, two policies, and the
    evidence naming one of them. The bridge refuses to serve another policy than the host's."""
    from sharedos.bridge.stdio import build_runtime as bridge_runtime
    from sharedos.bridge.turnfile import TurnFileError

    rt = build_runtime(tmp_path, with_slow=False)
    rules = tmp_path / "files.sos"
    rules.write_text((DATA / "files.sos").read_text())
    launch = StdioLaunch(
        rules=(rules,),
        evidence_db=rt.evidence_path,
        tool_sets=("files",),
        sandbox_root=rt.sandbox,
        run_policy="bridge-open",
        relay=False,
    )
    alice = AccessContext(principal="alice")
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio", stdio=launch) as turn:
        assert turn.turn_file is not None
        recorded = read_turn_file(turn.turn_file)
        host, _ = bridge_runtime(recorded)  # the policy the host opened it under: served
        host.evidence.close()
        # published while the turn is open: the same tools, one more permit
        rules.write_text(rules.read_text() + '\npermit read on "/home/**"\n')
        with pytest.raises(TurnFileError, match="policy drift"):
            bridge_runtime(recorded)


@pytest.mark.parametrize("inside", ["turn file", "open marker"])
def test_a_standalone_turn_file_whose_sandbox_holds_the_turn_itself_is_refused(
    tmp_path: Path, inside: str
) -> None:
    """The turn file holds the trusted ``AccessContext`` (principal, roles) and the open
    marker says the turn is open: under ``sandbox_root``, a permitted ``files.write``
    replacing the turn file (its mode 0600 and owner kept, so the bridge still takes it)
    made the next bridge launched on it serve another principal, and a ``files.delete``
    or ``files.write`` of the marker closed or reopened the turn. Refused as the rules and
    the evidence store under the root are."""
    sandbox = make_sandbox(tmp_path / "sandbox")
    marker = (sandbox / "public" if inside == "open marker" else tmp_path) / "open"
    marker.touch()
    where = sandbox / "public" if inside == "turn file" else tmp_path
    turn = TurnFile(
        context=AccessContext(principal="alice"),
        rules=(DATA / "files.sos",),
        evidence_db=tmp_path / "evidence.sqlite",
        sandbox_root=sandbox,
        run_policy="bridge-open",
        open_marker=marker,
    )
    path = write_turn_file(turn, where / "turn.json")
    proc = subprocess.run(
        [sys.executable, "-m", "sharedos.bridge", "--stdio", "--turn", str(path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "holds SharedOS's own state" in proc.stderr
    assert str(marker if inside == "open marker" else path) in proc.stderr
    assert not (tmp_path / "evidence.sqlite").exists()
