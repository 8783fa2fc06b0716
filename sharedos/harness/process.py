"""Run a harness CLI in its own process group, within a deadline, and always clean up.

The CLI is started with ``start_new_session=True`` so that it and everything
it spawns (a stdio bridge, a Node helper, ``rg``) share one process group. On
timeout or cancellation the whole group gets SIGTERM, then SIGKILL; after a
normal exit the group is killed too, so no child outlives the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from sharedos.harness.secrets import Secrets

#: Captured output kept per stream (bytes); a chatty harness cannot exhaust memory.
MAX_CAPTURE = 16 * 1024 * 1024


@dataclass
class ProcessResult:
    """How the harness process ended, and what it printed (secrets already redacted)."""

    returncode: int | None
    timed_out: bool
    cancelled: bool
    duration_s: float
    stdout: str
    stderr: str


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """Replace every spelling of every secret value in ``text`` (tokens, provider keys)."""
    return Secrets.of(secrets).scrub(text)


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _until_exit(proc: asyncio.subprocess.Process, limit_s: float) -> None:
    end = time.perf_counter() + limit_s
    while proc.returncode is None and time.perf_counter() < end:
        try:
            await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            continue  # already tearing down: finish the cleanup first


def _group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process is in the group.

    A zombie still counts for ``killpg(pgid, 0)``, and in a container whose
    PID 1 does not reap orphans it stays one forever, so /proc is read instead.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


async def _reap_group(pgid: int, grace_s: float) -> None:
    """Let the group's leftovers exit, then terminate them, then kill them."""
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            _kill_group(pgid, sig)
        deadline = time.perf_counter() + (grace_s / 2 if sig is None else grace_s)
        while _group_alive(pgid) and time.perf_counter() < deadline:
            await asyncio.sleep(0.02)
        if not _group_alive(pgid):
            return


async def _read_capped(stream: asyncio.StreamReader | None) -> bytes:
    if stream is None:
        return b""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            break
        if size < MAX_CAPTURE:
            chunks.append(chunk[: MAX_CAPTURE - size])
        size += len(chunk)
    return b"".join(chunks)


async def run_process(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    timeout_s: float,
    secrets: tuple[str, ...] = (),
    term_grace_s: float = 2.0,
) -> ProcessResult:
    """Run ``argv`` with stdin closed; kill its process group on timeout or cancellation.

    Never raises for the harness's own failure (a non-zero exit is a result);
    re-raises ``CancelledError`` after the group is dead.
    """
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=str(cwd),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    pgid = proc.pid
    out_task = asyncio.ensure_future(_read_capped(proc.stdout))
    err_task = asyncio.ensure_future(_read_capped(proc.stderr))
    timed_out = cancelled = False
    # Poll the leader's exit rather than awaiting proc.wait(): asyncio's wait()
    # also waits for the pipes to close, and a grandchild that inherited them
    # would keep the turn open until the deadline.
    deadline = t0 + timeout_s
    try:
        while proc.returncode is None:
            if time.perf_counter() >= deadline:
                timed_out = True
                break
            await asyncio.sleep(0.02)
    except asyncio.CancelledError:
        cancelled = True
    finally:
        if proc.returncode is None:
            _kill_group(pgid, signal.SIGTERM)
            await _until_exit(proc, term_grace_s)
        # Whatever the leader did, nothing of its group survives the turn. Children
        # (a stdio MCP server whose stdin just closed) get a moment to exit on
        # their own, then SIGTERM, then SIGKILL.
        await _reap_group(pgid, term_grace_s)
        if proc.returncode is None:
            _kill_group(pgid, signal.SIGKILL)
            await _until_exit(proc, 5.0)
    try:
        stdout, stderr = await asyncio.wait_for(asyncio.gather(out_task, err_task), timeout=5)
    except (TimeoutError, asyncio.CancelledError):
        out_task.cancel()
        err_task.cancel()
        stdout = stderr = b""
    result = ProcessResult(
        returncode=proc.returncode,
        timed_out=timed_out,
        cancelled=cancelled,
        duration_s=time.perf_counter() - t0,
        stdout=redact(stdout.decode("utf-8", "replace"), secrets),
        stderr=redact(stderr.decode("utf-8", "replace"), secrets),
    )
    if cancelled:
        raise asyncio.CancelledError
    return result
