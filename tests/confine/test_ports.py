"""The sandbox's loopback handoff (``sharedos.confine.ports``) on a busy host.

bubblewrap reports its child's PID (``--info-fd``) as soon as the network
namespace exists, while the child is still bringing ``lo`` up; a bind made in
that moment met EADDRNOTAVAIL and a whole conformance column read "the harness
cannot be confined" (seen once in a full ``make test`` at load 3). The moment
cannot be produced on demand, so the kernel's answer is played by a socket
whose first binds meet it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import struct
import subprocess
import sys

import anyio
import pytest

from sharedos.confine import ports
from sharedos.confine.ports import _bind_when_up
from tests.descriptors import assert_paced, exhaust_descriptors, needs_proc_fd
from tests.timing import bound


class LoopbackComingUp(socket.socket):
    """A real socket whose first ``refusals`` binds meet ``error`` (a loopback not up yet)."""

    def __init__(self, refusals: int, error: int = errno.EADDRNOTAVAIL) -> None:
        super().__init__(socket.AF_INET, socket.SOCK_STREAM)
        self.refusals, self.error, self.tries = refusals, error, 0

    def bind(self, address: object) -> None:
        self.tries += 1
        if self.tries <= self.refusals:
            raise OSError(self.error, "Cannot assign requested address")
        super().bind(address)  # type: ignore[arg-type]


def test_a_bind_waits_for_the_loopback_to_come_up() -> None:
    with LoopbackComingUp(refusals=5) as sock:
        _bind_when_up(sock, 0)
        assert sock.getsockname()[0] == "127.0.0.1"
        assert sock.tries == 6


def test_another_error_is_not_waited_for() -> None:
    with LoopbackComingUp(refusals=5, error=errno.EADDRINUSE) as sock:
        with pytest.raises(OSError) as caught:
            _bind_when_up(sock, 0)
        assert caught.value.errno == errno.EADDRINUSE
        assert sock.tries == 1


def test_a_loopback_that_never_comes_up_fails_after_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ports, "_LOOPBACK_UP_S", 0.05)
    with LoopbackComingUp(refusals=10**9) as sock:
        with pytest.raises(OSError) as caught:
            _bind_when_up(sock, 0)
        assert caught.value.errno == errno.EADDRNOTAVAIL
        assert sock.tries > 1


_ECHO_SERVER = """
import socket, threading
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
def echo(conn):
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)
while True:
    threading.Thread(target=echo, args=(server.accept()[0],), daemon=True).start()
"""


@pytest.mark.anyio
@needs_proc_fd
async def test_a_relay_out_of_descriptors_says_so_in_one_line_and_relays_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The sandbox's loopback relays are asyncio servers too: out of descriptors, asyncio's
    accept loop retried ``accept()`` up to the backlog per tick, logging a traceback each
    time (the exhaustion hunt saw it on the turn's HTTP listener and noted this one).
    Now a relay pauses once a second, says so in one line, and relays again after."""
    caplog.set_level(logging.INFO)
    # the host's port, served by another process: its own descriptors never run out here
    target = subprocess.Popen(
        [sys.executable, "-c", _ECHO_SERVER], stdout=subprocess.PIPE, text=True
    )
    assert target.stdout is not None
    target_port = int(target.stdout.readline())
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(100)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    loop = asyncio.get_running_loop()
    runner_handler = loop.get_exception_handler()
    loop.set_exception_handler(None)  # asyncio's own handler, as a host's loop has
    relay = await ports.relay_to_loopback(listener, target_port)
    try:
        await exhaust_descriptors(port, 80, caplog)
        with anyio.fail_after(bound(30)):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"ping\n")
            assert await reader.readline() == b"ping\n"
            writer.close()
    finally:
        relay.close()
        target.kill()
        target.wait()
        await anyio.sleep(1.5)  # a retry asyncio scheduled meanwhile meets a closed listener
        loop.set_exception_handler(runner_handler)
    assert_paced(caplog)


#: what one side sends to a peer that never reads it (far beyond any socket buffers)
_FLOOD_BYTES = 64 * 1024 * 1024


def _send_until_stalled(sock: socket.socket, sent: list[int]) -> None:
    """Send up to ``_FLOOD_BYTES`` on ``sock``, stopping once a send waits half a second."""
    sock.settimeout(0.5)  # a relay with backpressure stops taking bytes: the send stalls
    chunk = b"x" * 65536
    try:
        while sent[0] < _FLOOD_BYTES:
            sent[0] += sock.send(chunk)
    except OSError:  # the stall (TimeoutError), or the relay closed
        pass


@pytest.mark.anyio
@pytest.mark.parametrize("sender", ["host service", "harness"])
async def test_a_relay_holds_no_more_than_its_buffers_for_a_peer_that_stops_reading(
    sender: str,
) -> None:
    """A relay read one side as fast as it sent and held everything for the other side:
    a harness that stopped reading a download from an allowed host port (or a host
    service that stopped reading an upload) grew the host's memory by all of it (64 MiB
    here, without end in general). Now the relay stops reading the side that fills the
    other's buffer, so the sender stalls after a few MiB of socket buffers."""
    target = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    harness = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    for end in (harness, target):  # whichever never reads: a small receive buffer
        end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    target.bind(("127.0.0.1", 0))
    target.listen(1)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    address = listener.getsockname()  # the relay takes the listener over
    relay = await ports.relay_to_loopback(listener, target.getsockname()[1])
    sent = [0]
    accepted: socket.socket | None = None
    try:
        harness.setblocking(False)
        await asyncio.get_running_loop().sock_connect(harness, address)
        accepted, _ = await anyio.to_thread.run_sync(target.accept)
        harness.setblocking(True)
        source = accepted if sender == "host service" else harness
        await anyio.to_thread.run_sync(_send_until_stalled, source, sent)
    finally:
        relay.close()
        for sock in (harness, target, accepted):
            if sock is not None:
                sock.close()
    assert sent[0] < _FLOOD_BYTES // 4, f"the relay took {sent[0] / 2**20:.1f} MiB"


@pytest.mark.anyio
async def test_a_relay_closes_its_twin_of_a_connection_reset_before_it_connected() -> None:
    """A harness connection reset at once (before the relay had connected its twin to the
    host's port) left that twin open for good: the host service never saw an end, and the
    relay held a descriptor per such connection. Now the twin is closed too."""
    target = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    target.bind(("127.0.0.1", 0))
    target.listen(8)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    address = listener.getsockname()  # the relay takes the listener over
    relay = await ports.relay_to_loopback(listener, target.getsockname()[1])
    loop = asyncio.get_running_loop()
    twins: list[socket.socket] = []
    try:
        for _ in range(3):
            harness = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            harness.setblocking(False)
            await loop.sock_connect(harness, address)
            harness.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            harness.close()  # a reset, right away
        target.settimeout(bound(5))
        for _ in range(3):
            twin, _ = await anyio.to_thread.run_sync(target.accept)
            twins.append(twin)
            twin.settimeout(bound(5))
            # the relay closes its twin: an end of stream, not a wait that times out
            assert await anyio.to_thread.run_sync(twin.recv, 16) == b""
    finally:
        relay.close()
        for sock in (target, *twins):
            sock.close()
