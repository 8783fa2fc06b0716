"""stdin/stdout as raw, bounded, cancellable newline-delimited frames.

Why not the SDK's ``stdio_server``: it reads stdin in a worker thread that
cancellation cannot interrupt (measured: with a silent harness the bridge
outlived its turn by 10-15 s, and a call sent then was neither answered nor
recorded), it decodes with ``errors="replace"`` (a call with invalid UTF-8 ran
on the altered text), and it reads lines of any length. This module reads
the descriptors itself, non-blocking, waiting in the event loop (so a
cancellation ends it at once), keeps each frame as bytes for
``sharedos.bridge.frames`` to classify, and refuses lines longer than the
frame limit without holding them in memory.

Like the SDK's transport, it claims the standard descriptors while serving:
fd 0 reads the null device and fd 1 writes to stderr, so a handler's stray
``print`` cannot corrupt the wire. On exit fd 1 is restored; fd 0 is not: the
input was this transport's, and closing its last reader at once means a
harness that writes after the bridge stopped reading gets a broken pipe
instead of bytes that silently vanish while the process shuts down.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

import anyio
import anyio.lowlevel

from sharedos.jsonrpc_id import EDGE_BYTES

_READ_CHUNK = 64 * 1024
#: a UTF-8 byte-order mark: dropped once, where the input stream begins (RFC 8259 section 8.1
#: lets a parser ignore it; a harness whose runtime writes one before its first frame, as
#: PowerShell and .NET writers can, would otherwise have its ``initialize`` refused as not JSON)
_BOM = b"\xef\xbb\xbf"
# EDGE_BYTES of each end of an oversized line are kept: its request id is read from them
# (so the request is answered, not left waiting) and its head's fingerprint recorded


@dataclass(frozen=True, slots=True)
class RawLine:
    """One line from stdin, without its newline; ``data`` is only its head when ``oversized``
    (and ``tail`` its last bytes)."""

    data: bytes
    size: int
    oversized: bool = False
    tail: bytes = b""


class StdioWire:
    """Frames in from ``read_fd``, frames out to ``write_fd``, never blocking the event loop."""

    def __init__(self, read_fd: int, write_fd: int, *, max_frame: int) -> None:
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._max = max_frame
        self._buffer = bytearray()
        self._eof = False
        self._at_start = True  # nothing read yet: a byte-order mark here is dropped
        self._skipping = False  # inside an oversized line: drop until its newline
        self._skipped = 0
        self._skipped_head = b""
        self._skipped_tail = b""
        self._read_pollable = _pollable(read_fd)
        self._write_pollable = _pollable(write_fd)
        self._write_lock = anyio.Lock()
        #: the rest of a frame ``write_line_nowait`` wrote only in part (the pipe filled up
        #: mid-frame): it goes out before any other frame, or that frame would be glued
        #: onto the torn one and the client would read one line that is neither
        self._unsent = b""

    @classmethod
    @contextlib.contextmanager
    def claim_std(cls, *, max_frame: int) -> Iterator[StdioWire]:
        """Serve the process's own stdin/stdout; fd 0 and 1 are diverted meanwhile (fd 1 restored)."""
        read_fd = os.dup(0)
        write_fd = os.dup(1)
        saved_out = os.dup(1)
        flags = {fd: os.get_blocking(fd) for fd in (read_fd, write_fd)}
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
            os.dup2(2, 1)
            for fd in (read_fd, write_fd):
                os.set_blocking(fd, False)
            yield cls(read_fd, write_fd, max_frame=max_frame)
        finally:
            for fd, blocking in flags.items():
                with contextlib.suppress(OSError):
                    os.set_blocking(fd, blocking)  # the description may be shared (a tty)
            with contextlib.suppress(OSError):
                os.dup2(saved_out, 1)
            for fd in (null, read_fd, write_fd, saved_out):
                with contextlib.suppress(OSError):
                    os.close(fd)

    # -- reading ----------------------------------------------------------------
    async def read_line(self) -> RawLine | None:
        """The next line (``None`` at end of input); waits in the event loop, cancellable."""
        while True:
            line = self._next_line()
            if line is not None:
                return line
            if self._eof:
                return self._last_line()
            await self._wait_readable()
            self._fill()

    def read_available(self) -> list[RawLine]:
        """Every complete line already received or readable now, without waiting."""
        lines: list[RawLine] = []
        while True:
            line = self._next_line()
            if line is not None:
                lines.append(line)
                continue
            if self._eof or not self._fill():
                break
        return lines

    def _next_line(self) -> RawLine | None:
        if self._at_start and not self._drop_bom():
            return None
        index = self._buffer.find(b"\n")
        if index < 0:
            if _frame_size(self._buffer) > self._max:
                self._skip(len(self._buffer))
            return None
        data = bytes(self._buffer[:index])
        del self._buffer[: index + 1]
        if self._skipping:
            return self._end_skip(data)
        if _frame_size(data) > self._max:
            return RawLine(
                data=data[:EDGE_BYTES], size=len(data), oversized=True, tail=data[-EDGE_BYTES:]
            )
        return RawLine(data=data, size=len(data))

    def _drop_bom(self) -> bool:
        """Drop a byte-order mark opening the stream; False while the first bytes cannot tell."""
        head = bytes(self._buffer[: len(_BOM)])
        if _BOM.startswith(head) and len(head) < len(_BOM) and not self._eof:
            return False  # nothing yet, or a part of the mark: wait for more
        if head == _BOM:
            del self._buffer[: len(_BOM)]
        self._at_start = False
        return True

    def _skip(self, count: int) -> None:
        if not self._skipping:
            self._skipping = True
            self._skipped_head = bytes(self._buffer[:EDGE_BYTES])
        self._skipped += count
        self._keep_tail(bytes(self._buffer[max(0, count - EDGE_BYTES) : count]))
        del self._buffer[:count]

    def _keep_tail(self, piece: bytes) -> None:
        self._skipped_tail = (self._skipped_tail + piece)[-EDGE_BYTES:]

    def _end_skip(self, rest: bytes) -> RawLine:
        """The oversized line being skipped ends with ``rest``."""
        self._keep_tail(rest)
        line = RawLine(
            data=self._skipped_head,
            size=self._skipped + len(rest),
            oversized=True,
            tail=self._skipped_tail,
        )
        self._skipping, self._skipped, self._skipped_head, self._skipped_tail = False, 0, b"", b""
        return line

    def _last_line(self) -> RawLine | None:
        if self._at_start:
            self._drop_bom()
        if self._skipping:
            rest = bytes(self._buffer)
            self._buffer = bytearray()
            return self._end_skip(rest)
        if not self._buffer:
            return None
        data = bytes(self._buffer)
        self._buffer.clear()
        return RawLine(data=data, size=len(data))

    def _fill(self) -> bool:
        """Read what is available now; False when nothing was (or the input ended)."""
        try:
            chunk = os.read(self._read_fd, _READ_CHUNK)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EINTR):
                return False
            self._eof = True  # a broken input is an ended input
            return False
        if not chunk:
            self._eof = True
            return False
        if self._skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                self._skipped += len(chunk)
                self._keep_tail(chunk[-EDGE_BYTES:])
                return True
        self._buffer += chunk
        return True

    async def _wait_readable(self) -> None:
        if self._read_pollable:
            try:
                await anyio.wait_readable(self._read_fd)
                return
            except OSError:  # a descriptor epoll cannot watch: read it directly from now on
                self._read_pollable = False
        await anyio.lowlevel.checkpoint()

    # -- writing ----------------------------------------------------------------
    async def write_line(self, data: bytes) -> None:
        """Write one frame and its newline, whole (frames never interleave); cancellable.

        Cancelled with its frame begun (the stop's bounded answers, a turn closing under a
        large result the client reads slowly), the frame's rest is kept and goes out before
        any other frame (``write_line_nowait``): the final drain's answers were glued onto it.
        """
        async with self._write_lock:
            frame = data + b"\n"
            view = memoryview(self._unsent + frame)
            self._unsent = b""
            try:
                while view:
                    try:
                        written = os.write(self._write_fd, view)
                    except BlockingIOError:
                        await self._wait_writable()
                        continue
                    except OSError as exc:
                        if exc.errno in (errno.EAGAIN, errno.EINTR):
                            await self._wait_writable()
                            continue
                        raise anyio.BrokenResourceError("stdout is closed") from exc
                    view = view[written:]
            except BaseException:
                left = len(view)
                if left < len(frame):  # this frame was begun: its rest must follow
                    self._unsent = bytes(view)
                elif left > len(frame):  # an earlier torn frame is still not ended
                    self._unsent = bytes(view[: left - len(frame)])
                raise

    def write_line_nowait(self, data: bytes) -> bool:
        """Best effort, without waiting (the final drain): False when the frame did not go
        out whole now.

        A frame larger than the pipe's atomic size (``PIPE_BUF``, 4 KiB) can be written in
        part when the pipe fills up mid-frame: its rest is kept and written before any other
        frame (here, or by ``write_line``), never after one. Before, the next frame written
        once the client had read some went straight after the torn one, and the client read
        one line that was neither: both answers lost to a JSON parse error.
        """
        if self._write_lock.locked():
            return False
        if self._unsent and not self._send_unsent():
            return False  # the torn frame's rest still waits: nothing may go before it
        view = memoryview(data + b"\n")
        try:
            while view:
                view = view[os.write(self._write_fd, view) :]
        except OSError:
            if len(view) <= len(data):  # some of the frame went out: its rest must follow
                self._unsent = bytes(view)
            return False
        return True

    def _send_unsent(self) -> bool:
        """Write what is left of a torn frame, without waiting; True once none is left."""
        view = memoryview(self._unsent)
        try:
            while view:
                view = view[os.write(self._write_fd, view) :]
        except OSError:
            self._unsent = bytes(view)
            return False
        self._unsent = b""
        return True

    async def _wait_writable(self) -> None:
        if self._write_pollable:
            try:
                await anyio.wait_writable(self._write_fd)
                return
            except OSError:
                self._write_pollable = False
        await anyio.sleep(0.001)


def _frame_size(line: bytes | bytearray) -> int:
    """The size of the frame in ``line``: a CR ending it is its line terminator's (CR LF), so
    a frame of exactly the limit is read alike whether the client ends its lines LF or CR LF."""
    return len(line) - 1 if line.endswith(b"\r") else len(line)


def _pollable(fd: int) -> bool:
    """Whether the event loop can wait on ``fd`` (pipes, sockets, ttys; not regular files)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode)
