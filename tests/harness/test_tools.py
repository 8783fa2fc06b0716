"""``harness_version``: ``<cli> --version`` gets the minimal environment a turn starts from.

docs/harnesses.md: "A credential present in the host's environment reaches a
harness only if its ``env`` table names it". The turn's launch honoured that,
but the ``--version`` probe every ``sharedos run`` makes first ran the same CLI
(unconfined, before the turn) with the whole host environment: every upstream
credential, the token store's key, ``PGPASSWORD``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sharedos.harness.hostconfig import parse_host_config
from sharedos.harness.runtime import create_mcp_harness_runtime
from sharedos.harness.tools import harness_version
from tests.adversarial.planted import plant


def _fake_cli(tmp_path: Path) -> tuple[Path, Path]:
    """A CLI that writes the environment it was given, then prints a version."""
    seen = tmp_path / "seen-env.txt"
    cli = tmp_path / "fake-claude"
    cli.write_text(f'#!/bin/sh\nenv > "{seen}"\necho "2.1.332 (Claude Code)"\n', encoding="utf-8")
    cli.chmod(0o700)
    return cli, seen


def test_the_version_probe_gets_no_host_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = plant("host-env")
    monkeypatch.setenv("HUNT_UPSTREAM_TOKEN", secret)
    cli, seen = _fake_cli(tmp_path)
    assert harness_version((str(cli),), "claude-code").version == "2.1.332"
    env = seen.read_text(encoding="utf-8")
    assert secret not in env
    assert "HUNT_UPSTREAM_TOKEN" not in env
    assert f"PATH={os.environ['PATH']}" in env  # what it needs to run is still there


def test_a_runtime_probes_the_version_with_no_host_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``sharedos run`` does before every turn (``SystemIdentity.harness_version``)."""
    secret = plant("runtime-env")
    monkeypatch.setenv("SHAREDOS_TOKEN_KEY", secret)
    cli, seen = _fake_cli(tmp_path)
    host = parse_host_config(f'[harness.claude-code]\ncommand = ["{cli}"]\n', "host.toml")
    runtime = create_mcp_harness_runtime("claude-code", host)
    assert runtime.version() == "2.1.332"
    assert secret not in seen.read_text(encoding="utf-8")


@pytest.mark.parametrize(("setting", "limit"), [("", 120.0), ("timeout_s = 900\n", 900.0)])
def test_the_version_probe_may_take_as_long_as_the_harness_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str, limit: float
) -> None:
    """On a saturated machine (nice 19 beside two CPU hogs) a Node CLI's ``--version`` took
    longer than the probe's fixed 30 s: every harness was reported not available, though
    its turns, bounded by the harness's ``timeout_s``, would have run. The probe's limit is
    now that bound (seen here as the limit it is given, not by waiting it out)."""
    import subprocess

    from sharedos.harness import tools

    limits: list[float] = []
    real_run = subprocess.run

    def run(*args: object, **kwargs: object) -> object:
        limits.append(float(kwargs["timeout"]))  # type: ignore[arg-type]
        return real_run(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(tools.subprocess, "run", run)
    cli, _ = _fake_cli(tmp_path)
    host = parse_host_config(f'[harness.claude-code]\ncommand = ["{cli}"]\n{setting}', "host.toml")
    assert create_mcp_harness_runtime("claude-code", host).version() == "2.1.332"
    assert limits == [limit]
