"""The stdio bridge ends with its turn, whatever the harness does.

Finding (fixed): with a silent harness (stdin open, nothing sent) the stdio
bridge kept running 10-15 s after the host closed the turn, because the
SDK's stdin reader blocks in a thread that cancellation cannot interrupt;
a call sent in that time was neither answered nor recorded.

Each test runs with a relayed bridge (the default: the host records, and
closing the turn waits for an attached bridge's linger) and a standalone one
(it records itself, and may outlive ``open_turn`` by its linger). The host
closes the turn in its own task, so calls are sent while it closes.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.turnfile import StdioLaunch
from sharedos.kernel.context import AccessContext
from sharedos.toolpolicy import ToolPolicy
from tests.bridge.conftest import DATA, Runtime, build_runtime
from tests.bridge.rawwire import StdioBridge, call, frame
from tests.timing import bound

pytestmark = pytest.mark.anyio

FILES_POLICY = ToolPolicy(name="bridge-open", mode="open", managed=("files.*",))
LINGER = 0.5
#: process start-up aside, what exiting may take beyond the linger: the marker poll
#: (50 ms), the final drain and interpreter shutdown
SLACK = 1.5


@pytest.fixture
def files_runtime(tmp_path: Path) -> Runtime:
    return build_runtime(tmp_path, with_slow=False)


class HeldTurn:
    """``open_turn`` held in its own task, so the test can act while the host closes it."""

    def __init__(self, rt: Runtime, alice: AccessContext, launch: StdioLaunch) -> None:
        self.rt, self.alice, self.launch = rt, alice, launch
        self.opened = anyio.Event()
        self.release = anyio.Event()
        self.command: list[str] | None = None

    async def run(self) -> None:
        async with open_turn(
            self.rt.host, self.alice, FILES_POLICY, transport="stdio", stdio=self.launch
        ) as t:
            self.command = t.command
            self.opened.set()
            await self.release.wait()


def _launch(rt: Runtime, relay: bool = True) -> StdioLaunch:
    return StdioLaunch(
        relay=relay,
        rules=(DATA / "files.sos",),
        evidence_db=rt.evidence_path,
        tool_sets=("files",),
        sandbox_root=rt.sandbox,
        run_policy="bridge-open",
        close_linger_s=LINGER,
    )


async def test_silent_harness_does_not_keep_the_bridge_alive(files_runtime: Runtime) -> None:
    rt = files_runtime
    alice = AccessContext(principal="alice")
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio", stdio=_launch(rt)) as t:
        assert t.command is not None
        bridge = await StdioBridge.start(t.command)
        try:
            await bridge.handshake()
            await bridge.send_line(frame(call(1, "files.read", {"path": "/public/a.txt"})))
            assert "result" in await bridge.wait_reply(1)
        except BaseException:
            await bridge.kill()
            raise
    closed_at = time.monotonic()  # the host closed the turn; the harness stays silent, stdin open
    try:
        code, _ = await bridge.wait_exit(LINGER + SLACK + 10)
        took = time.monotonic() - closed_at
        assert code is not None, "the stdio bridge outlived its turn by more than 10 s"
        assert took <= bound(LINGER + SLACK), (
            f"the bridge exited {took:.2f} s after the turn closed"
        )
        assert code == 3  # closed by the host
    finally:
        await bridge.kill()


@pytest.mark.parametrize("relay", [True, False], ids=["relayed", "standalone"])
async def test_a_call_in_the_linger_window_is_answered_and_recorded(
    files_runtime: Runtime, relay: bool
) -> None:
    rt = files_runtime
    alice = AccessContext(principal="alice")
    held = HeldTurn(rt, alice, _launch(rt, relay))
    async with anyio.create_task_group() as tg:
        tg.start_soon(held.run)
        await held.opened.wait()
        assert held.command is not None
        bridge = await StdioBridge.start(held.command)
        try:
            await bridge.handshake()
            held.release.set()  # the host closes the turn
            await anyio.sleep(0.15)  # the bridge has seen the marker go; its linger runs
            await bridge.send_line(frame(call(2, "files.read", {"path": "/public/a.txt"})))
            reply = await bridge.wait_reply(2, timeout=LINGER + SLACK)
            assert reply["result"]["isError"] is True
            assert reply["result"]["structuredContent"]["reason"] == "turn_closed"
            code, _ = await bridge.wait_exit(LINGER + SLACK)
            assert code == 3
        finally:
            held.release.set()
            await bridge.kill()
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.reason)) for r in records] == [("files.read", "turn_closed")]


@pytest.mark.parametrize("relay", [True, False], ids=["relayed", "standalone"])
async def test_a_call_sent_as_the_bridge_exits_is_answered_or_refused_at_the_pipe(
    files_runtime: Runtime, relay: bool
) -> None:
    """Calls keep coming until the pipe breaks: each one that got a reply is recorded,
    and every call whose bytes were in the pipe early enough got a reply."""
    rt = files_runtime
    alice = AccessContext(principal="alice")
    held = HeldTurn(rt, alice, _launch(rt, relay))
    sent: list[tuple[int, float]] = []
    broke_at = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(held.run)
        await held.opened.wait()
        assert held.command is not None
        bridge = await StdioBridge.start(held.command)
        try:
            await bridge.handshake()
            held.release.set()  # the host closes the turn while the calls keep coming
            with anyio.fail_after(LINGER + SLACK + 5):
                for request_id in range(100, 10_000):
                    try:
                        await bridge.send_line(
                            frame(call(request_id, "files.read", {"path": "/x"}))
                        )
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        broke_at = time.monotonic()
                        break
                    sent.append((request_id, time.monotonic()))
                    await anyio.sleep(0.02)
            await bridge.wait_exit(SLACK)
        finally:
            held.release.set()
            await bridge.kill()
    assert broke_at is not None, "the bridge never stopped reading"
    answered = {r["id"] for r in bridge.replies if "result" in r and r["id"] >= 100}
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert len(records) >= len(answered)
    assert all(str(r.reason) == "turn_closed" for r in records)
    # a call that sat in the pipe for 0.3 s before the bridge went away was read and answered
    early = [rid for rid, at in sent if at < broke_at - 0.3]
    assert early
    assert set(early) <= answered


def _slow_call_line(request_id: int) -> bytes:
    """A ``tools/call`` line over 64 KiB (classified in a worker thread) that takes a while
    to classify (a few hundred ms here; longer on a busy machine): a lone surrogate sends
    it down the slow path, where it walks many values."""
    head = (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":'
        '{"name":"files.read","arguments":{"path":"/public/a.txt","n":['
    ).encode()
    return head + b'"\\ud800",' + b"1," * 150_000 + b"1]}}}"


@pytest.mark.stress  # bridge subprocesses, ~3 s each; tests/bridge/test_stdio_stop.py in process
@pytest.mark.parametrize("relay", [True, False], ids=["relayed", "standalone"])
async def test_a_large_line_being_classified_as_the_bridge_stops_is_answered(
    files_runtime: Runtime, relay: bool
) -> None:
    """A line over 64 KiB is classified in a worker thread. The bridge's stop (its turn
    closed, its linger over) was taken as that thread returned: the call read off the pipe
    was thrown away, never answered, never recorded. It is answered now, and recorded by a
    standalone bridge (a relayed one's host left with its own linger: it is answered as
    the host gone, the one refusal that is not recorded)."""
    rt = files_runtime
    alice = AccessContext(principal="alice")
    launch = _launch(rt, relay).model_copy(update={"close_linger_s": 0.1})
    held = HeldTurn(rt, alice, launch)
    async with anyio.create_task_group() as tg:
        tg.start_soon(held.run)
        await held.opened.wait()
        assert held.command is not None
        bridge = await StdioBridge.start(held.command)
        try:
            await bridge.handshake()
            await bridge.send_line(_slow_call_line(7))
            held.release.set()  # the host closes the turn while the line is classified
            assert await bridge.read_until_exit(timeout=20) == 3
        finally:
            held.release.set()
            await bridge.kill()
    replies = [r for r in bridge.replies if r.get("id") == 7]
    assert len(replies) == 1, "the call read off the pipe was not answered exactly once"
    result = replies[0]["result"]
    assert result["isError"] is True
    records = rt.evidence.query(turn_id=alice.turn_id)
    if relay:
        assert result["structuredContent"]["reason"] == "turn_closed"
        return
    assert result["structuredContent"]["reason"] == "malformed_request"
    assert [(r.tool, str(r.reason)) for r in records] == [("files.read", "malformed_request")]


async def test_a_relayed_bridge_answers_a_call_in_flight_at_end_of_input_within_the_hosts_timeout(
    tmp_path: Path,
) -> None:
    """A client writes its last call and closes stdin (a piped client, a harness ending
    its turn): the bridge answers calls in flight first, "within the handler timeout".
    A relayed bridge waited its launch's ``handler_timeout_s`` (30 s by default), not the
    host's, which runs the call (``sharedos run`` with an upstream: ``call_s`` + 10 s, 70 s
    by default): a call to a slow upstream was cut off, never answered."""
    from tests.bridge.conftest import OPEN_POLICY

    rt = build_runtime(tmp_path, timeout_s=10.0)
    alice = AccessContext(principal="alice")
    launch = StdioLaunch(directory=tmp_path, handler_timeout_s=0.3, close_linger_s=LINGER)
    async with open_turn(rt.host, alice, OPEN_POLICY, transport="stdio", stdio=launch) as t:
        assert t.command is not None
        bridge = await StdioBridge.start(t.command)
        try:
            await bridge.handshake()
            await bridge.send_line(frame(call(2, "slow.wait", {"seconds": 1.5})))
            await rt.probe.started.wait()
            assert bridge.process.stdin is not None
            await bridge.process.stdin.aclose()
            reply = await bridge.wait_reply(2, timeout=bound(10.0))
            assert reply.get("result", {}).get("isError") is False, reply
            code, _ = await bridge.wait_exit(bound(5.0))
            assert code == 0
        finally:
            await bridge.kill()
    records = rt.evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.outcome)) for r in records] == [("slow.wait", "succeeded")]
