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


def test_an_upstream_cannot_write_where_an_unconfined_upstream_imports_from(
    tmp_path: Path,
) -> None:
    """An unconfined ``python -m server`` imports from its working directory first (and
    from its ``env``'s ``PYTHONPATH``): a confined upstream's read-write root holding it
    planted ``server/__main__.py``, and the unconfined one ran it at its next start, as
    the host. Such a root is refused; one inside the directory is served."""
    try:
        find_bubblewrap()
    except ConfinementUnavailable as exc:
        pytest.skip(str(exc))
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    lib = tmp_path / "lib"
    lib.mkdir()

    def placement(root: Path) -> UpstreamPlacement:
        host = parse_host_config(
            f'[upstream.projfs]\ncommand = "/bin/sh"\n'
            f'roots = [{{ path = "{root}", mode = "rw" }}]\n'
            f'[upstream.tool]\ncommand = "python3"\nargs = ["-m", "server"]\ncwd = "{project}"\n'
            f'[upstream.tool.env]\nPYTHONPATH = "{lib}"\n',
            str(tmp_path / "host.toml"),
        )
        broker = UpstreamBroker(
            host.upstream, environ={}, confinement=UpstreamConfinementPolicy(required=True)
        )
        return broker.placement(host.upstream["projfs"])

    planted = project / "server" / "__main__.py"
    for root, kept in ((project, project), (tmp_path, lib)):
        held = placement(root)
        if held.wrap is not None:  # placed: what its calls may do to the other's imports
            command, args = held.wrap("/bin/sh", ["-c", f"mkdir -p {planted.parent}"])
            subprocess.run([command, *args], capture_output=True, timeout=60, check=False)
        assert not planted.parent.exists(), "the upstream wrote where another imports from"
        assert held.wrap is None and held.refusal is not None, root
        assert str(kept) in held.refusal and "python -m" in held.refusal
    assert placement(project / "data").refusal is None
