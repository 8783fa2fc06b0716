"""A confined upstream whose root is the temporary directory (refused by the host file's
checker since the host's services make their sockets there; here let through): what a
hostile upstream with that root could reach of the state SharedOS keeps under the
temporary directory."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from sharedos.confine import find_bubblewrap, sockets
from sharedos.harness.hostconfig import parse_host_config
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide


def scratch_upstream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any]:
    """``(tmp, wrap)``: a fresh directory made this process's temporary directory, and the
    sandbox wrap (``placement.wrap(command, args)``) of an upstream ``scratch`` confined
    with that directory as its one root, read-write. Needs bubblewrap."""
    find_bubblewrap()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    # A root holding the temporary directory is refused outright now (the host's services
    # make their sockets there: sharedos.confine.sockets); what SharedOS keeps there must
    # stay out of reach even so, so this test's temporary directory is shown as any other
    # directory would be (defence in depth, not the first line).
    kept = sockets.socket_dirs
    monkeypatch.setattr(sockets, "socket_dirs", lambda: tuple(d for d in kept() if d != str(tmp)))
    host = parse_host_config(
        f'[upstream.scratch]\ncommand = "/usr/bin/python3"\n'
        f'roots = [{{ path = "{tmp}", mode = "rw" }}]\n',
        str(tmp_path / "host.toml"),
    )
    placement = decide(host.upstream["scratch"], UpstreamConfinementPolicy(required=True))
    assert placement.wrap is not None, placement.refusal
    return tmp, placement.wrap
