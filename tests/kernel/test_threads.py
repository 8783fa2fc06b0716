"""Abandoned sync handlers: bounded daemon threads, prompt process exit, nothing runs late."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import Kernel, RuntimeHost, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.kernel.threads import DaemonLane, SerialLane
from sharedos.outcomes import ReasonCode
from tests.timing import bound

from .conftest import ALICE, ALL, misc_tool

pytestmark = pytest.mark.anyio

CHILD = textwrap.dedent(
    """
    import sys, time, anyio
    from sharedos.catalog import ToolDefinition, ToolRegistry
    from sharedos.evidence import SqliteEvidenceStore
    from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
    from sharedos.kernel.handlers import HandlerResult
    from sharedos.policy import compile_source
    from sharedos.toolpolicy import RunMode, ToolPolicy

    def stuck(args, hctx):
        time.sleep(60)  # a sync handler Python cannot interrupt
        return HandlerResult.text("late")

    tool = ToolDefinition(name="misc.stuck", description="Never returns in time.",
                          input_schema={"type": "object",
                                        "properties": {"path": {"type": "string"}}},
                          handler=stuck)
    policy = compile_source('namespace misc\\nrequirement misc.stuck { action call; '
                            'resource path(args.path) }\\npermit call on "/**"\\n', "t.sos")
    host = RuntimeHost(Kernel(policy, ToolRegistry([tool])), SqliteEvidenceStore(sys.argv[1]),
                       handler_timeout_s=0.3)
    run = ToolPolicy(name="t", mode=RunMode.OPEN, managed=("misc.*",))

    async def main():
        for i in range(3):
            r = await host.invoke_tool(ToolCall(call_id=f"c{i}", tool="misc.stuck",
                                                arguments={"path": "/x"}),
                                       AccessContext(principal="p"), run)
            print(r.call_id, r.reason, flush=True)

    anyio.run(main)
    print("turn over", flush=True)
    """
)


def test_a_process_with_timed_out_sync_handlers_exits_promptly(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "e.db")],
        capture_output=True,
        text=True,
        timeout=50,
    )
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["c0 timeout", "c1 timeout", "c2 timeout", "turn over"]
    # three handlers are still sleeping their 60 s when the turn ends: the process must not wait
    assert took < bound(15), f"the process took {took:.1f} s to exit"
    records = SqliteEvidenceStore(tmp_path / "e.db", read_only=True).query()
    assert [r.reason for r in records] == [ReasonCode.TIMEOUT] * 3


async def test_the_handler_lane_is_bounded_and_a_task_not_started_never_runs(
    kernel: Kernel, tmp_path: Path
) -> None:
    release = threading.Event()
    started: list[str] = []

    def blocking(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        started.append(hctx.call.call_id)
        release.wait(20)
        return HandlerResult.text("late")

    host = RuntimeHost(
        Kernel(kernel.policy, ToolRegistry([misc_tool(blocking)])),
        SqliteEvidenceStore(tmp_path / "e.db"),
        handler_timeout_s=0.3,
        max_handler_threads=2,
    )
    results = []
    async with anyio.create_task_group() as tg:

        async def one(i: int) -> None:
            results.append(
                await host.invoke_tool(
                    ToolCall(call_id=f"c{i}", tool="misc.echo", arguments={"path": "/x"}),
                    ALICE,
                    ALL,
                )
            )

        for i in range(4):
            tg.start_soon(one, i)
    assert sorted(r.reason for r in results) == [ReasonCode.TIMEOUT] * 4
    assert host._handler_lane.threads <= 2
    assert len(started) == 2  # the two queued behind the stuck ones were dropped, never run
    release.set()
    await anyio.sleep(0.3)
    assert len(started) == 2  # and they do not run later either


async def test_lanes_run_tasks_and_idle_threads_exit() -> None:
    lane = DaemonLane("test-lane", max_threads=3, idle_s=0.2)
    assert await lane.run_sync(lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(ZeroDivisionError):
        await lane.run_sync(lambda: 1 / 0)
    await anyio.sleep(0.6)
    assert lane.threads == 0
    serial = SerialLane("test-serial", idle_s=0.2)
    order: list[int] = []
    from sharedos.kernel.threads import LaneTask, await_task

    for i in range(5):
        assert await await_task(LaneTask(order.append, i), serial.submit, 1.0)
    assert order == [0, 1, 2, 3, 4]
    slow = LaneTask(time.sleep, 0.5)
    assert await await_task(slow, serial.submit, 0.05) is False  # the bound passed first
    await anyio.sleep(0.6)
    assert slow.done
