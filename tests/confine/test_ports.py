"""The sandbox's loopback handoff (``sharedos.confine.ports``) on a busy host.

bubblewrap reports its child's PID (``--info-fd``) as soon as the network
namespace exists, while the child is still bringing ``lo`` up; a bind made in
that moment met EADDRNOTAVAIL and a whole conformance column read "the harness
cannot be confined" (seen once in a full ``make test`` at load 3). The moment
cannot be produced on demand, so the kernel's answer is played by a socket
whose first binds meet it.
"""

from __future__ import annotations

import errno
import socket

import pytest

from sharedos.confine import ports
from sharedos.confine.ports import _bind_when_up


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
