"""Escape: a confined upstream rewrites the pinned harness CLI, which the host runs unconfined.

The pinned harness CLIs (``.tools/node_modules`` → ``~/.cache/sharedos/tools/…``,
``.dsh``) are code the host runs itself: ``sharedos run`` reads the CLI's real
version with ``CLI --version`` on the host, outside any sandbox, before every
turn, strict runs included (``harness.tools.harness_version``). An upstream
whose read-write root held them (a home-directory file server, ``roots = [{
path = "/home/alice", mode = "rw" }]``, with SharedOS itself under ``/opt`` as
the docs advise) was given them to write: what it put there ran next as the
host, with every managed resource and the evidence store in reach. Like
SharedOS's own installation, they may be shown read-only, never writable.

The upstream is a real process in its real sandbox; the CLI is a stand-in
shell script at the pinned place (``SHAREDOS_TOOLS_DIR``), and the host's own
``harness_version`` runs it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.confine import find_bubblewrap
from sharedos.harness.hostconfig import parse_host_config
from sharedos.harness.paths import tools_dir
from sharedos.harness.tools import harness_version
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")


def test_a_confined_upstream_cannot_rewrite_the_pinned_harness_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_bubblewrap()
    home = tmp_path / "home"
    pinned = home / ".cache" / "sharedos" / "tools" / "0123abcd" / "node_modules"
    cli = pinned / ".bin" / "claude"
    cli.parent.mkdir(parents=True)
    cli.write_text("#!/bin/sh\necho '2.1.332 (Claude Code)'\n", encoding="utf-8")
    cli.chmod(0o755)
    monkeypatch.setenv("SHAREDOS_TOOLS_DIR", str(pinned))
    assert tools_dir() == pinned
    marker = tmp_path / "ran-on-the-host"
    host = parse_host_config(
        f'[upstream.homefs]\ncommand = "/usr/bin/python3"\n'
        f'roots = [{{ path = "{home}", mode = "rw" }}]\n',
        str(tmp_path / "host.toml"),
    )
    placement = decide(host.upstream["homefs"], UpstreamConfinementPolicy(required=True))
    if placement.wrap is None:  # refused: as good as keeping the CLI out of its reach
        assert str(pinned.resolve()) in str(placement.refusal), placement.refusal
    else:
        payload = f"#!/bin/sh\ntouch {marker}\necho '2.1.332 (Claude Code)'\n"
        rewrite = (
            "import os, sys\n"
            "path = sys.argv[1]\n"
            "tmp = path + '.new'\n"
            "open(tmp, 'w').write(sys.argv[2])\n"
            "os.chmod(tmp, 0o755)\n"
            "os.replace(tmp, path)\n"
        )
        command, args = placement.wrap("/usr/bin/python3", ["-c", rewrite, str(cli), payload])
        subprocess.run([command, *args], capture_output=True, text=True, timeout=60, check=False)
    harness_version((str(cli),), "claude-code")
    assert not marker.exists(), "code an upstream wrote ran on the host, unconfined"


def test_a_confined_upstream_cannot_rewrite_the_harness_cli_the_host_file_names(
    tmp_path: Path,
) -> None:
    """The same for a CLI the host file names (``command = ["/srv/cli/bin/claude"]``): what
    ``sharedos run`` asks of upstream sandboxes (``host_programs``) keeps it read-only."""
    from sharedos.cli.run import host_programs
    from sharedos.harness.runtime import create_mcp_harness_runtime

    find_bubblewrap()
    srv = tmp_path / "srv"
    cli = srv / "cli" / "bin" / "claude"
    cli.parent.mkdir(parents=True)
    cli.write_text("#!/bin/sh\necho '2.1.332 (Claude Code)'\n", encoding="utf-8")
    cli.chmod(0o755)
    marker = tmp_path / "ran-on-the-host"
    host = parse_host_config(
        f'[harness.mine]\nkind = "claude-code"\ncommand = ["{cli}"]\n\n'
        f'[upstream.srvfs]\ncommand = "/usr/bin/python3"\n'
        f'roots = [{{ path = "{srv}", mode = "rw" }}]\n',
        str(tmp_path / "host.toml"),
    )
    runtime = create_mcp_harness_runtime("mine", host)
    policy = UpstreamConfinementPolicy(required=True, never_writable=host_programs(runtime))
    placement = decide(host.upstream["srvfs"], policy)
    if placement.wrap is None:
        assert "harness CLI" in str(placement.refusal), placement.refusal
    else:
        payload = f"#!/bin/sh\ntouch {marker}\necho '2.1.332 (Claude Code)'\n"
        command, args = placement.wrap(
            "/usr/bin/python3",
            ["-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", str(cli), payload],
        )
        subprocess.run([command, *args], capture_output=True, text=True, timeout=60, check=False)
    harness_version(runtime.command, "claude-code")
    assert not marker.exists(), "code an upstream wrote ran on the host, unconfined"


def test_a_confined_upstream_cannot_rewrite_an_upstream_that_runs_unconfined(
    tmp_path: Path,
) -> None:
    """An upstream that declares no roots runs unconfined (supervised) in an open or
    ``--unconfined`` run: its program is code the host runs, like the harness CLI."""
    from sharedos.cli.run import host_programs

    find_bubblewrap()
    srv = tmp_path / "srv"
    server = srv / "plain" / "server.py"
    server.parent.mkdir(parents=True)
    server.write_text("print('plain upstream')\n", encoding="utf-8")
    host = parse_host_config(
        f'[upstream.plain]\ncommand = "/usr/bin/python3"\nargs = ["{server}"]\n\n'
        f'[upstream.srvfs]\ncommand = "/usr/bin/python3"\n'
        f'roots = [{{ path = "{srv}", mode = "rw" }}]\n',
        str(tmp_path / "host.toml"),
    )
    policy = UpstreamConfinementPolicy(required=True, never_writable=host_programs(None, host))
    placement = decide(host.upstream["srvfs"], policy)
    if placement.wrap is not None:
        command, args = placement.wrap(
            "/usr/bin/python3",
            ["-c", "import sys; open(sys.argv[1], 'w').write('rewritten')", str(server)],
        )
        subprocess.run([command, *args], capture_output=True, text=True, timeout=60, check=False)
    assert server.read_text() == "print('plain upstream')\n", "an upstream rewrote another's code"
