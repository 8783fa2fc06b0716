"""The real versions of the harness CLIs, read from the CLIs themselves.

Versions are never hard-coded: ``harness_version`` runs ``<cli> --version``
with the environment the harness's adapter says it needs, on top of the same
minimal environment a turn starts from (``recipes.base_env``): a credential in
the host's environment reaches no harness process, this one included.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sharedos.harness.adapters import HarnessUnavailable, get_adapter
from sharedos.harness.recipes import base_env

__all__ = ["HarnessUnavailable", "VersionInfo", "default_command", "harness_version"]


@dataclass(frozen=True)
class VersionInfo:
    """The version string a CLI printed, parsed to its version number."""

    raw: str
    version: str


def default_command(kind: str) -> tuple[str, ...]:
    """argv prefix of the pinned CLI for a harness kind."""
    return get_adapter(kind).default_command()


def harness_version(
    command: tuple[str, ...],
    kind: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> VersionInfo:
    """Run ``<command> --version`` and parse the version (``HarnessUnavailable`` if it fails)."""
    adapter = get_adapter(kind)
    adapter.check_command(command)
    with tempfile.TemporaryDirectory(prefix="sharedos-version-") as scratch:
        os.chmod(scratch, 0o700)
        home = Path(scratch) / "home"
        home.mkdir(mode=0o700)
        base = base_env(env if env is not None else os.environ, home)
        run_env = adapter.version_env(base, Path(scratch))
        try:
            proc = subprocess.run(
                [*command, "--version"],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
                env=run_env,
                cwd=scratch,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HarnessUnavailable(f"{kind}: `{command[-1]} --version` failed: {exc}") from None
    out = (proc.stdout or proc.stderr).strip()
    m = re.search(r"(\d+\.\d+\.\d+[\w.+-]*)", out)
    if proc.returncode != 0 or not m:
        raise HarnessUnavailable(f"{kind}: `--version` exited {proc.returncode}: {out[:200]!r}")
    return VersionInfo(raw=out.splitlines()[0] if out else "", version=m.group(1))
