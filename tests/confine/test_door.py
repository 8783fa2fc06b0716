"""The stdio door: how many bridges it runs.

A confined harness reaches its stdio bridge through the door
(``sharedos.confine.door.StdioDoor``): the real connector (``inside.py
connect SOCKET``, what the harness launches as its MCP server) hands its
stdio to the door, which runs the bridge command on it and answers with its
exit status. Here that command is a tiny stand-in that exits at once; the
door, the connector and the supervisor are the real ones.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.confine.door import StdioDoor
from tests.timing import bound

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux door")

INSIDE = str(Path(__file__).parents[2] / "sharedos" / "confine" / "inside.py")


def _launch_mcp_server(door: StdioDoor) -> int:
    """What the harness does to start its MCP server: run the connector; its exit status."""
    proc = subprocess.run(
        [sys.executable, "-I", "-S", INSIDE, "connect", str(door.path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=bound(60),
        check=False,
    )
    return proc.returncode


def test_the_door_caps_bridges_at_once_not_bridges_per_turn() -> None:
    """The cap is on bridges running at once: a harness that starts its MCP server again
    after the last one exited (a reconnect, a sub-agent) gets one every time. The count
    used never to go down, so the fifth server of a turn was refused."""
    door = StdioDoor(["/bin/sh", "-c", "exit 7"], env={"PATH": "/usr/bin:/bin"}, max_sessions=2)
    try:
        statuses = [_launch_mcp_server(door) for _ in range(6)]
    finally:
        door.close()
    assert statuses == [7] * 6


class _FailingOnce:
    """The door's real listening socket, whose next ``accept`` fails once (EMFILE: the
    host out of file descriptors for a moment)."""

    def __init__(self, sock: object) -> None:
        self._sock = sock
        self.failed = False

    def accept(self) -> object:
        if not self.failed:
            self.failed = True
            self._sock.accept()[0].close()  # type: ignore[attr-defined]
            raise OSError(24, "Too many open files")
        return self._sock.accept()  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._sock, name)


def test_a_failed_accept_does_not_shut_the_door_for_the_turn() -> None:
    """One failed accept used to end the door's accept loop: every MCP server the harness
    started afterwards got no bridge. The next connector is served."""
    door = StdioDoor(["/bin/sh", "-c", "exit 7"], env={"PATH": "/usr/bin:/bin"}, max_sessions=2)
    failing = _FailingOnce(door._listener)
    door._listener = failing  # type: ignore[assignment]
    try:
        first = _launch_mcp_server(door)  # its connection is the one the accept lost
        statuses = [_launch_mcp_server(door) for _ in range(2)]
    finally:
        door.close()
    assert failing.failed
    assert first != 7  # that connector got no bridge
    assert statuses == [7, 7]
