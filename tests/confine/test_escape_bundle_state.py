"""Escape: a confined upstream rewrites the host's bundle anti-rollback state.

``[policy] state`` is where a host remembers the last bundle release it
enforced, so that a restart cannot be rolled back to an older (wider) policy
(``sharedos.bundles.state``). It is SharedOS's own state: no sandbox may show
it. Here a stdio upstream declares a read-write root that contains that file
(a filesystem server over a directory the operator also keeps state in): the
host's list of its state paths (``HostConfig.state_paths``, what ``sharedos
run`` gives the upstream sandboxes as managed) must name it, so the upstream is
refused or the file hidden. The upstream is a real process in the real
sandbox (``decide`` → ``UpstreamSandbox.wrap`` → ``bwrap``); it removes the
file, which an operator documents as "go back to an older release".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.harness.hostconfig import parse_host_config
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")


def test_a_confined_upstream_cannot_touch_the_bundle_state(tmp_path: Path) -> None:
    share = tmp_path / "share"
    (share / "docs").mkdir(parents=True)
    (share / ".sharedos").mkdir()
    state = share / ".sharedos" / "bundle-state.json"
    state.write_text(json.dumps({"sequence": 42, "revision": "r42"}), encoding="utf-8")
    (tmp_path / "bundle").mkdir()
    host = parse_host_config(
        f'[policy]\nbundle = "{tmp_path / "bundle"}"\nstate = "{state}"\n\n'
        f'[upstream.fs]\ncommand = "/bin/sh"\n'
        f'roots = [{{ path = "{share}", mode = "rw" }}]\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )
    managed = host.state_paths()
    placement = decide(
        host.upstream["fs"], UpstreamConfinementPolicy(required=True, managed=tuple(managed))
    )
    if placement.wrap is not None:  # it runs confined: it must not reach the state
        command, args = placement.wrap("/bin/sh", ["-c", f'cat "{state}"; rm -f "{state}"'])
        proc = subprocess.run(
            [command, *args], capture_output=True, text=True, timeout=30, check=False
        )
        assert "sequence" not in proc.stdout, "the upstream read the anti-rollback state"
    assert state.exists(), "a confined upstream removed the host's anti-rollback state"
    assert json.loads(state.read_text())["sequence"] == 42


def test_a_confined_upstream_cannot_move_the_state_away_and_plant_its_own(
    tmp_path: Path,
) -> None:
    # The state file itself is masked (``/dev/null`` over it: not readable, not removable),
    # but its directory is a plain directory of the read-write root: the upstream renames
    # that directory (the mask goes with it) and writes a release of its choosing at the
    # path the host reads its anti-rollback state from.
    share = tmp_path / "share"
    (share / ".sharedos").mkdir(parents=True)
    state = share / ".sharedos" / "bundle-state.json"
    state.write_text(json.dumps({"sequence": 42, "revision": "r42"}), encoding="utf-8")
    (tmp_path / "bundle").mkdir()
    host = parse_host_config(
        f'[policy]\nbundle = "{tmp_path / "bundle"}"\nstate = "{state}"\n\n'
        f'[upstream.fs]\ncommand = "/bin/sh"\n'
        f'roots = [{{ path = "{share}", mode = "rw" }}]\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )
    placement = decide(
        host.upstream["fs"],
        UpstreamConfinementPolicy(required=True, managed=tuple(host.state_paths())),
    )
    if placement.wrap is not None:  # it runs confined: it must not replace the state
        swap = (
            f'mv "{state.parent}" "{share / "moved"}" && mkdir "{state.parent}" && '
            f'echo \'{{"sequence": 1, "revision": "r1"}}\' > "{state}"'
        )
        command, args = placement.wrap("/bin/sh", ["-c", swap])
        subprocess.run([command, *args], capture_output=True, text=True, timeout=30, check=False)
    else:
        assert placement.refusal is not None and "rename" in placement.refusal
    assert json.loads(state.read_text())["sequence"] == 42, "the upstream planted its own state"


def test_a_confined_upstream_cannot_rewrite_a_state_the_host_replaced(tmp_path: Path) -> None:
    # The state file lies directly in the read-write root: masked (``/dev/null`` over it),
    # its mount point can be neither removed nor renamed. But the host replaces the file
    # when it enforces a newer release (another run on this host, say: the state is one
    # file per bundle source), by renaming a new file over it — which takes the mask off
    # in every sandbox. The upstream then reads the new state and writes an older one.
    from sharedos.bundles.state import BundleState, Enforced

    share = tmp_path / "share"
    share.mkdir()
    state = share / "bundle-state.json"
    older = Enforced(sequence=42, revision="r42", bundle_hash="sha256:aa", origin="o")
    BundleState(state).save(older)
    (tmp_path / "bundle").mkdir()
    host = parse_host_config(
        f'[policy]\nbundle = "{tmp_path / "bundle"}"\nstate = "{state}"\n\n'
        f'[upstream.fs]\ncommand = "/bin/sh"\n'
        f'roots = [{{ path = "{share}", mode = "rw" }}]\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )
    placement = decide(
        host.upstream["fs"],
        UpstreamConfinementPolicy(required=True, managed=tuple(host.state_paths())),
    )
    newer = Enforced(sequence=43, revision="r43", bundle_hash="sha256:bb", origin="o")
    if placement.wrap is None:
        assert placement.refusal is not None
        BundleState(state).save(newer)
    else:  # it runs confined: wait until the state can be read, then roll it back
        rollback = (
            "echo ready; i=0; while [ $i -lt 100 ]; do "
            f'if grep -q sequence "{state}" 2>/dev/null; then '
            f'echo \'{{"sequence": 1, "revision": "r1", "bundle_hash": "x", '
            f'"origin": "o"}}\' > "{state}"; echo rolled; break; fi; '
            "sleep 0.05; i=$((i+1)); done"
        )
        command, args = placement.wrap("/bin/sh", ["-c", rollback])
        proc = subprocess.Popen([command, *args], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        BundleState(state).save(newer)  # the host enforces r43
        proc.communicate(timeout=30)
    loaded = BundleState(state).load()
    assert loaded is not None and loaded.sequence == 43, "the upstream rolled the state back"
