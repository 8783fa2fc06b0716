"""Escape: a sandbox that shares the host's network reaches the host's abstract Unix sockets.

An abstract Unix socket (``\\0name``) has no file: it belongs to the network namespace.
A sandbox with its own network (``loopback``, ``none``) has its own set; one that shares
the host's (a harness with ``network = "host"``, an upstream with ``network = true``)
reached every socket a host process listens on — a session bus, a display, any local
service — none of which the kernel decides on. Here a listener the test starts on the
host is the canary: the real sandboxes connected to it. Now each is started in a
Landlock domain scoped to abstract sockets (``launch.py --scope-abstract``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.confine import find_bubblewrap
from sharedos.confine.launch import landlock_version
from sharedos.confine.sandbox import HarnessSandbox
from sharedos.confine.upstream import plan_upstream

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox"),
    pytest.mark.skipif(landlock_version() < 6, reason="needs Landlock ABI 6"),
]

CONNECT = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "try:\n"
    "    s.connect('\\0' + sys.argv[1])\n"
    "except OSError as exc:\n"
    "    print('refused', exc.errno)\n"
    "else:\n"
    "    print('CONNECTED')\n"
)


@pytest.fixture
def canary() -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(f"\0sharedos-canary-{os.getpid()}-{id(listener)}")
    listener.listen(4)
    yield listener
    listener.close()


def _python() -> str:
    return os.path.realpath(sys.executable)


def test_an_upstream_with_the_hosts_network_cannot_reach_an_abstract_socket(
    canary: socket.socket, tmp_path: Path
) -> None:
    sandbox = plan_upstream(find_bubblewrap(), command=_python(), roots=[], network=True)
    command, args = sandbox.wrap(_python(), ["-I", "-c", CONNECT, canary.getsockname()[1:]])
    done = subprocess.run([command, *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "refused" in done.stdout and "CONNECTED" not in done.stdout


def test_a_harness_with_the_hosts_network_cannot_reach_an_abstract_socket(
    canary: socket.socket, tmp_path: Path
) -> None:
    turn = tmp_path / "turn"
    turn.mkdir()
    sandbox = HarnessSandbox.plan(
        find_bubblewrap(), readonly=[], writable=[turn], managed=[], network="host"
    )
    try:
        argv = sandbox.argv(
            [sandbox.python, "-I", "-c", CONNECT, canary.getsockname()[1:]], cwd=turn
        )
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=30, pass_fds=sandbox.pass_fds
        )
    finally:
        sandbox.spawned()
    assert done.returncode == 0, done.stderr
    assert "refused" in done.stdout and "CONNECTED" not in done.stdout


@pytest.mark.parametrize("abi", [5, 7])
def test_the_record_says_when_the_kernel_cannot_close_the_hosts_abstract_sockets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, abi: int
) -> None:
    """On a kernel without Landlock ABI 6 (Linux before 6.12) a sandbox sharing the host's
    network reaches the host's abstract sockets: the run went on, and neither its record
    nor its report said so. (This kernel has ABI 7: the version the probe reports is
    replaced, the only way to see the older kernel's record here.)"""
    import sharedos.confine.launch as launch

    monkeypatch.setattr(launch, "landlock_version", lambda: abi)
    turn = tmp_path / "turn"
    turn.mkdir()
    harness = HarnessSandbox.plan(
        find_bubblewrap(), readonly=[], writable=[turn], managed=[], network="host"
    )
    upstream = plan_upstream(find_bubblewrap(), command=_python(), roots=[], network=True)
    walled = plan_upstream(find_bubblewrap(), command=_python(), roots=[])
    said = "the host's abstract Unix sockets are reachable"
    if abi < 6:
        assert said in (harness.record().note or "") and said in harness.record().label()
        assert said in upstream.describe()
    else:
        assert harness.record().note is None and said not in upstream.describe()
    assert said not in walled.describe()  # no host network: nothing shared to say
