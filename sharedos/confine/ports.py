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
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence

from sharedos.errors import SharedOSError

#: ``serve(sock)``: start accepting connections on a listening socket from the sandbox
ServeFn = Callable[[socket.socket], Awaitable[None]]


class SandboxSetupFailed(SharedOSError, RuntimeError):
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
        self._host.close()
        with contextlib.suppress(OSError):
            self._child.close()


class _Pipe(asyncio.Protocol):
    """One direction of a relayed connection: what arrives here is written to ``peer``."""

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
        self.connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.transport is not None
        try:
            out_transport, out = await loop.create_connection(_Pipe, "127.0.0.1", self.port)
        except OSError:
            self.transport.close()
            return
        out.peer = self.transport
        self.peer = out_transport
        for chunk in self.pending:
            out_transport.write(chunk)
        self.pending.clear()


async def relay_to_loopback(sock: socket.socket, port: int) -> asyncio.AbstractServer:
    """Serve ``sock`` (a sandbox listener) by relaying each connection to the host's ``port``."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _Inbound(port), sock=sock)
