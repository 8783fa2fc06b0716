"""Harness processes: a deadline kills the whole process group; nothing outlives the turn."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

import pytest

from sharedos.harness.process import run_process
from tests.timing import bound

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
    assert time.perf_counter() - t0 < bound(10)
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


@pytest.mark.anyio
async def test_output_lines_reach_the_hook_while_the_process_runs(tmp_path: Path) -> None:
    """The process waits for a file the hook creates when it sees "ready": a hook called
    only after exit would leave it waiting until its deadline."""
    gate = tmp_path / "gate"
    script = f"echo ready; while [ ! -e {gate} ]; do sleep 0.05; done; echo done; echo oops >&2"
    seen: list[tuple[str, str]] = []

    def hook(stream: str, line: str) -> None:
        seen.append((stream, line))
        if line == "ready":
            gate.touch()

    result = await run_process(
        ["sh", "-c", script], env=ENV, cwd=tmp_path, timeout_s=30, on_output=hook
    )
    assert not result.timed_out and result.returncode == 0
    assert [x for x in seen if x[0] == "stdout"] == [("stdout", "ready"), ("stdout", "done")]
    assert ("stderr", "oops") in seen
    assert result.stdout == "ready\ndone\n"  # the capture is unchanged by the hook


@pytest.mark.anyio
async def test_a_secret_split_across_writes_is_scrubbed_from_streamed_lines(tmp_path: Path) -> None:
    script = "printf 'key=tok-12'; sleep 0.2; printf '3456789 end\\n'; printf 'tail tok-123456789'"
    seen: list[str] = []
    result = await run_process(
        ["sh", "-c", script],
        env=ENV,
        cwd=tmp_path,
        timeout_s=10,
        secrets=("tok-123456789",),
        on_output=lambda stream, line: seen.append(line),
    )
    assert seen == ["key=[redacted] end", "tail [redacted]"]
    assert "tok-123456789" not in result.stdout


@pytest.mark.anyio
async def test_a_very_long_line_is_streamed_in_pieces_that_never_cut_a_secret(
    tmp_path: Path,
) -> None:
    """Past MAX_LINE a line is handed on in pieces; a secret on a piece boundary is still
    found whole, so no piece carries a part of it."""
    from sharedos.harness.process import MAX_LINE

    secret = "sk-" + "s" * 40
    writer = tmp_path / "w.py"
    writer.write_text(
        "import sys, time\n"
        f"for i in range(6):\n"
        f"    sys.stdout.write('x' * ({MAX_LINE} - 5) + {secret!r}[: 10 + i])\n"
        f"    sys.stdout.flush(); time.sleep(0.05)\n"
        f"    sys.stdout.write({secret!r}[10 + i :] + ' ')\n"
        "    sys.stdout.flush()\n"
        "print('end')\n"
    )
    import sys

    pieces: list[str] = []
    await run_process(
        [sys.executable, str(writer)],
        env=ENV,
        cwd=tmp_path,
        timeout_s=30,
        secrets=(secret,),
        on_output=lambda stream, line: pieces.append(line),
    )
    assert len(pieces) > 1
    joined = "".join(pieces)
    assert joined.endswith("end") and joined.count("[redacted]") == 6
    assert not any(secret[:8] in p for p in pieces)


@pytest.mark.anyio
async def test_a_hook_that_raises_does_not_stop_the_process(tmp_path: Path) -> None:
    def hook(stream: str, line: str) -> None:
        raise RuntimeError("the caller's bug")

    result = await run_process(
        ["sh", "-c", "echo one; echo two"], env=ENV, cwd=tmp_path, timeout_s=10, on_output=hook
    )
    assert result.returncode == 0 and result.stdout == "one\ntwo\n"


@pytest.mark.anyio
async def test_cancellation_while_the_process_is_being_set_up_kills_the_group_at_once(
    tmp_path: Path,
) -> None:
    """Cancelled inside process creation (the process already runs, its pipes not yet
    connected), asyncio would wait for every holder of the pipes to exit — here a
    ``sleep 60`` child. The group is killed at once instead, and nothing survives."""
    for attempt in range(5):
        pidfile = tmp_path / f"leader{attempt}.pid"
        task = asyncio.ensure_future(
            run_process(
                ["sh", "-c", f"echo $$ > {pidfile}; sleep 60 & wait"],
                env=ENV,
                cwd=tmp_path,
                timeout_s=60,
            )
        )
        # cancel the moment the shell has written its pid: as early as possible
        for _ in range(200_000):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            await asyncio.sleep(0)
        leader = int(pidfile.read_text())
        t0 = time.perf_counter()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.perf_counter() - t0 < bound(10)
        assert not alive(leader)
        assert not group_members(leader), "a process of the cancelled group survived"


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(") ", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry))
    return found


SPLIT_SECRET = "PLANTED-stream-0123456789abcdefghijklmnopqrstuv"


def _pieces_of(secret: str) -> list[str]:
    from sharedos.redaction import MIN_SECRET_CHARS

    return [secret[i : i + MIN_SECRET_CHARS] for i in range(len(secret) - MIN_SECRET_CHARS + 1)]


@pytest.mark.parametrize("multiline", [False, True], ids=["one-line-secrets", "multiline-secret"])
@pytest.mark.parametrize("long_line", [False, True], ids=["short-line", "long-line"])
@pytest.mark.parametrize("split", [8, 12, 20, 30, 39])
def test_a_secret_split_between_two_reads_leaves_no_piece_in_the_streamed_lines(
    multiline: bool, long_line: bool, split: int
) -> None:
    """Two reads, the first ending inside the secret: the streamed lines hold no piece of
    it, whether the first read is handed on early (a line past MAX_LINE) or held (a host
    secret with a newline in it, such as a PEM key, makes every line wait for more).
    Before, what was held back was scrubbed already: the secret's head at its end was
    taken for a cut secret and replaced, and the rest went out when it arrived."""
    from sharedos.harness.process import MAX_LINE, LineRelay
    from sharedos.redaction import Redactor

    values = [SPLIT_SECRET]
    if multiline:
        values.append("-----BEGIN KEY-----\nPLANTED-pem-body-0123456789\n-----END KEY-----")
    lines: list[str] = []
    relay = LineRelay("stdout", lambda stream, line: lines.append(line), Redactor(values))
    head = "x" * (MAX_LINE + 10) if long_line else "token="
    data = f"{head}{SPLIT_SECRET} after\nnext line\n".encode()
    at = len(head) + split
    relay.feed(data[:at])
    relay.feed(data[at:])
    relay.close()
    streamed = "\n".join(lines)
    assert streamed.endswith("[redacted] after\nnext line")
    leaked = [p for p in _pieces_of(SPLIT_SECRET) if p in streamed]
    assert not leaked, f"pieces of the secret were streamed: {leaked[:3]}"
