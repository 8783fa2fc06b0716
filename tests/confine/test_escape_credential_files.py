"""Escape: a confined upstream reads another principal's credential, or the token store.

Per-person identity puts each principal's credential on that principal's session
only; the harness never holds one. Here a stdio upstream serves a directory
(``roots``) in which the operator also keeps credentials: bob's own token
(``{ file = ... }``) and, for another upstream whose shared credential is a
stored secret (``{ store = ... }``), the token store and its key. The host's
list of its state paths (``HostConfig.state_paths``, what ``sharedos run``
gives every sandbox as managed) named the token store only when some upstream
was per-person, and no credential file at all: alice's session of the upstream,
a real process in the real sandbox (``decide`` → ``UpstreamSandbox.wrap`` →
``bwrap``), read bob's token and the store's key.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.harness.hostconfig import parse_host_config
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide
from sharedos.upstream.tokenstore import generate_key

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

BOB = "bob-own-credential-5c0e2a91"


def test_a_confined_upstream_cannot_read_credential_files_or_the_token_store(
    tmp_path: Path,
) -> None:
    share = tmp_path / "share"
    (share / "store").mkdir(parents=True)
    bob = share / "bob.token"
    bob.write_text(BOB + "\n", encoding="utf-8")
    key = share / "token.key"
    key.write_text(generate_key() + "\n", encoding="utf-8")
    for secret in (bob, key):
        secret.chmod(0o600)
    host = parse_host_config(
        f'[tokens]\npath = "{share / "store"}"\nkey = {{ file = "{key}" }}\n\n'
        f'[upstream.fs]\ncommand = "/bin/sh"\nidentity = "per-person"\n'
        f'roots = [{{ path = "{share}", mode = "rw" }}]\n'
        f'[upstream.fs.principals.alice]\nTOKEN = {{ env = "ALICE_TOKEN" }}\n'
        f'[upstream.fs.principals.bob]\nTOKEN = {{ file = "{bob}" }}\n\n'
        f'[upstream.api]\nurl = "http://127.0.0.1:9/mcp"\n'
        f'credentials = {{ TOKEN = {{ store = "api" }} }}\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )
    managed = host.state_paths()
    placement = decide(
        host.upstream["fs"], UpstreamConfinementPolicy(required=True, managed=tuple(managed))
    )
    if placement.wrap is not None:  # it runs confined: alice's session must not reach bob's
        command, args = placement.wrap("/bin/sh", ["-c", f'cat "{bob}" "{key}"'])
        proc = subprocess.run(
            [command, *args], capture_output=True, text=True, timeout=30, check=False
        )
        assert BOB not in proc.stdout, "a confined upstream read another principal's credential"
        assert key.read_text(encoding="utf-8").strip() not in proc.stdout, "it read the store key"
    for path in (bob, key, share / "store"):
        assert str(path) in managed, f"{path} is not among the host's state paths"
    # and with no per-person upstream at all: a stored shared secret keeps the store managed
    shared_only = parse_host_config(
        f'[tokens]\npath = "{share / "store"}"\nkey = {{ file = "{key}" }}\n\n'
        f'[upstream.api]\nurl = "http://127.0.0.1:9/mcp"\n'
        f'credentials = {{ TOKEN = {{ store = "api" }} }}\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )
    assert {str(key), str(share / "store")} <= set(shared_only.state_paths())
