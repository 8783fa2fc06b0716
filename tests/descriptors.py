"""Test support: a process out of file descriptors while a listener of its own is flooded.

Both asyncio listeners SharedOS serves (the turn's HTTP bridge, the sandbox's
loopback relays) are tested the same way: this process's descriptor limit is
lowered to a few above what it holds, another process opens many connections
to the listener, and the listener must say so in one line about once a second
(``sharedos.compat.asyncio_accept``), not a traceback per ``accept()``.
"""

from __future__ import annotations

import gc
import os
import resource
import subprocess
import sys

import anyio
import pytest

from tests.timing import bound

__all__ = ["accept_failures", "assert_paced", "exhaust_descriptors", "needs_proc_fd"]

_TCP_FLOOD = """
import resource, socket, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(int(sys.argv[2]))]
print("connected", flush=True)
sys.stdin.read()
"""

#: skip where descriptors cannot be counted
needs_proc_fd = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc"
)


def accept_failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What was logged about accepting connections."""
    return [r.getMessage() for r in caplog.records if "accept" in r.getMessage()]


async def exhaust_descriptors(
    port: int, connections: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Hold this process out of descriptors while ``connections`` connections wait at
    ``port``, until a listener has said it cannot accept and 2.5 s more (asyncio retries
    every second meanwhile); the limit and the connections are released on return."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    gc.collect()
    used = len(os.listdir("/proc/self/fd"))
    flood: subprocess.Popen[str] | None = None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (used + 16, hard))
        flood = subprocess.Popen(
            [sys.executable, "-c", _TCP_FLOOD, str(port), str(connections)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert flood.stdout is not None
        assert flood.stdout.readline().strip() == "connected"
        with anyio.fail_after(bound(30)):
            while not accept_failures(caplog):
                await anyio.sleep(0.05)
        await anyio.sleep(2.5)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        if flood is not None:
            flood.communicate("")


def assert_paced(caplog: pytest.LogCaptureFixture) -> None:
    """No traceback was logged, and the listener said it could not accept in about one
    line a second, each naming the cause."""
    assert [r.getMessage() for r in caplog.records if r.exc_info or r.exc_text] == []
    said = accept_failures(caplog)
    assert 1 <= len(said) <= 20, len(said)  # about one a second, not thousands
    assert all("\n" not in line and "Too many open files" in line for line in said), said[:3]
