"""Escape: a confined harness that may read the temporary directory reaches another turn's door.

Each confined stdio turn has a door (``StdioDoor``): a Unix socket in a 0700
directory under ``$TMPDIR/sharedos-UID`` (``private_base``); who connects
hands over three descriptors and the door starts *that* turn's stdio bridge
on the host — its principal, its run policy. Only its own harness is meant
to reach it (bound at ``/run/sharedos/door``). An operator's ``[confinement]
readonly`` path that holds the temporary directory (here ``/tmp`` itself)
showed ``private_base`` to the harness — every other turn's door included
(a read-only bind does not stop ``connect``). ``private_base`` is a managed
path of every upstream sandbox; it must be one of the harness's too. The
other turn's door runs a marker program standing in for its bridge; the
probe is ``bash``/``python`` in the real harness sandbox, launched by the
real runtime.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from sharedos.confine.door import StdioDoor
from sharedos.confine.sandbox import sandbox_python
from sharedos.conformance.environment import build_environment
from sharedos.conformance.manifest import load_manifest
from sharedos.errors import ConfinementError
from sharedos.harness.runtime import McpHarnessRuntime
from tests.confine.probe import probe_host, run_probe_turn

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

CONNECT = r"""
import array, glob, socket, sys
for path in glob.glob(sys.argv[1] + "/sharedos-*/sharedos-door-*/stdio.sock"):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        s.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
        print("PROBE door answered:", s.recv(100))
    except OSError as exc:
        print("PROBE refused:", exc)
"""


def test_a_confined_harness_cannot_reach_another_turns_door(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the host's temporary directory, apart from this test's evidence store and rules
    # (short: a Unix socket's path is limited to 107 bytes)
    tmp = tempfile.mkdtemp(prefix="sdt-")
    monkeypatch.setattr(tempfile, "tempdir", tmp)
    marker = tmp_path / "other-turn-bridge-ran"
    other = StdioDoor(["/bin/sh", "-c", f"touch {marker}"], env={"PATH": "/usr/bin:/bin"})
    python, _prefix = sandbox_python()
    probe = Path(tmp) / "connect.py"  # where the sandbox can read it
    probe.write_text(CONNECT, encoding="utf-8")
    host = probe_host(tmp_path, tmp, f"{python} -I -S {probe} {tmp}")
    env = build_environment(load_manifest(), tmp_path / "env", name="probe")
    runtime = McpHarnessRuntime(host.get("probe"), host, environ=dict(os.environ))
    try:
        try:
            result = run_probe_turn(runtime, env, "door", workdir=tmp_path / "turns")
        except ConfinementError as exc:  # refusing the view is as good as hiding the doors
            # (the temporary directory is where the host's services make their sockets:
            # a path holding it is not shown at all)
            assert "sharedos-" in str(exc) or "make their Unix sockets" in str(exc), exc
        else:
            assert result.identity.confinement is not None
            assert result.identity.confinement.state.value == "confined"
            assert "door answered" not in result.process.stdout, result.process.stdout
    finally:
        other.close()
        env.close()
        shutil.rmtree(tmp, ignore_errors=True)
    assert not marker.exists(), "another turn's door started its bridge for this harness"
