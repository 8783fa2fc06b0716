"""``StdioWire``: the frames read from a real pipe, as the stdio bridge reads its stdin."""

from __future__ import annotations

import os

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
