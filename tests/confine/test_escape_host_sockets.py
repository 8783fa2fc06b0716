"""Escape: a host service's Unix socket in a path shown to a sandbox serves it as the host user.

A read-only bind does not stop ``connect()``, and a sandbox runs as SharedOS's uid
mapped: a service listening on a socket inside a ``[confinement] readonly`` path or an
upstream's root (tmux, an ssh-agent, an X server, docker) served the sandbox as the host
user. Measured with a real tmux server before the fix: a confined harness ran ``tmux -S
SOCKET run-shell 'id > FILE'`` and ``FILE`` said ``uid=0(root)`` on the host. Here the
service is a listener of the test's own, counting who connects; the probe is ``python``
in the real harness sandbox launched by the real runtime, and a real upstream sandbox
(``decide`` → ``wrap`` → ``bwrap``). A path that holds such a socket, or a directory
where the host's services make theirs (the temporary directory, ``/run``), is refused.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sharedos.confine.sandbox import sandbox_python
from sharedos.confine.sockets import refuse_host_sockets
from sharedos.conformance.environment import build_environment
from sharedos.conformance.manifest import load_manifest
from sharedos.errors import ConfinementError
from sharedos.harness.hostconfig import HostConfigError, parse_host_config
from sharedos.harness.runtime import McpHarnessRuntime
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide
from tests.confine.probe import CountingListener, probe_host, run_probe_turn

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

CONNECT = """
import _socket, sys
s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
    print("PROBE connected")
except OSError as exc:
    print("PROBE refused", exc)
"""


class Service(CountingListener):
    """A host service listening on a Unix socket, counting the connections it accepts."""

    def __init__(self, path: Path, *, linked: bool = False) -> None:
        """``linked``: bound as OpenSSH's ControlMaster is, to ``PATH.RANDOM``, then ``PATH``
        linked to it and the first name unlinked (the kernel's list names the first)."""
        self.path = path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bound = path.with_name(path.name + ".mPdWyZ8vq3x1TfKe") if linked else path
        sock.bind(str(bound))
        sock.listen(8)  # before the link: the renamed socket is already a listener
        if linked:
            os.link(bound, path)
            os.unlink(bound)
        super().__init__(sock)


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[Path, Service]]:
    """A directory the operator shows, holding a host service's socket and the probe."""
    where = tmp_path / "shared"
    where.mkdir()
    (where / "connect.py").write_text(CONNECT, encoding="utf-8")
    service = Service(where / "svc.sock")
    try:
        yield where, service
    finally:
        service.close()


def test_a_confined_harness_is_not_shown_a_host_services_socket(
    tmp_path: Path, shared: tuple[Path, Service]
) -> None:
    where, service = shared
    python, _prefix = sandbox_python()
    host = probe_host(tmp_path, where, f"{python} -I -S {where}/connect.py {service.path}")
    env = build_environment(load_manifest(), tmp_path / "env", name="probe")
    runtime = McpHarnessRuntime(host.get("probe"), host, environ=dict(os.environ))
    try:
        with pytest.raises(ConfinementError) as refused:
            result = run_probe_turn(runtime, env, "sockets", workdir=tmp_path / "turns")
            print(result.process.stdout)  # before: "PROBE connected"
    finally:
        env.close()
    assert f"holds the Unix socket {service.path}" in str(refused.value)
    assert service.accepted == 0


def test_a_confined_upstream_is_not_shown_a_host_services_socket(
    tmp_path: Path, shared: tuple[Path, Service]
) -> None:
    where, service = shared
    text = (
        f'[upstream.scratch]\ncommand = "/usr/bin/python3"\n'
        f'roots = [{{ path = "{where}", mode = "ro" }}]\n'
    )
    with pytest.raises(HostConfigError) as checked:  # `sharedos host check` says it
        parse_host_config(text, str(tmp_path / "host.toml"))
    assert f"it holds the Unix socket {service.path}" in str(checked.value)
    # a socket made after the host file was checked: the sandbox's plan refuses it
    service.close()
    service.path.unlink()
    host = parse_host_config(text, str(tmp_path / "host.toml"))
    service = Service(service.path)
    try:
        policy = UpstreamConfinementPolicy(required=True, managed=())
        try:
            placement = decide(host.upstream["scratch"], policy)
        except ConfinementError as exc:
            assert f"holds the Unix socket {service.path}" in str(exc)
        else:
            assert placement.wrap is None, "planned a sandbox showing the socket"
            assert placement.refusal is not None and "Unix socket" in placement.refusal
        assert service.accepted == 0
    finally:
        service.close()


@pytest.mark.parametrize("shown", ["/tmp", "/run", "/"])
def test_a_directory_where_host_services_make_sockets_is_not_shown(shown: str) -> None:
    """Sockets come and go there (tmux's /tmp/tmux-UID, ssh-agent's /tmp/ssh-*, X11's
    /tmp/.X11-unix, docker's /run/docker.sock): checking the ones there now is not enough."""
    with pytest.raises(ConfinementError) as refused:
        refuse_host_sockets([shown], what="a [confinement] readonly path")
    assert "where the host's services make their Unix sockets" in str(refused.value)


def test_a_root_holding_the_temporary_directory_is_refused_by_host_check(tmp_path: Path) -> None:
    host = tmp_path / "host.toml"
    host.write_text(
        '[upstream.scratch]\ncommand = "/usr/bin/python3"\n'
        'roots = [{ path = "/tmp", mode = "rw" }]\n',
        encoding="utf-8",
    )
    sharedos = str(Path(sys.executable).parent / "sharedos")
    checked = subprocess.run(
        [sharedos, "host", "check", str(host)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode != 0
    assert "upstream.scratch.roots: entry 1 (/tmp): it holds /tmp, where the host's" in (
        checked.stderr
    ), checked.stderr


def test_a_script_in_a_socket_directory_does_not_show_that_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The program's installation is shown too, found from the command: a script argument
    directly in ``$XDG_RUNTIME_DIR`` (or ``/dev/shm``, ``/run``) had the whole directory
    shown as its own, the session's D-Bus, gpg-agent and every other socket there with it.
    Before: ``PROBE connected``, the service accepted the upstream."""
    runtime_dir = tmp_path / "run-user"
    runtime_dir.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime_dir))
    script = runtime_dir / "tap.py"
    script.write_text(CONNECT, encoding="utf-8")
    data = tmp_path / "data"
    data.mkdir()
    service = Service(runtime_dir / "bus")
    try:
        host = parse_host_config(
            f'[upstream.tap]\ncommand = "/usr/bin/python3"\nargs = ["{script}"]\n'
            f'roots = [{{ path = "{data}", mode = "ro" }}]\n',
            str(tmp_path / "host.toml"),
        )
        placement = decide(host.upstream["tap"], UpstreamConfinementPolicy(required=True))
        assert placement.wrap is not None, placement.refusal
        command, args = placement.wrap("/usr/bin/python3", [str(script), str(service.path)])
        proc = subprocess.run(
            [command, *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert "PROBE connected" not in proc.stdout
        assert service.accepted == 0
    finally:
        service.close()


@pytest.mark.parametrize("where", ["/run", "/dev/shm", "/"])
def test_no_view_shows_a_directory_where_host_services_make_sockets(where: str) -> None:
    """However a path comes into a view (a program's installation, a venv's home, a tools
    directory), one holding ``/run`` or the like is refused when the view is built."""
    from sharedos.confine.view import ViewBuilder

    if not os.path.isdir(where):
        pytest.skip(f"no {where} here")
    with pytest.raises(ConfinementError) as refused:
        ViewBuilder().system().readonly(where).build()
    assert "where the host's services make their Unix sockets" in str(refused.value)


@pytest.mark.parametrize(
    ("folder", "linked"),
    [("ssh", False), ("ssh", True), ("ssh\nmux", False), ("ssh\x0cmux", False)],
    ids=["bound", "linked-as-openssh-does", "line-break-in-its-path", "form-feed-in-its-path"],
)
def test_a_socket_past_the_walk_limit_is_still_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str, linked: bool
) -> None:
    """The walk looks at ``WALK_LIMIT`` entries (20,000: a home's ``.cache`` alone has more):
    a listening socket past them, ``~/.ssh``'s ControlMaster one, was shown to a confined
    upstream with its root. Before: ``PROBE connected``, the service accepted it.

    ``linked``: OpenSSH binds the ControlMaster socket to ``PATH.RANDOM``, links ``PATH``
    and unlinks the first (``link mux listener``), so the kernel's list names a path that
    is gone, and ``connect(PATH)`` reaches the listener all the same. Before: host check
    said ok, and the confined upstream connected.

    A line break (or a form feed) in the socket's path: the kernel's list writes it as
    it is, and each line was read as a record. Before: host check said ok."""
    import sharedos.confine.sockets as sockets

    # the walk stops at the home's own two entries, whichever order the directory lists
    # them in (with more, the walk found the socket first when it listed the ssh folder
    # first: the test said nothing of the kernel's list then)
    monkeypatch.setattr(sockets, "WALK_LIMIT", 2)
    root = tmp_path / "home"
    (root / "cache").mkdir(parents=True)
    for i in range(60):
        (root / "cache" / f"f{i}").touch()
    (root / folder).mkdir()
    script = tmp_path / "tap.py"
    script.write_text(CONNECT, encoding="utf-8")
    text = (
        f'[upstream.tap]\ncommand = "/usr/bin/python3"\nargs = ["{script}"]\n'
        f'roots = [{{ path = "{root}", mode = "ro" }}]\n'
    )
    host = parse_host_config(text, str(tmp_path / "host.toml"))  # no socket there yet
    service = Service(root / folder / "cm.sock", linked=linked)
    try:
        with pytest.raises(HostConfigError) as checked:  # `sharedos host check` says it
            parse_host_config(text, str(tmp_path / "host.toml"))
        said = str(checked.value)  # a control character is written escaped (\x0a)
        assert f"it holds the Unix socket {root}/ssh" in said and "/cm.sock: " in said
        placement = decide(host.upstream["tap"], UpstreamConfinementPolicy(required=True))
        if placement.wrap is not None:
            command, args = placement.wrap("/usr/bin/python3", [str(script), str(service.path)])
            proc = subprocess.run(
                [command, *args], capture_output=True, text=True, timeout=60, check=False
            )
            assert "PROBE connected" not in proc.stdout
        else:
            assert placement.refusal is not None and str(service.path) in placement.refusal
        assert service.accepted == 0
    finally:
        service.close()


def test_a_readonly_path_inside_the_workdir_is_looked_in(tmp_path: Path) -> None:
    """The workdir (which keeps every turn's directory) is private: a readonly path holding
    it shows only this turn's own there, so the walk does not look in it. But a readonly
    path *inside* it is shown as it is, and the walk skipped its directories all the same.
    Before: ``PROBE connected``, the service accepted the confined harness."""
    workdir = tmp_path / "turns"
    where = workdir / "shared"
    (where / "sub").mkdir(parents=True)
    (where / "connect.py").write_text(CONNECT, encoding="utf-8")
    service = Service(where / "sub" / "svc.sock")
    python, _prefix = sandbox_python()
    host = probe_host(tmp_path, where, f"{python} -I -S {where}/connect.py {service.path}")
    env = build_environment(load_manifest(), tmp_path / "env", name="probe")
    runtime = McpHarnessRuntime(host.get("probe"), host, environ=dict(os.environ))
    try:
        with pytest.raises(ConfinementError) as refused:
            result = run_probe_turn(runtime, env, "inside", workdir=workdir)
            print(result.process.stdout)  # before: "PROBE connected"
    finally:
        env.close()
        service.close()
    assert f"holds the Unix socket {service.path}" in str(refused.value)
    assert service.accepted == 0


def test_a_programs_installation_holding_a_listening_socket_is_not_shown(
    tmp_path: Path,
) -> None:
    """The installation found from the command (``PREFIX`` of ``PREFIX/bin/tap.py``) is
    shown as the program's own, and was never looked in: an application's control socket
    beside it (``PREFIX/run/app.sock``, a supervisord's) served the confined upstream.
    Before: ``PROBE connected``, the service accepted it."""
    app = tmp_path / "app"
    (app / "bin").mkdir(parents=True)
    (app / "run").mkdir()
    script = app / "bin" / "tap.py"
    script.write_text(CONNECT, encoding="utf-8")
    data = tmp_path / "data"
    data.mkdir()
    service = Service(app / "run" / "app.sock")
    try:
        host = parse_host_config(
            f'[upstream.tap]\ncommand = "/usr/bin/python3"\nargs = ["{script}"]\n'
            f'roots = [{{ path = "{data}", mode = "ro" }}]\n',
            str(tmp_path / "host.toml"),
        )
        try:
            placement = decide(host.upstream["tap"], UpstreamConfinementPolicy(required=True))
        except ConfinementError as exc:
            assert f"holds the Unix socket {service.path}" in str(exc)
        else:
            if placement.wrap is not None:
                command, args = placement.wrap("/usr/bin/python3", [str(script), str(service.path)])
                proc = subprocess.run(
                    [command, *args], capture_output=True, text=True, timeout=60, check=False
                )
                assert "PROBE connected" not in proc.stdout
            else:
                assert placement.refusal is not None
                assert str(service.path) in placement.refusal
        assert service.accepted == 0
    finally:
        service.close()


def test_host_check_says_a_readonly_path_holding_the_hosts_sockets(tmp_path: Path) -> None:
    """A ``[confinement] readonly`` path, or an upstream's ``readonly`` path, that holds the
    temporary directory refuses every confined turn (exit 5) or leaves the upstream's tools
    out. Before: ``sharedos host check`` said ``ok`` (only an upstream's roots were looked
    at), and ``sharedos run`` was the first to say it."""
    host = tmp_path / "host.toml"
    host.write_text(
        '[confinement]\nreadonly = ["/tmp"]\n\n'
        '[upstream.scratch]\ncommand = "/usr/bin/python3"\n'
        f'roots = [{{ path = "{tmp_path}", mode = "ro" }}]\nreadonly = ["/run"]\n',
        encoding="utf-8",
    )
    sharedos = str(Path(sys.executable).parent / "sharedos")
    checked = subprocess.run(
        [sharedos, "host", "check", str(host)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode != 0, checked.stdout
    assert "confinement.readonly: entry 1 (/tmp): cannot be used: it holds /tmp" in (
        checked.stderr
    ), checked.stderr
    assert "upstream.scratch.readonly: entry 1 (/run): cannot be used: it holds /run" in (
        checked.stderr
    ), checked.stderr
