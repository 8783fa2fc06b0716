"""The sandbox view: what is shown, what is masked, what is refused, and its digest."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from sharedos.confine import ManagedRootVisible, ViewBuilder, bwrap_argv
from sharedos.confine.programs import program_paths
from sharedos.confine.view import canonical, symlink_chain


def test_a_managed_root_inside_a_visible_directory_is_masked(tmp_path: Path) -> None:
    shown = tmp_path / "shown"
    (shown / "secret").mkdir(parents=True)
    view = ViewBuilder().readonly(shown).build(managed=[shown / "secret"])
    assert view.masked == (str(shown / "secret"),)
    argv = bwrap_argv("bwrap", view, ["true"])
    # a directory gets an empty read-only tmpfs over it
    assert ["--tmpfs", str(shown / "secret"), "--remount-ro", str(shown / "secret")] == argv[
        argv.index(str(shown / "secret")) - 1 : argv.index(str(shown / "secret")) + 3
    ]
    # a file given as masked directly (not through ViewBuilder) gets /dev/null
    (shown / "evidence.sqlite").write_text("x")
    argv = bwrap_argv("bwrap", replace(view, masked=(str(shown / "evidence.sqlite"),)), ["true"])
    assert ["--ro-bind", "/dev/null", str(shown / "evidence.sqlite")] == argv[
        argv.index("/dev/null") - 1 : argv.index("/dev/null") + 2
    ]


def test_views_that_would_show_a_managed_root_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "managed"
    (root / "inside").mkdir(parents=True)
    # the view shows the managed root itself, or a directory inside it
    for shown in (root, root / "inside"):
        with pytest.raises(ManagedRootVisible, match="would be visible"):
            ViewBuilder().writable(shown).build(managed=[root])
    # a managed path that does not exist yet would appear once created: no mask possible
    with pytest.raises(ManagedRootVisible, match="does not exist yet"):
        ViewBuilder().readonly(tmp_path).build(managed=[tmp_path / "evidence.sqlite-wal"])
    # a managed root reached through a symbolic link is the same root
    link = tmp_path / "link"
    link.symlink_to(root)
    with pytest.raises(ManagedRootVisible):
        ViewBuilder().readonly(root / "inside").build(managed=[link])


def test_a_managed_root_a_sandbox_could_move_away_is_refused(tmp_path: Path) -> None:
    share = tmp_path / "share"
    (share / "keep" / "deeper").mkdir(parents=True)
    (share / "tokens").mkdir()
    (share / "keep" / "key.pem").write_text("x")
    (share / "keep" / "deeper" / "state.json").write_text("x")
    # directly in a read-write bind: the mask's own mount point cannot be moved or removed
    view = ViewBuilder().writable(share).build(managed=[share / "tokens"])
    assert view.masked == (str(share / "tokens"),)
    # one directory deeper: that directory can be renamed, the path planted again
    with pytest.raises(ManagedRootVisible, match="rename"):
        ViewBuilder().writable(share).build(managed=[share / "keep" / "key.pem"])
    # a read-only bind on the way does not help when a directory above it can move
    with pytest.raises(ManagedRootVisible, match="rename"):
        ViewBuilder().writable(share).readonly(share / "keep" / "deeper").build(
            managed=[share / "keep" / "deeper" / "state.json"]
        )
    # read-only all the way: masked, as before
    view = ViewBuilder().readonly(share).build(managed=[share / "keep" / "deeper"])
    assert view.masked == (str(share / "keep" / "deeper"),)


def test_a_managed_root_reached_through_a_replaceable_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "config" / "host.toml"
    real.parent.mkdir()
    real.write_text("x")
    share = tmp_path / "share"
    share.mkdir()
    (share / "host.toml").symlink_to(real)
    # the host opens share/host.toml: a sandbox that can write share could swap the link
    with pytest.raises(ManagedRootVisible, match="symbolic link"):
        ViewBuilder().writable(share).build(managed=[share / "host.toml"])
    # read-only, the link cannot change: the real file is not shown at all
    view = ViewBuilder().readonly(share).build(managed=[share / "host.toml"])
    assert view.masked == ()


def test_a_managed_file_in_a_visible_path_is_refused(tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    (share / "bundle-state.json").write_text("{}")
    # a new file the host renames over it would take the mask off in the sandbox:
    # readable and writable there
    with pytest.raises(ManagedRootVisible, match="read and rewrite"):
        ViewBuilder().writable(share).build(managed=[share / "bundle-state.json"])
    # readable, in a read-only path
    with pytest.raises(ManagedRootVisible, match="replaces it"):
        ViewBuilder().readonly(share).build(managed=[share / "bundle-state.json"])


def test_the_digest_names_the_view_not_the_turn(tmp_path: Path) -> None:
    def view(turn: Path, extra: Path | None = None) -> str:
        turn.mkdir(parents=True, exist_ok=True)
        b = ViewBuilder().system().writable(turn).placeholder(turn, "{turn}")
        if extra is not None:
            b.readonly(extra)
        return b.build(network="loopback", ports=[os.getpid() % 60000 + 1]).digest()

    one, two = view(tmp_path / "t1"), view(tmp_path / "t2")
    assert one == two and one.startswith("sha256:")
    assert view(tmp_path / "t3", extra=tmp_path / "t1") != one


def test_paths_through_symbolic_links_still_resolve(tmp_path: Path) -> None:
    real = tmp_path / "cache" / "tools"
    (real / "bin").mkdir(parents=True)
    (real / "bin" / "cli").write_text("#!/bin/sh\n")
    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout" / ".tools").symlink_to(real)
    called = tmp_path / "checkout" / ".tools" / "bin" / "cli"
    assert symlink_chain(str(called)) == [(str(tmp_path / "checkout" / ".tools"), str(real))]
    view = ViewBuilder().readonly(called).build()
    assert view.readonly == (canonical(called),)
    assert (str(tmp_path / "checkout" / ".tools"), str(real)) in view.symlinks


def test_a_program_brings_its_installation(tmp_path: Path) -> None:
    """A virtualenv's console script needs the venv and the Python it was made from."""
    import sys

    venv_python = Path(sys.executable)
    paths = program_paths(str(venv_python.parent / "mcp-server-git"))
    if not (venv_python.parent.parent / "pyvenv.cfg").exists():
        pytest.skip("the tests do not run from a virtualenv")
    assert str(venv_python.parent.parent) in paths
    assert canonical(sys.base_prefix) in paths


def test_a_directory_exists_in_the_sandbox_only_if_shown_or_on_the_way(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    view = ViewBuilder().readonly(deep).build()
    assert view.shows(str(deep / "x")) and view.shows(str(tmp_path / "a"))
    # the private /tmp is empty: a host directory under it is not there
    assert view.shows("/tmp") and not view.shows("/tmp/somewhere-else")
    assert not view.shows(str(tmp_path / "other"))


def test_sharedos_own_installation_is_never_writable(tmp_path: Path) -> None:
    install = tmp_path / "opt" / "sharedos"
    (install / ".venv").mkdir(parents=True)
    # read-only, a sandbox may run from it (an upstream in the same virtualenv)
    view = ViewBuilder().readonly(install).build(never_writable=[install])
    assert str(install.resolve()) in view.readonly
    # a read-write path holding it, it, or a path inside it: refused
    for rw in (tmp_path / "opt", install, install / ".venv"):
        with pytest.raises(ManagedRootVisible, match="own installation"):
            ViewBuilder().writable(rw).build(never_writable=[install])
    # beside it: fine
    (tmp_path / "data").mkdir()
    ViewBuilder().writable(tmp_path / "data").build(never_writable=[install])
