"""Escape: a confined upstream whose program lives in a home directory sees the whole home.

An upstream's sandbox shows its declared roots and what its program needs to
run (``sharedos.confine.programs``): its installation, found from the program
itself. For ``PREFIX/bin/prog`` that was ``PREFIX``, and for a script the
interpreter runs, the script's own directory — so ``~/bin/server`` or
``python3 ~/server.py`` showed the operator's entire home read-only (SSH keys,
cloud credentials, other tools' tokens), and a link inside a root that points
there no longer dangled. The upstream here is a real process in its real
sandbox (``decide`` → ``wrap`` → ``bwrap``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.harness.hostconfig import parse_host_config
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

SECRET = "PLANTED-ssh-key-of-the-operator-5d1e"


@pytest.mark.parametrize("layout", ["home-bin", "home-script"])
def test_a_program_in_a_home_directory_does_not_show_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(SECRET + "\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    share = tmp_path / "share"
    share.mkdir()
    (share / "link.txt").symlink_to(home / ".ssh" / "id_ed25519")
    reader = '#!/bin/sh\nfor f in "$@"; do cat "$f"; done\n'
    if layout == "home-bin":
        (home / "bin").mkdir()
        program = home / "bin" / "server"
        program.write_text(reader, encoding="utf-8")
        program.chmod(0o755)
        command, args = str(program), []
    else:
        script = home / "server.py"
        script.write_text("import sys\nfor f in sys.argv[1:]: print(open(f).read())\n")
        command, args = sys.executable, [str(script)]
    host = parse_host_config(
        f'[upstream.docs]\ncommand = "{command}"\nargs = {args!r}\n'.replace("'", '"')
        + f'roots = [{{ path = "{share}", mode = "ro" }}]\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )
    placement = decide(host.upstream["docs"], UpstreamConfinementPolicy(required=True))
    assert placement.wrap is not None, placement.refusal
    targets = [str(share / "link.txt"), str(home / ".ssh" / "id_ed25519")]
    program_, argv = placement.wrap(command, [*args, *targets])
    proc = subprocess.run(
        [program_, *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert SECRET not in proc.stdout, "the upstream read a file of the home its program is in"
    # the program itself still runs: it reached the files it was given (and only failed there)
    assert "No such file" in proc.stderr, proc.stderr


PROBE = r"""
if [ "$1" = --version ]; then echo "probe 1.0.0"; exit 0; fi
echo "PROBE key=$(cat "$KEY" 2>&1 | tr '\n' ' ')"
"""


def test_a_harness_command_in_a_home_directory_does_not_show_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from sharedos.conformance.environment import build_environment
    from sharedos.conformance.manifest import load_manifest
    from sharedos.harness.hostconfig import HarnessConfig
    from sharedos.harness.runtime import McpHarnessRuntime
    from tests.confine.probe import run_probe_turn

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key = home / ".ssh" / "id_ed25519"
    key.write_text(SECRET + "\n", encoding="utf-8")
    (home / "probe.sh").write_text(PROBE, encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    env = build_environment(load_manifest(), tmp_path / "env", name="probe")
    cfg = HarnessConfig(
        id="probe",
        kind="claude-code",
        command=("/bin/bash", str(home / "probe.sh")),
        env={"KEY": "${KEY}"},
    )
    runtime = McpHarnessRuntime(cfg, None, environ={**os.environ, "KEY": str(key)})
    try:
        result = run_probe_turn(runtime, env, "home", workdir=tmp_path / "turns")
        assert result.identity.confinement is not None
        assert result.identity.confinement.state.value == "confined"
        assert "PROBE key=" in result.process.stdout, result.process.stderr
        assert SECRET not in result.process.stdout, "the harness read a file of its command's home"
    finally:
        env.close()
