"""Escape: a confined upstream plants code in a directory the host's Python imports from.

A files root holding a ``sys.path`` directory (``PYTHONPATH=src`` under it, the user's
site-packages under a home) is refused (``tools.files.root_holds_code``): a permitted
``files.write`` of ``sitecustomize.py`` there ran as the host at its next start. A
confined stdio upstream's read-write root holding one was shown read-write all the same:
what the upstream wrote there (``sitecustomize.py``, a ``.pth`` file, a module named like
one SharedOS imports) ran as the host at its next start, outside every sandbox. Every
upstream sandbox now refuses a read-write root holding one (``plan_upstream``); a root
inside one is served, as a files root inside one is.

The upstream is a real process in its real sandbox (``broker.placement`` → ``wrap`` →
``bwrap``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.confine import ConfinementUnavailable, find_bubblewrap
from sharedos.harness.hostconfig import parse_host_config
from sharedos.upstream.broker import UpstreamBroker
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, UpstreamPlacement

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

PLANTED = "print('PLANTED: code a sandboxed upstream wrote')\n"


def _placement(tmp_path: Path, root: Path) -> UpstreamPlacement:
    host = parse_host_config(
        f'[upstream.projfs]\ncommand = "/bin/sh"\nroots = [{{ path = "{root}", mode = "rw" }}]\n',
        str(tmp_path / "host.toml"),
    )
    broker = UpstreamBroker(
        host.upstream, environ={}, confinement=UpstreamConfinementPolicy(required=True)
    )
    return broker.placement(host.upstream["projfs"])


def test_an_upstream_cannot_write_a_directory_the_host_imports_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        find_bubblewrap()
    except ConfinementUnavailable as exc:
        pytest.skip(str(exc))
    project = tmp_path / "project"
    src = project / "src"
    src.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [*sys.path, str(src)])  # PYTHONPATH=src
    placement = _placement(tmp_path, project)
    planted = src / "sitecustomize.py"
    wrap = placement.wrap
    if wrap is not None:  # placed: what its calls may do to the host's import path
        command, args = wrap("/bin/sh", ["-c", f'printf %s "$1" > {planted}', "sh", PLANTED])
        subprocess.run([command, *args], capture_output=True, timeout=60, check=False)
    assert not planted.exists(), "the upstream wrote a module the host's Python imports"
    refusal = placement.refusal
    assert wrap is None and refusal is not None
    assert str(src) in refusal and "imports from" in refusal


def test_an_upstream_root_inside_an_import_directory_is_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        find_bubblewrap()
    except ConfinementUnavailable as exc:
        pytest.skip(str(exc))
    site = tmp_path / "site"
    data = site / "data"
    data.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    placement = _placement(tmp_path, data)
    assert placement.refusal is None
