"""Escape: a root replaced by a symbolic link after it was checked shows what the link leads to.

Two stdio upstreams share a tree: ``fs`` serves ``share`` read-write, ``pub`` serves
``share/public`` read-only. The host file's checker saw no link on the way to either
root, and each upstream's sandbox is planned once (its placement is kept for the
broker's life, and every later session of it starts from that plan). ``fs`` — a real
process in its real sandbox — moves ``public`` away and puts a link to a directory of
the host in its place. ``bwrap --ro-bind PATH PATH`` follows links when it starts: the
next session of ``pub`` showed the host directory's files at ``share/public``; and an
upstream planned after the swap had the link recreated and its target bound.

Now every bound path reaches ``bwrap`` as a descriptor opened without following a link
(``sharedos/confine/launch.py``), and a root reached through a link is refused at plan.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sharedos.confine import find_bubblewrap
from sharedos.confine.sandbox import HarnessSandbox
from sharedos.confine.upstream import plan_upstream
from sharedos.errors import ConfinementError
from sharedos.harness.hostconfig import parse_host_config
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, UpstreamPlacement, decide

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

SECRET = "host-only-secret-3f9d1c"


def _tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    share = tmp_path / "share"
    public = share / "public"
    public.mkdir(parents=True)
    (public / "notes.txt").write_text("public notes\n", encoding="utf-8")
    hidden = tmp_path / "host-keys"
    hidden.mkdir()
    (hidden / "notes.txt").write_text(SECRET + "\n", encoding="utf-8")
    return share, public, hidden


def _placements(tmp_path: Path, share: Path, public: Path) -> Callable[[str], UpstreamPlacement]:
    """The host file, read once; each upstream is placed when first used (as the broker does)."""
    host = parse_host_config(
        f'[upstream.fs]\ncommand = "/bin/sh"\nroots = [{{ path = "{share}", mode = "rw" }}]\n\n'
        f'[upstream.pub]\ncommand = "/bin/cat"\nroots = [{{ path = "{public}", mode = "ro" }}]\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )
    policy = UpstreamConfinementPolicy(required=True, managed=tuple(host.state_paths()))
    return lambda name: decide(host.upstream[name], policy)


def _swap(fs: UpstreamPlacement, public: Path, hidden: Path) -> None:
    """``fs``, in its own sandbox, replaces ``public`` by a link to ``hidden``."""
    assert fs.wrap is not None
    command, args = fs.wrap(
        "/bin/sh", ["-c", f'mv "{public}" "{public}.old" && ln -s "{hidden}" "{public}"']
    )
    done = subprocess.run([command, *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert public.is_symlink()


def _read(placement: UpstreamPlacement, public: Path) -> subprocess.CompletedProcess[str]:
    assert placement.wrap is not None
    command, args = placement.wrap("/bin/cat", [str(public / "notes.txt")])
    return subprocess.run([command, *args], capture_output=True, text=True, timeout=30)


def test_a_root_replaced_by_a_link_after_the_plan_is_not_followed_at_the_next_start(
    tmp_path: Path,
) -> None:
    share, public, hidden = _tree(tmp_path)
    place = _placements(tmp_path, share, public)
    fs, pub = place("fs"), place("pub")
    first = _read(pub, public)
    assert first.returncode == 0 and "public notes" in first.stdout, first.stderr
    _swap(fs, public, hidden)
    again = _read(pub, public)
    assert SECRET not in again.stdout + again.stderr
    assert again.returncode != 0
    assert "symbolic link" in again.stderr


def test_a_root_replaced_by_a_link_before_the_plan_is_refused(tmp_path: Path) -> None:
    share, public, hidden = _tree(tmp_path)
    place = _placements(tmp_path, share, public)
    _swap(place("fs"), public, hidden)
    pub = place("pub")  # its first use comes after the swap
    assert pub.wrap is None
    assert pub.refusal is not None and "symbolic link" in pub.refusal


def test_a_harness_path_replaced_by_a_link_after_the_plan_is_not_followed(
    tmp_path: Path,
) -> None:
    shown = tmp_path / "shown"
    shown.mkdir()
    (shown / "notes.txt").write_text("public notes\n", encoding="utf-8")
    hidden = tmp_path / "host-keys"
    hidden.mkdir()
    (hidden / "notes.txt").write_text(SECRET + "\n", encoding="utf-8")
    turn = tmp_path / "turn"
    turn.mkdir()
    sandbox = HarnessSandbox.plan(
        find_bubblewrap(), readonly=[shown], writable=[turn], managed=[hidden], network="none"
    )
    shown.rename(tmp_path / "shown.old")
    shown.symlink_to(hidden)
    try:
        argv = sandbox.argv(["/bin/cat", str(shown / "notes.txt")], cwd=turn)
    except ConfinementError as exc:
        sandbox.spawned()
        assert "symbolic link" in str(exc)
        return
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=30, pass_fds=sandbox.pass_fds
        )
    finally:
        sandbox.spawned()
    assert SECRET not in done.stdout + done.stderr


def test_the_bound_descriptors_do_not_reach_the_sandboxed_program(tmp_path: Path) -> None:
    """bubblewrap closes each ``--bind-fd`` descriptor once mounted: one left open would be a
    handle on the host's tree outside every mount (``openat(fd, "..")``)."""
    root = tmp_path / "root"
    root.mkdir()
    sandbox = plan_upstream(find_bubblewrap(), command="/bin/ls", roots=[(str(root), "rw")])
    command, args = sandbox.wrap("/bin/ls", ["/proc/self/fd"])
    done = subprocess.run([command, *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    # 0-2, and the directory ls itself opened to list
    assert sorted(int(n) for n in done.stdout.split()) == [0, 1, 2, 3]
