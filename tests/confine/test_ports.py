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
