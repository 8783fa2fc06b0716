"""Run a harness CLI in its own process group, within a deadline, and always clean up.

The CLI is started with ``start_new_session=True`` so that it and everything
it spawns (a stdio bridge, a Node helper, ``rg``) share one process group. On
timeout or cancellation the whole group gets SIGTERM, then SIGKILL; after a
normal exit the group is killed too, so no child outlives the turn.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sharedos.redaction import Redactor

#: Captured output kept per stream (bytes); a chatty harness cannot exhaust memory.
MAX_CAPTURE = 16 * 1024 * 1024
#: A line longer than this (characters) is handed to the output hook in pieces.
MAX_LINE = 64 * 1024

#: ``on_output(stream, line)``: one line of the harness's output as it arrives,
#: ``stream`` is ``"stdout"`` or ``"stderr"``, the line has no newline and is scrubbed.
OutputHook = Callable[[str, str], None]


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
    return Redactor(secrets).scrub(text)


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


class LineRelay:
    """Turns one stream's bytes into scrubbed lines for an ``OutputHook``, as they arrive.

    Only complete lines are scrubbed and handed on, so a secret split across two
    reads is still found whole. A line longer than ``MAX_LINE`` is handed on in
    pieces, but the last ``longest spelling - 1`` characters are held back until
    more arrives, and a piece ends before any occurrence of a secret that would
    straddle its end, so no piece carries part of one. What is held back is kept
    raw (scrubbed only when handed on): a scrubbed tail would have lost a secret's
    head, and its rest would then go out unrecognised. (A secret whose raw value
    holds a newline could straddle a line break too; then the same hold applies at
    line ends, and a line may wait for more output before it is handed on.) A hook
    that raises is dropped: the harness keeps running and its output is still
    captured; the error is kept in ``error``.
    """

    def __init__(self, name: str, hook: OutputHook, secrets: Redactor) -> None:
        self.name = name
        self.hook: OutputHook | None = hook
        self.secrets = secrets
        self.error: BaseException | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._hold = max((len(f) for f in secrets.needles), default=1) - 1
        self._multiline = any("\n" in f for f in secrets.needles)

    def feed(self, data: bytes) -> None:
        """Add bytes read from the stream; emit every line they complete."""
        if self.hook is None:
            return
        self._pending += self._decoder.decode(data)
        # What is pending stays raw until it is handed on, and is handed on only up to a
        # place no occurrence of a secret straddles (``Redactor.safe_cut``): scrubbing it
        # earlier would take a secret's head at its end for a cut secret, replace it, and
        # leave the rest of the secret, arriving next, in the middle of unscrubbed text.
        if self._multiline:
            safe = len(self._pending) - self._hold
            end = self._pending.rfind("\n", 0, max(safe, 0))
            while end >= 0:
                # a line end inside an occurrence: take an earlier one
                before = self.secrets.safe_cut(self._pending, end)
                after = self.secrets.safe_cut(self._pending, end + 1)
                if before == end and after == end + 1:
                    break
                end = self._pending.rfind("\n", 0, min(before, after))
            if end >= 0:
                done, self._pending = self._pending[:end], self._pending[end + 1 :]
                for line in self.secrets.scrub(done).split("\n"):
                    self._emit(line.removesuffix("\r"))
        else:
            *lines, self._pending = self._pending.split("\n")
            for line in lines:
                self._emit(self.secrets.scrub(line.removesuffix("\r")))
        if len(self._pending) > MAX_LINE and "\n" not in self._pending:
            cut = self.secrets.safe_cut(self._pending, len(self._pending) - self._hold)
            if cut > 0:
                text, self._pending = self._pending[:cut], self._pending[cut:]
                self._emit(self.secrets.scrub(text))

    def close(self) -> None:
        """The stream ended: emit what is left (scrubbed), line by line."""
        if self.hook is None:
            return
        self._pending += self._decoder.decode(b"", final=True)
        text, self._pending = self.secrets.scrub(self._pending), ""
        if text:
            for line in text.removesuffix("\n").split("\n"):
                self._emit(line.removesuffix("\r"))

    def _emit(self, line: str) -> None:
        if self.hook is None:
            return
        try:
            self.hook(self.name, line)
        except Exception as exc:  # the hook is the caller's; the turn must not die of it
            self.error = exc
            self.hook = None


async def _read_capped(
    stream: asyncio.StreamReader | None, relay: LineRelay | None = None
) -> bytes:
    if stream is None:
        return b""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            break
        if relay is not None:
            relay.feed(chunk)
        if size < MAX_CAPTURE:
            chunks.append(chunk[: MAX_CAPTURE - size])
        size += len(chunk)
    if relay is not None:
        relay.close()
    return b"".join(chunks)


async def run_process(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    timeout_s: float,
    secrets: tuple[str, ...] = (),
    term_grace_s: float = 2.0,
    on_output: OutputHook | None = None,
    pass_fds: tuple[int, ...] = (),
    on_spawn: Callable[[], None] | None = None,
) -> ProcessResult:
    """Run ``argv`` with stdin closed; kill its process group on timeout or cancellation.

    ``on_output``, when given, receives each line of stdout and stderr as it
    arrives (scrubbed of ``secrets`` like the captured output), while the
    process runs; the captured output in the result is unchanged by it.
    ``pass_fds`` are inherited by the process (a sandbox's handoff socket);
    ``on_spawn`` runs right after the process started, before any waiting.
    Never raises for the harness's own failure (a non-zero exit is a result);
    re-raises ``CancelledError`` after the group is dead.
    """
    t0 = time.perf_counter()
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            env=env,
            cwd=str(cwd),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            pass_fds=pass_fds,
        )
    )
    try:
        # shielded: cancelled inside process creation, asyncio would kill the leader
        # and then wait for every holder of its pipes (a grandchild) to exit
        proc = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            started = await spawn
            _kill_group(started.pid, signal.SIGKILL)  # never ran as asked: nothing to spare
            await _until_exit(started, 5.0)
            await _reap_group(started.pid, 0.0)
        raise
    if on_spawn is not None:
        on_spawn()
    pgid = proc.pid
    relays: tuple[LineRelay | None, LineRelay | None] = (None, None)
    if on_output is not None:
        scrub = Redactor(secrets)
        relays = (LineRelay("stdout", on_output, scrub), LineRelay("stderr", on_output, scrub))
    out_task = asyncio.ensure_future(_read_capped(proc.stdout, relays[0]))
    err_task = asyncio.ensure_future(_read_capped(proc.stderr, relays[1]))
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
