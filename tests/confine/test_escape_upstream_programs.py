"""Escape: one confined upstream rewrites another upstream's program, which runs next.

Each stdio upstream's sandbox shows its own program read-only (its script, its
installation: ``sharedos.confine.programs``), and its roots. An upstream whose
read-write root held *another* upstream's program (a home-directory file server,
``roots = [{ path = "/home/alice", mode = "rw" }]``, beside a server installed
under that home) was given that program to write: what it put there ran as the
other upstream at its next start — in that upstream's sandbox, with its roots, its
network, and the credentials of whichever principal's session started it, none of
which the kernel decided on. The harness CLIs and unconfined upstreams were kept
read-only already (``tests/confine/test_escape_harness_tools.py``); every stdio
upstream's program now is, in every upstream sandbox the broker places.

The upstreams are real processes in their real sandboxes (``broker.placement`` →
``wrap`` → ``bwrap``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.confine import ConfinementUnavailable, find_bubblewrap
from sharedos.harness.hostconfig import parse_host_config
from sharedos.upstream.broker import UpstreamBroker
from sharedos.upstream.sandbox import UpstreamConfinementPolicy

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

SERVER = "print('the github server, as installed')\n"
PLANTED = "print('PLANTED: code the home file server wrote')\n"


def test_an_upstream_cannot_rewrite_another_upstreams_program(tmp_path: Path) -> None:
    try:
        find_bubblewrap()
    except ConfinementUnavailable as exc:
        pytest.skip(str(exc))
    home = tmp_path / "home"
    (home / "servers" / "github").mkdir(parents=True)
    script = home / "servers" / "github" / "server.py"
    script.write_text(SERVER, encoding="utf-8")
    host = parse_host_config(
        f"[upstream.github]\ncommand = {sys.executable!r}\nargs = [{str(script)!r}]\n"
        "roots = []\nnetwork = true\n"
        f'[upstream.homefs]\ncommand = "/bin/sh"\nroots = [{{ path = "{home}", mode = "rw" }}]\n',
        str(tmp_path / "host.toml"),
    )
    broker = UpstreamBroker(
        host.upstream, environ={}, confinement=UpstreamConfinementPolicy(required=True)
    )
    homefs = broker.placement(host.upstream["homefs"])
    if homefs.wrap is not None:  # placed: what its calls may do to the other's program
        command, args = homefs.wrap("/bin/sh", ["-c", f'printf %s "$1" > {script}', "sh", PLANTED])
        subprocess.run([command, *args], capture_output=True, timeout=60, check=False)
    github = broker.placement(host.upstream["github"])
    assert github.wrap is not None, github.refusal
    command, args = github.wrap(sys.executable, [str(script)])
    ran = subprocess.run([command, *args], capture_output=True, text=True, timeout=60)
    assert "PLANTED" not in ran.stdout, "the github upstream ran what the files upstream wrote"
    assert script.read_text(encoding="utf-8") == SERVER
    # the home file server is left out, and says why
    assert homefs.wrap is None and homefs.refusal is not None
    assert str(script.parent) in homefs.refusal and "writable" in homefs.refusal


def test_an_upstream_cannot_plant_a_program_earlier_on_path(tmp_path: Path) -> None:
    """``command = "python3"`` (or ``node``, ``npx``, ``uvx``: the usual way to name an MCP
    server) is looked up on ``PATH``, at plan time by the host and at start by the sandbox.
    A directory searched before the one it is found in (``~/.local/bin``, first on many
    ``PATH``s) lay in the home file server's ``rw`` root: what it planted there under that
    name was what the other upstream found, showed and ran at its next start."""
    try:
        find_bubblewrap()
    except ConfinementUnavailable as exc:
        pytest.skip(str(exc))
    home = tmp_path / "home"
    early = home / ".local" / "bin"  # not there yet: the file server may make it
    home.mkdir()
    path_env = f"{early}:/usr/bin:/bin"
    host = parse_host_config(
        '[upstream.github]\ncommand = "python3"\nroots = []\nnetwork = true\n'
        f'[upstream.homefs]\ncommand = "/bin/sh"\nroots = [{{ path = "{home}", mode = "rw" }}]\n',
        str(tmp_path / "host.toml"),
    )
    policy = UpstreamConfinementPolicy(required=True)
    broker = UpstreamBroker(host.upstream, environ={"PATH": path_env}, confinement=policy)
    homefs = broker.placement(host.upstream["homefs"])
    if homefs.wrap is not None:
        plant = f'mkdir -p "{early}" && printf "#!/bin/sh\\necho PLANTED\\n" > "{early}/python3"'
        command, args = homefs.wrap("/bin/sh", ["-c", plant + f' && chmod 755 "{early}/python3"'])
        subprocess.run([command, *args], capture_output=True, timeout=60, check=False)
    # the next run: a new broker places the github upstream, which starts
    later = UpstreamBroker(host.upstream, environ={"PATH": path_env}, confinement=policy)
    github = later.placement(host.upstream["github"])
    assert github.wrap is not None, github.refusal
    command, args = github.wrap("python3", ["-c", "print('the real python')"])
    ran = subprocess.run(
        [command, *args], capture_output=True, text=True, timeout=60, env={"PATH": path_env}
    )
    assert "PLANTED" not in ran.stdout, "the github upstream ran what the file server planted"
    assert not (early / "python3").exists()
    assert homefs.wrap is None and homefs.refusal is not None and str(early) in homefs.refusal


def test_an_upstream_cannot_write_the_repository_an_unconfined_git_upstream_uses(
    tmp_path: Path,
) -> None:
    """``mcp-server-git --repository REPO`` declared without roots runs git in REPO as the
    host. A confined upstream with a ``rw`` root holding REPO could set ``core.fsmonitor``
    in ``REPO/.git/config`` (or plant a hook): the git server's next ``git_status`` ran it,
    outside every sandbox. The repository's git directory is code the host runs."""
    try:
        find_bubblewrap()
    except ConfinementUnavailable as exc:
        pytest.skip(str(exc))
    from sharedos.cli.run import host_programs

    project = tmp_path / "project"
    repo = project / "repo"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    host = parse_host_config(
        f"[upstream.git]\ncommand = {sys.executable!r}\n"
        f"args = ['-m', 'mcp_server_git', '--repository', {str(repo)!r}]\n"
        f'[upstream.projfs]\ncommand = "/bin/sh"\nroots = [{{ path = "{project}", mode = "rw" }}]\n',
        str(tmp_path / "host.toml"),
    )
    policy = UpstreamConfinementPolicy(required=True, never_writable=host_programs(None, host))
    broker = UpstreamBroker(host.upstream, environ={}, confinement=policy)
    projfs = broker.placement(host.upstream["projfs"])
    config = repo / ".git" / "config"
    before = config.read_text(encoding="utf-8")
    if projfs.wrap is not None:  # placed: what its calls may do to the repository
        planted = f"printf '[core]\\n\\tfsmonitor = /bin/false\\n' >> {config}"
        command, args = projfs.wrap("/bin/sh", ["-c", planted])
        subprocess.run([command, *args], capture_output=True, timeout=60, check=False)
    assert config.read_text(encoding="utf-8") == before, "the upstream rewrote .git/config"
    assert projfs.wrap is None and projfs.refusal is not None
    # the refusal names the repository's work tree (git enters any repository made in it)
    assert str(repo) in projfs.refusal and "writable" in projfs.refusal
