"""A confined upstream whose root is the temporary directory (docs/upstreams.md's ``/tmp``
scratch-server example): what a hostile upstream with that root can reach of the state
SharedOS keeps under the temporary directory."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from sharedos.confine import find_bubblewrap
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
    host = parse_host_config(
        f'[upstream.scratch]\ncommand = "/usr/bin/python3"\n'
        f'roots = [{{ path = "{tmp}", mode = "rw" }}]\n',
        str(tmp_path / "host.toml"),
    )
    placement = decide(host.upstream["scratch"], UpstreamConfinementPolicy(required=True))
    assert placement.wrap is not None, placement.refusal
    return tmp, placement.wrap
