"""The sandbox's loopback: the allowed ports of the host's loopback, and nothing else.

A sandbox with ``network = "loopback"`` has its own network namespace, whose
loopback is empty. ``inside.py init`` (the sandbox's first program) binds
``127.0.0.1:PORT`` there for each allowed port — the host's port numbers, so
the URLs the harness was given stay valid — and hands the listening sockets
out over a Unix socket pair (``SCM_RIGHTS``) before it ``exec``\\ s the
harness. ``PortHandoff`` is the host's end: it receives them and gives each to
a server:

- a ``serve`` callback the caller supplies for that port (the turn bridge's
  uvicorn and the scripted model accept on the socket directly: a call from
  the sandbox costs nothing more than a call from the host);
- otherwise ``relay_to_loopback``, which connects each accepted connection
  to the same port on the host's loopback and copies bytes both ways (an
  operator's egress proxy, say).

A connection the harness makes before the host is serving waits in the
socket's backlog (the sockets listen before the harness starts), so there is
no start-up race. Nothing else on the host's loopback can be reached from the
sandbox: it has no route to it.

``NetnsHandoff`` does the same without any program in the sandbox, where the
host may enter the sandbox's network namespace (``setns``; as root):
bubblewrap reports its child's PID (``--info-fd``) and holds the harness back
(``--block-fd``) while a short-lived host thread enters that namespace, binds
the listeners there and leaves; then the harness starts. Measured: a whole
sandboxed start of ``bash`` that connects back took 17 ms this way; the
Python helper costs a Python start-up (15-30 ms) more.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import json
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from sharedos.compat.asyncio_accept import PacedListener, quiet_accept_failures
from sharedos.confine.detect import ConfinementUnavailable

#: ``serve(sock)``: start accepting connections on a listening socket from the sandbox
ServeFn = Callable[[socket.socket], Awaitable[None]]


class SandboxSetupFailed(ConfinementUnavailable):
    """The sandbox could not be set up (its first program failed); ``str()`` says why."""


class PortHandoff:
    """The host's end of one sandbox's port handoff (see the module docstring)."""

    def __init__(self, ports: Sequence[int]) -> None:
        self.ports = tuple(ports)
        self._host, self._child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._host.setblocking(False)
        self._child.set_inheritable(True)
        self.sockets: dict[int, socket.socket] = {}
        self._servers: list[asyncio.AbstractServer] = []

    @property
    def child_fd(self) -> int:
        """The descriptor the sandbox's first program writes to (pass it to the child)."""
        return self._child.fileno()

    @property
    def child_fds(self) -> tuple[int, ...]:
        """Every descriptor the sandbox must inherit."""
        return (self._child.fileno(),)

    def bwrap_options(self) -> list[str]:
        """Extra ``bwrap`` options this handoff needs (none: ``inside.py init`` does the work)."""
        return []

    def spawned(self) -> None:
        """Close the host's copy of the child's end (so a failed start reads as EOF)."""
        self._child.close()

    async def receive(self, timeout_s: float = 30.0) -> dict[int, socket.socket]:
        """The listening sockets, by port; ``SandboxSetupFailed`` when the sandbox did not send them."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(self._host.fileno(), readable)
        try:
            await asyncio.wait_for(ready, timeout_s)
        except TimeoutError:
            raise SandboxSetupFailed(
                f"the sandbox did not hand over its loopback within {timeout_s:g} s"
            ) from None
        finally:
            loop.remove_reader(self._host.fileno())
        try:
            data, fds, _flags, _addr = socket.recv_fds(self._host, 4096, max(len(self.ports), 1))
        except OSError as exc:
            raise SandboxSetupFailed(f"the sandbox's loopback handoff failed: {exc}") from None
        socks = [socket.socket(fileno=fd) for fd in fds]
        if not data.startswith(b"ok ") or len(socks) != len(self.ports):
            for s in socks:
                s.close()
            why = data.decode("utf-8", "replace").strip() or "it exited before handing it over"
            raise SandboxSetupFailed(f"the sandbox's loopback could not be set up: {why}")
        for port, sock in zip(self.ports, socks, strict=True):
            sock.setblocking(False)
            self.sockets[port] = sock
        return dict(self.sockets)

    async def serve(self, servers: Mapping[int, ServeFn], timeout_s: float = 30.0) -> None:
        """Receive the sockets and start serving each (``servers[port]``, else a loopback relay)."""
        received = await self.receive(timeout_s)
        for port, sock in received.items():
            serve = servers.get(port)
            if serve is not None:
                # the server owns the listener now (it closes it when it stops)
                del self.sockets[port]
                await serve(sock)
            else:
                self._servers.append(await relay_to_loopback(sock, port))

    async def close(self) -> None:
        """Stop the relays and close the sockets no server took over (idempotent)."""
        for server in self._servers:
            server.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)
        self._servers.clear()
        for sock in self.sockets.values():
            sock.close()
        self.sockets.clear()
        for end in (getattr(self, "_host", None), getattr(self, "_child", None)):
            if end is not None:
                with contextlib.suppress(OSError):
                    end.close()


#: ``setns`` namespace type of a network namespace
CLONE_NEWNET = 0x40000000


def can_enter_namespaces() -> bool:
    """True when this process may ``setns`` into a sandbox's network namespace (root)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


async def _read_all(fd: int, timeout_s: float, until: bytes) -> bytes:
    """Read ``fd`` (non-blocking) until ``until`` is seen or EOF, within ``timeout_s``."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    data = b""
    done: asyncio.Event = asyncio.Event()
    loop.add_reader(fd, done.set)
    try:
        async with asyncio.timeout(timeout_s):
            while until not in data:
                await done.wait()
                done.clear()
                try:
                    chunk = os.read(fd, 4096)
                except BlockingIOError:
                    continue
                if not chunk:
                    break
                data += chunk
    except TimeoutError:
        raise SandboxSetupFailed(f"the sandbox did not start within {timeout_s:g} s") from None
    finally:
        loop.remove_reader(fd)
    return data


#: how long a sandbox's loopback may take to come up after bubblewrap reports its PID
_LOOPBACK_UP_S = 10.0


def _bind_when_up(sock: socket.socket, port: int) -> None:
    """Bind ``sock`` to 127.0.0.1:``port`` in the namespace this thread is in, waiting for
    its loopback to come up: bubblewrap reports the child's PID (``--info-fd``) as soon as
    the namespace exists, while the child is still bringing ``lo`` up, so on a busy host
    127.0.0.1 may not be assignable yet (EADDRNOTAVAIL). Any other error, or a loopback
    still down after ``_LOOPBACK_UP_S``, is raised."""
    deadline = time.monotonic() + _LOOPBACK_UP_S
    delay = 0.001
    while True:
        try:
            sock.bind(("127.0.0.1", port))
            return
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _listen_in(pid: int, ports: Sequence[int]) -> list[socket.socket]:
    """Listeners on 127.0.0.1:PORT inside ``pid``'s network namespace (from a thread of its own)."""
    out: list[socket.socket] = []
    failure: list[BaseException] = []

    def work() -> None:
        # setns changes only this thread, which ends right after: no other thread of
        # SharedOS ever runs in the sandbox's namespace
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into the sandbox: {os.strerror(err)}")
            finally:
                os.close(fd)
            for port in ports:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
                out.append(sock)
                _bind_when_up(sock, port)
                sock.listen(128)
                sock.setblocking(False)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=work, name="sharedos-sandbox-netns", daemon=True)
    thread.start()
    thread.join()
    if failure:
        for sock in out:
            sock.close()
        raise SandboxSetupFailed(f"the sandbox's loopback could not be set up: {failure[0]}")
    return out


class NetnsHandoff(PortHandoff):
    """The host binds the sandbox's listeners itself (``setns``); nothing runs in the sandbox."""

    def __init__(self, ports: Sequence[int]) -> None:
        self.ports = tuple(ports)
        self.sockets = {}
        self._servers = []
        self._info_r, self._info_w = os.pipe()
        self._block_r, self._block_w = os.pipe()
        for fd in (self._info_w, self._block_r):
            os.set_inheritable(fd, True)

    @property
    def child_fds(self) -> tuple[int, ...]:
        """What ``bwrap`` inherits: the info pipe's write end and the block pipe's read end."""
        return (self._info_w, self._block_r)

    def bwrap_options(self) -> list[str]:
        """``--info-fd`` (its child's PID) and ``--block-fd`` (hold the harness back)."""
        return ["--info-fd", str(self._info_w), "--block-fd", str(self._block_r)]

    def spawned(self) -> None:
        """Close the host's copies of the child's ends."""
        for attr in ("_info_w", "_block_r"):
            fd = getattr(self, attr)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, attr, -1)

    async def receive(self, timeout_s: float = 30.0) -> dict[int, socket.socket]:
        """Bind the listeners inside the sandbox, then let the harness start."""
        info = await _read_all(self._info_r, timeout_s, b"}")
        try:
            pid = int(json.loads(info)["child-pid"])
        except (ValueError, KeyError, TypeError):
            raise SandboxSetupFailed(
                "the sandbox did not start (bubblewrap reported no child)"
            ) from None
        socks = _listen_in(pid, self.ports)
        self.sockets = dict(zip(self.ports, socks, strict=True))
        os.write(self._block_w, b"go")  # the harness starts now; its ports already listen
        os.close(self._block_w)
        self._block_w = -1
        return dict(self.sockets)

    async def close(self) -> None:
        """Stop the relays, close the pipes and the sockets no server took over."""
        await super().close()
        for attr in ("_info_r", "_info_w", "_block_r", "_block_w"):
            fd = getattr(self, attr, -1)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, attr, -1)


class _Pipe(asyncio.Protocol):
    """One direction of a relayed connection: what arrives here is written to ``peer``.

    With backpressure both ways: while ``peer``'s write buffer is over its high-water
    mark, the side that fills it is not read (``pause_writing`` on the peer's protocol
    pauses this side's reading). Before, a relay read whatever one side sent as fast as
    it came and held it for the other: a harness that stopped reading a download, or a
    host service that stopped reading an upload, grew the host's memory without bound.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: asyncio.Transport | None = None
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self.pending.append(data)
        else:
            self.peer.write(data)

    def pause_writing(self) -> None:
        # our transport's buffer is full: stop reading what fills it
        if self.peer is not None:
            self.peer.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.resume_reading()

    def eof_received(self) -> bool | None:
        if self.peer is not None and self.peer.can_write_eof():
            self.peer.write_eof()
        return True

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.peer is not None:
            self.peer.close()


class _Inbound(_Pipe):
    """A connection accepted from the sandbox; it opens its twin to the host's loopback."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port
        self.connecting: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.pause_reading()  # nothing is read before there is somewhere to put it
        self.connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.transport is not None
        try:
            out_transport, out = await loop.create_connection(_Pipe, "127.0.0.1", self.port)
        except OSError:
            self.transport.close()
            return
        if self.transport.is_closing():  # the sandbox's side went away meanwhile
            out_transport.close()
            return
        out.peer = self.transport
        self.peer = out_transport
        for chunk in self.pending:
            out_transport.write(chunk)
        self.pending.clear()
        self.transport.resume_reading()


async def relay_to_loopback(sock: socket.socket, port: int) -> asyncio.AbstractServer:
    """Serve ``sock`` (a sandbox listener) by relaying each connection to the host's ``port``."""
    loop = asyncio.get_running_loop()
    quiet_accept_failures()
    # out of descriptors, asyncio's accept loop would spin and log a traceback per try
    return await loop.create_server(lambda: _Inbound(port), sock=PacedListener.of(sock))
