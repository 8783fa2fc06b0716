"""Escape: a confined upstream reaches the harness's stdio door in the host's temp directory.

A confined stdio harness reaches its bridge through the door (``StdioDoor``):
a Unix socket in a 0700 directory under the host's temporary directory; who
connects hands over three descriptors and the door starts the turn's stdio
bridge *on the host*, for that turn. The door is meant for the harness only.
An upstream confined by SharedOS with a declared read-write root that holds
the host's temporary directory (a scratch-space server: ``roots = [{ path =
"/tmp", mode = "rw" }]``, accepted by the host file's checker) sees that
socket, and, running as the mapped owner, can connect to it. Here the door's
command is a marker program standing in for the bridge; the upstream is a
real process in its real sandbox (``decide`` → ``wrap`` → ``bwrap``).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sharedos.confine.door import StdioDoor
from sharedos.harness.hostconfig import HostConfigError, parse_host_config
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

CONNECT = r"""
import array, glob, socket
for path in glob.glob(TMP + "/sharedos-door-*/stdio.sock"):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        s.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
        print("UPSTREAM door answered:", s.recv(100))
    except OSError as exc:
        print("UPSTREAM refused:", exc)
"""


def test_a_confined_upstream_cannot_reach_a_turns_stdio_door(tmp_path: Path) -> None:
    marker = tmp_path / "door-ran"
    door = StdioDoor(["/bin/sh", "-c", f"touch {marker}"], env={"PATH": "/usr/bin:/bin"})
    tmp = tempfile.gettempdir()
    try:
        try:
            host = parse_host_config(
                f'[upstream.scratch]\ncommand = "/usr/bin/python3"\n'
                f'roots = [{{ path = "{tmp}", mode = "rw" }}]\n',
                str(tmp_path / "host.toml"),
            )
        except HostConfigError as exc:  # refused outright: it is where sockets are made
            assert "make their Unix sockets" in str(exc), exc
            return
        placement = decide(
            host.upstream["scratch"], UpstreamConfinementPolicy(required=True, managed=())
        )
        if placement.wrap is not None:  # it runs confined: the door must stay out of its reach
            command, args = placement.wrap("/usr/bin/python3", ["-c", f"TMP = {tmp!r}\n" + CONNECT])
            proc = subprocess.run(
                [command, *args], capture_output=True, text=True, timeout=30, check=False
            )
            assert "door answered" not in proc.stdout, proc.stdout
        assert not marker.exists(), "the door started its command for a confined upstream"
    finally:
        door.close()
