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
