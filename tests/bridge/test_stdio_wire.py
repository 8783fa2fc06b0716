"""``StdioWire``: the frames read from a real pipe, as the stdio bridge reads its stdin."""

from __future__ import annotations

import os

import anyio
import pytest

from sharedos.bridge.stdio_wire import StdioWire

pytestmark = pytest.mark.anyio

BOM = b"\xef\xbb\xbf"
PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'


async def _lines(*writes: bytes) -> list[bytes]:
    """The lines a wire reads from a pipe that was written ``writes`` and closed."""
    read_fd, write_fd = os.pipe()
    try:
        os.set_blocking(read_fd, False)
        wire = StdioWire(read_fd, write_fd, max_frame=1 << 16)
        for data in writes:
            os.write(write_fd, data)
        os.close(write_fd)
        out = []
        while (line := await wire.read_line()) is not None:
            out.append(line.data)
        return out
    finally:
        os.close(read_fd)


async def test_a_byte_order_mark_opening_the_stream_is_dropped() -> None:
    """A harness runtime that writes a UTF-8 BOM before its first frame (PowerShell, .NET
    writers) is read: before, its ``initialize`` was refused as not JSON (-32700)."""
    assert await _lines(BOM + PING + b"\r\n", PING + b"\n") == [PING + b"\r", PING]


async def test_a_byte_order_mark_split_across_writes_is_dropped() -> None:
    assert await _lines(BOM[:1]) == [BOM[:1]]  # a part of one, then the end: kept
    read_fd, write_fd = os.pipe()
    try:
        os.set_blocking(read_fd, False)
        wire = StdioWire(read_fd, write_fd, max_frame=1 << 16)
        for piece in (BOM[:1], BOM[1:2]):
            os.write(write_fd, piece)
            assert wire.read_available() == []  # cannot tell yet
        os.write(write_fd, BOM[2:] + PING + b"\n")
        assert [line.data for line in wire.read_available()] == [PING]
    finally:
        os.close(read_fd)
        os.close(write_fd)


async def test_only_the_streams_first_bytes_lose_a_mark() -> None:
    """A mark inside the stream belongs to its frame (refused later as not JSON)."""
    assert await _lines(PING + b"\n" + BOM + PING + b"\n") == [PING, BOM + PING]
    assert await _lines(BOM + BOM + PING + b"\n") == [BOM + PING]


@pytest.mark.parametrize("split", [False, True])
async def test_a_frame_at_the_limit_is_read_alike_with_lf_and_crlf(split: bool) -> None:
    """The line terminator is not the frame's: a frame of exactly ``max_frame`` bytes ended
    CR LF was refused as oversized (it was read whole when ended LF)."""
    frame = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'.ljust(100)
    for end in (b"\n", b"\r\n"):
        read_fd, write_fd = os.pipe()
        try:
            os.set_blocking(read_fd, False)
            wire = StdioWire(read_fd, write_fd, max_frame=100)
            data = frame + end
            if split:  # the terminator's last byte arrives on its own
                os.write(write_fd, data[:-1])
                assert wire.read_available() == []
                data = data[-1:]
            os.write(write_fd, data + b"x" * 101 + b"\r\n")
            lines = wire.read_available()
        finally:
            os.close(read_fd)
            os.close(write_fd)
        assert [(line.oversized, line.data.rstrip(b"\r")) for line in lines[:1]] == [
            (False, frame)
        ], end
        assert lines[1].oversized and lines[1].size == 102  # one byte past it still is not


def _read_all(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


def test_a_frame_torn_by_a_full_pipe_is_finished_before_the_next_one() -> None:
    """``write_line_nowait`` (the final drain's answers) on a pipe that fills up mid-frame:
    a frame over ``PIPE_BUF`` went out in part, and the next answer, written once the client
    had read some, was glued onto it, one line that is neither frame. Its rest goes first."""
    read_fd, write_fd = os.pipe()
    try:
        for fd in (read_fd, write_fd):
            os.set_blocking(fd, False)
        wire = StdioWire(read_fd, write_fd, max_frame=1 << 16)
        filled = b"x" * 100 + b"\n"
        while True:  # the pipe full but for two pages: a 20 KB frame goes out in part
            try:
                os.write(write_fd, filled)
            except BlockingIOError:
                break
        capacity = len(_read_all(read_fd))
        os.write(write_fd, filled * ((capacity - 8192) // len(filled)))
        first = b'{"jsonrpc":"2.0","id":1,"result":"' + b"y" * 20_000 + b'"}'
        second = b'{"jsonrpc":"2.0","id":2,"result":{}}'
        assert not wire.write_line_nowait(first)  # torn: the pipe filled up
        read = _read_all(read_fd)  # the client reads meanwhile
        assert wire.write_line_nowait(second)
        read += _read_all(read_fd)
        lines = read.split(b"\n")
        assert lines[-1] == b""
        assert [line for line in lines[:-1] if line != filled[:-1]] == [first, second]
    finally:
        os.close(read_fd)
        os.close(write_fd)


async def test_a_frame_whose_write_was_cancelled_is_finished_before_the_next_one() -> None:
    """``write_line`` cancelled with its frame begun (the stop's bounded answers, a turn
    closing under a large result the client reads slowly): the final drain's answers went
    straight after the torn frame. Its rest goes first."""
    read_fd, write_fd = os.pipe()
    try:
        for fd in (read_fd, write_fd):
            os.set_blocking(fd, False)
        wire = StdioWire(read_fd, write_fd, max_frame=1 << 16)
        first = b'{"jsonrpc":"2.0","id":1,"result":"' + b"y" * 200_000 + b'"}'
        second = b'{"jsonrpc":"2.0","id":2,"result":{}}'
        with anyio.move_on_after(0.05) as waited:  # the client reads nothing meanwhile
            await wire.write_line(first)
        assert waited.cancelled_caught
        read = b""
        for _ in range(100):  # the client reads on; the final drain answers once it can
            read += _read_all(read_fd)
            if wire.write_line_nowait(second):
                break
        read += _read_all(read_fd)
        assert read.split(b"\n") == [first, second, b""]
    finally:
        os.close(read_fd)
        os.close(write_fd)
