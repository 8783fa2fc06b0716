"""Escape: a confined upstream replaces the symbolic link by which the host reaches its state.

The host keeps its own state (the host file and its pins, keys, the bundle and
its anti-rollback state, the evidence store) out of every sandbox: the paths
are *managed*, masked or refused. A managed path is checked as its real file
(``canonical``), but the host opens it by the path it was given — here a host
file ``share/host.toml`` that is a link to ``/…/config/host.toml``. An
upstream with a read-write root over ``share`` cannot see the real file, but
the link itself is a plain entry of its root: it removed the link and wrote a
host file of its own there, which the host loads on its next run (its keys,
its upstreams, its evidence store). The upstream is a real process in its real
sandbox (``decide`` → ``wrap`` → ``bwrap``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.harness.hostconfig import load_host_config
from sharedos.upstream.pins import pin_path_for
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")


def test_a_confined_upstream_cannot_replace_a_linked_host_file(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    share = tmp_path / "share"
    share.mkdir()
    real = config / "host.toml"
    real.write_text(
        f'[upstream.fs]\ncommand = "/bin/sh"\nroots = [{{ path = "{share}", mode = "rw" }}]\n',
        encoding="utf-8",
    )
    original = real.read_text(encoding="utf-8")
    given = share / "host.toml"
    given.symlink_to(real)
    host = load_host_config(given)  # what `sharedos run --host share/host.toml` loads
    # the pin file `sharedos run` reads is the one beside the path it was given
    assert str(pin_path_for(given)) in host.state_paths()
    placement = decide(
        host.upstream["fs"],
        UpstreamConfinementPolicy(required=True, managed=tuple(host.state_paths())),
    )
    if placement.wrap is not None:  # it runs confined: it must not change what the host loads
        forge = f'rm -f "{given}"; echo "[harness.evil]" > "{given}"'
        command, args = placement.wrap("/bin/sh", ["-c", forge])
        subprocess.run([command, *args], capture_output=True, text=True, timeout=30, check=False)
    else:
        assert placement.refusal is not None and "symbolic link" in placement.refusal
    assert given.read_text(encoding="utf-8") == original, "the upstream replaced the host file"
