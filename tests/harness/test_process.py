"""Harness processes: a deadline kills the whole process group; nothing outlives the turn."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from sharedos.harness.process import run_process

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


async def wait_for_file(path: Path) -> None:
    for _ in range(200):
        if path.exists() and path.read_text().strip():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never written")


@pytest.mark.anyio
async def test_timeout_kills_the_group_including_grandchildren(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pidfile}; echo started; sleep 60"
    t0 = time.perf_counter()
    result = await run_process(["sh", "-c", script], env=ENV, cwd=tmp_path, timeout_s=1.0)
    assert result.timed_out and not result.cancelled
    assert time.perf_counter() - t0 < 10
    assert "started" in result.stdout
    grandchild = int(pidfile.read_text())
    assert not alive(grandchild)


@pytest.mark.anyio
async def test_children_do_not_outlive_a_normal_exit(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    result = await run_process(
        ["sh", "-c", f"sleep 60 & echo $! > {pidfile}; exit 0"], env=ENV, cwd=tmp_path, timeout_s=10
    )
    assert result.returncode == 0 and not result.timed_out
    assert not alive(int(pidfile.read_text()))


@pytest.mark.anyio
async def test_cancellation_kills_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "leader.pid"
    task = asyncio.ensure_future(
        run_process(
            ["sh", "-c", f"echo $$ > {pidfile}; sleep 60"], env=ENV, cwd=tmp_path, timeout_s=60
        )
    )
    await wait_for_file(pidfile)
    leader = int(pidfile.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not alive(leader)


@pytest.mark.anyio
async def test_secrets_are_redacted_from_captured_output(tmp_path: Path) -> None:
    result = await run_process(
        ["sh", "-c", "echo token=tok-123456789; echo key=sk-abcdefgh >&2"],
        env=ENV,
        cwd=tmp_path,
        timeout_s=10,
        secrets=("tok-123456789", "sk-abcdefgh"),
    )
    assert "tok-123456789" not in result.stdout and "[redacted]" in result.stdout
    assert "sk-abcdefgh" not in result.stderr
