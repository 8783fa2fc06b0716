"""Adversarial review of harness launch (regression guards; no finding).

Host-config env values (credentials) and the turn token never reach a command
line, and every file a recipe writes anywhere under the turn directory is
private (files 0600 or at least not group/other accessible, directories 0700).
Out of scope: a harness child that calls ``setsid()`` leaves the process group
and so escapes the group kill; only a container/cgroup can bound that.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sharedos.harness import recipes
from sharedos.harness.hostconfig import HostConfigError, parse_host_config

TOKEN = "turn-token-SECURITY-REVIEW-abcdefghijklmnop"
SECRET = "sk-provider-key-SECURITY-REVIEW-0123456789"
HOST_ENV = {"PATH": "/usr/bin:/bin", "MY_PROVIDER_KEY": SECRET, "HOME": "/root"}


def _config(kind: str) -> str:
    return (
        f'[harness.{kind}]\nprovider = "host"\ndeclared_model = "some-model"\n'
        f'env = {{ PROVIDER_KEY = "${{MY_PROVIDER_KEY}}", LITERAL_KEY = "{SECRET}-literal" }}\n'
        'args = ["--verbose"]\n'
    )


@pytest.mark.parametrize("kind", ["claude-code", "codex", "pi", "pi-adapter"])
@pytest.mark.parametrize("transport", ["http", "stdio", "live"])
def test_secrets_stay_off_command_lines_and_every_written_file_is_private(
    tmp_path: Path, kind: str, transport: str
) -> None:
    cfg = parse_host_config(_config(kind)).get(kind)
    bridge = {
        "http": recipes.BridgeEndpoint(transport="http", url="http://127.0.0.1:1/mcp", token=TOKEN),
        "stdio": recipes.BridgeEndpoint(
            transport="stdio",
            command=["/v/bin/sharedos", "bridge", "--stdio", "--turn", "/t/turn.json"],
        ),
        "live": None,
    }[transport]
    turn = tmp_path / "turn"
    turn.mkdir(mode=0o700)
    launch = recipes.prepare(
        cfg,
        bridge=bridge,
        turn_dir=turn,
        prompt="go",
        model_url=None,
        host_env=HOST_ENV,
        command=("/bin/harness",),
    )
    argv = "\0".join(launch.argv)
    for secret in (TOKEN, SECRET):
        assert secret not in argv
        assert secret not in repr(launch)
    assert launch.env["PROVIDER_KEY"] == SECRET  # it does reach the harness's own environment
    assert SECRET in launch.secret_values and f"{SECRET}-literal" in launch.secret_values
    for dirpath, dirnames, filenames in os.walk(turn):
        for d in dirnames:
            mode = stat.S_IMODE(os.lstat(Path(dirpath, d)).st_mode)
            assert mode & 0o077 == 0, (d, oct(mode))
        for f in filenames:
            path = Path(dirpath, f)
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            content = path.read_bytes()
            assert SECRET.encode() not in content, path  # provider keys live in env only
            if TOKEN.encode() in content:
                assert mode == 0o600, path
            assert mode & 0o077 == 0, (path, oct(mode))


def test_host_config_errors_never_echo_env_values() -> None:
    bad = (
        '[harness.codex]\nprovider = "host"\ndeclared_model = "m"\n'
        f'env = {{ "BAD NAME" = "{SECRET}", OK = 5 }}\n'
    )
    with pytest.raises(HostConfigError) as info:
        parse_host_config(bad)
    assert SECRET not in str(info.value)
    cfg = parse_host_config(_config("codex")).get("codex")
    assert SECRET not in repr(cfg) and SECRET not in cfg.model_dump_json()
