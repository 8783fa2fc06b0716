"""One turn's launch: the common environment, then the harness adapter's own recipe.

Every harness starts from the same minimal environment with a fresh HOME
(nothing else of the host's environment is passed unless the host file's
``env`` says so: a credential in the host's environment does not leak into a
harness that was not configured to receive it). Its adapter
(``sharedos.harness.adapters.<harness>``) writes its own configuration into
the turn's private directory (0700, files 0600) and builds the argv; the host
file's ``env`` and ``args`` are applied last, unread.

The bridge token never goes on a command line: each adapter passes it through
the environment or a private file (see the adapter modules).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sharedos.harness.adapters import get_adapter
from sharedos.harness.adapters.base import (
    MODEL_KEY_ENV,
    TOKEN_ENV,
    BridgeEndpoint,
    Launch,
    TurnInputs,
)
from sharedos.harness.hostconfig import HarnessConfig
from sharedos.redaction import MIN_SECRET_CHARS

__all__ = ["MODEL_KEY_ENV", "TOKEN_ENV", "BridgeEndpoint", "Launch", "base_env", "prepare"]

#: Environment variables every harness inherits from the host.
_BASE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "SYSTEMROOT")


def base_env(environ: Mapping[str, str], home: Path) -> dict[str, str]:
    """The minimal environment every harness starts from, with a fresh HOME."""
    env = {k: environ[k] for k in _BASE_ENV_KEYS if k in environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    env["XDG_CACHE_HOME"] = str(home / ".cache")
    env["XDG_DATA_HOME"] = str(home / ".local" / "share")
    return env


def prepare(
    cfg: HarnessConfig,
    *,
    bridge: BridgeEndpoint | None,
    turn_dir: Path,
    prompt: str,
    model_url: str | None,
    host_env: Mapping[str, str],
    command: tuple[str, ...] | None = None,
    strict: bool = False,
    confined: bool = False,
    local_tools: tuple[str, ...] = (),
) -> Launch:
    """Write the harness's configuration for this turn and return how to launch it.

    ``bridge`` is ``None`` for the live column (no SharedOS catalogue at all).
    ``model_url`` is the scripted model's base URL when ``cfg.provider`` is
    ``scripted``. ``host_env`` is the host's environment, read only to resolve
    ``${VAR}`` references of the host file. ``strict``/``confined``/``local_tools``
    tell the adapter the run policy's mode, whether the CLI runs in SharedOS's
    sandbox, and the harness-local tools the run policy names (each adapter
    then applies its CLI's own safety settings, never a sandbox-bypass flag
    under ``strict``).
    """
    adapter = get_adapter(cfg.kind)
    home = turn_dir / "home"
    work = turn_dir / "work"
    for d in (home, work):
        d.mkdir(mode=0o700, exist_ok=True)
    resolved = cfg.env.resolve(host_env, harness=cfg.id)
    launch = adapter.prepare(
        TurnInputs(
            cfg=cfg,
            bridge=bridge,
            turn_dir=turn_dir,
            work=work,
            prompt=prompt,
            model_url=model_url,
            env=base_env(host_env, home),
            argv=list(command or cfg.command or adapter.default_command()),
            strict=strict,
            confined=confined,
            local_tools=local_tools,
        )
    )
    # Host-file env last: the operator's settings win over the recipe's defaults
    # (that is how a real provider is plugged in), except the token plumbing.
    launch.env.update(resolved)
    if bridge is not None and bridge.token:
        launch.env[TOKEN_ENV] = bridge.token
    # the host file's args, then the prompt after ``--``: last, so nothing after it is a flag
    launch.argv.extend(cfg.args)
    launch.argv.extend(launch.task)
    # a value shorter than the redactor scrubs is no credential worth the name
    # (each value, and each host variable one is built from: ``SecretEnv.secrets``)
    secrets = [v for v in cfg.env.secrets(host_env) if len(v) >= MIN_SECRET_CHARS]
    if bridge is not None and bridge.token:
        secrets.append(bridge.token)
    launch.secret_values = tuple(secrets)
    return launch
