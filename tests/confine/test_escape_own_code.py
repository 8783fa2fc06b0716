"""Escape: a confined upstream rewrites SharedOS's own code, which the host runs next.

An upstream whose read-write root holds SharedOS's installation (a checkout
installed in editable mode, the virtualenv, the site-packages of its
dependencies) could change the kernel that decides its calls: every later
`sharedos run` would import the upstream's code, unconfined. The host now
refuses such an upstream, whatever the run policy, and still lets one see the
installation read-only (an upstream run by the same virtualenv must).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import sharedos
from sharedos.confine import ConfinementUnavailable, find_bubblewrap
from sharedos.harness.hostconfig import parse_host_config
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

INSTALL = Path(sharedos.__file__).resolve().parent.parent  # the checkout, or site-packages


def _placement(tmp_path: Path, mode: str, root: Path) -> object:
    host = parse_host_config(
        f'[upstream.fs]\ncommand = "{sys.executable}"\n'
        f'roots = [{{ path = "{root}", mode = "{mode}" }}]\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )
    return decide(host.upstream["fs"], UpstreamConfinementPolicy(required=False, managed=()))


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    try:
        find_bubblewrap()
    except ConfinementUnavailable as exc:
        pytest.skip(str(exc))


def test_an_upstream_cannot_be_given_sharedos_code_to_write(tmp_path: Path) -> None:
    placement = _placement(tmp_path, "rw", INSTALL)
    assert placement.wrap is None  # type: ignore[attr-defined]
    refusal = placement.refusal  # type: ignore[attr-defined]
    assert refusal is not None and "own installation" in refusal, refusal
    assert str(INSTALL) in refusal


def test_an_upstream_may_read_sharedos_code(tmp_path: Path) -> None:
    placement = _placement(tmp_path, "ro", INSTALL)
    assert placement.refusal is None  # type: ignore[attr-defined]
    assert placement.wrap is not None  # type: ignore[attr-defined]
