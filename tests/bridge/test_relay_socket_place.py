"""Escape: a confined upstream whose root is the temporary directory reaches a turn's relay socket.

A relayed stdio turn keeps its turn file, open marker and relay socket in a
private directory under ``$TMPDIR/sharedos-UID`` (``private_base``), which
every sandbox masks. A Unix socket's path is limited to 107 bytes, and when
the relay's path there was longer (a ``TMPDIR`` of some 40 to 60 characters,
short enough for the door's socket, which is shorter), the socket was put in a
fresh ``sos-*`` directory *directly* in the temporary directory instead. An
upstream given that directory as a root (a scratch-space server, ``roots =
[{ path = "$TMPDIR", mode = "rw" }]``) saw it there and could move it aside
and listen in its place: the stdio bridge would then send it the turn's relay
secret and take its answers for the kernel's — calls never decided, never
recorded. The socket must stay under the private base whatever its length.

A real relayed turn and a real upstream process in its real sandbox.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.relay_client import RelayChannel
from sharedos.bridge.turnfile import StdioLaunch, read_turn_file
from sharedos.confine import find_bubblewrap, sockets
from sharedos.confine.door import STDIO_PREFIX, private_base
from sharedos.harness.hostconfig import parse_host_config
from sharedos.kernel.context import AccessContext
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide
from tests.bridge.conftest import OPEN_POLICY, Runtime
from tests.scratch_upstream import scratch_upstream

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox"),
]

FIND = r"""
import glob, socket, sys
for path in glob.glob(sys.argv[1] + "/**/relay.sock", recursive=True):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        print("UPSTREAM reached", path)
    except OSError as exc:
        print("UPSTREAM refused", path, exc)
"""


async def test_a_long_temporary_directory_keeps_the_relay_socket_private(
    runtime: Runtime, alice: AccessContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_bubblewrap()
    # a temporary directory of 50 characters: the door's socket path fits in 107 bytes,
    # the relay's (two directories deeper) does not
    tmp = tempfile.mkdtemp(prefix="sdt-" + "x" * (50 - len("/tmp/sdt-") - 8), dir="/tmp")
    assert len(tmp) == 50, tmp
    monkeypatch.setattr(tempfile, "tempdir", tmp)
    # shown as any other directory would be: a root holding the temporary directory is
    # refused outright now (sharedos.confine.sockets), and this is the line behind that
    kept = sockets.socket_dirs
    monkeypatch.setattr(sockets, "socket_dirs", lambda: tuple(d for d in kept() if d != tmp))
    try:
        host = parse_host_config(
            f'[upstream.scratch]\ncommand = "/usr/bin/python3"\n'
            f'roots = [{{ path = "{tmp}", mode = "rw" }}]\n',
            str(Path(tmp) / "host.toml"),
        )
        placement = decide(host.upstream["scratch"], UpstreamConfinementPolicy(required=True))
        assert placement.wrap is not None, placement.refusal
        directory = Path(tempfile.mkdtemp(prefix=STDIO_PREFIX, dir=private_base()))
        launch = StdioLaunch(directory=directory)
        async with open_turn(
            runtime.host, alice, OPEN_POLICY, transport="stdio", stdio=launch
        ) as turn:
            assert turn.turn_file is not None
            spec = read_turn_file(turn.turn_file)
            assert spec.relay is not None
            assert spec.relay.socket.exists()
            command, args = placement.wrap("/usr/bin/python3", ["-c", FIND, tmp])
            proc = subprocess.run(
                [command, *args], capture_output=True, text=True, timeout=60, check=False
            )
            assert proc.returncode == 0, proc.stderr
            assert "UPSTREAM" not in proc.stdout, proc.stdout
            assert str(spec.relay.socket).startswith(str(private_base()) + "/"), spec.relay
            # and the bridge process still reaches it there, past the 107 bytes of sun_path
            assert len(os.fsencode(spec.relay.socket)) > 107
            async with RelayChannel.connect(spec.relay.socket, spec.relay.secret) as channel:
                assert channel.hello.get("ok") is True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        assert not os.path.exists(tmp)


SECRET = r"""
import glob, sys
for path in glob.glob(sys.argv[1] + "/**/sharedos-turn-*/turn.json", recursive=True):
    print("UPSTREAM read", path, open(path).read()[:80])
"""


async def test_a_stdio_turn_with_no_directory_keeps_its_turn_file_private(
    runtime: Runtime, alice: AccessContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``StdioLaunch()`` with no ``directory`` (``BridgeHost``, an embedder) made the turn's
    directory — its turn file with the relay's secret, the open marker, the socket —
    directly in the temporary directory: a confined upstream with that directory as a
    root read the secret. It is made under the private base now."""
    tmp, wrap = scratch_upstream(tmp_path, monkeypatch)
    async with open_turn(runtime.host, alice, OPEN_POLICY, transport="stdio") as turn:
        assert turn.turn_file is not None and turn.turn_file.exists()
        command, args = wrap("/usr/bin/python3", ["-c", SECRET, str(tmp)])
        proc = subprocess.run(
            [command, *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, proc.stderr
        assert "UPSTREAM" not in proc.stdout, proc.stdout
        assert str(turn.turn_file).startswith(str(private_base()) + "/"), turn.turn_file
