"""Per-harness launch recipes: the CLI's own MCP configuration, argv and environment for one turn.

Each recipe writes files only into the turn's private directory (0700) and
returns a ``Launch``. The settings are the measured ones (docs/harnesses.md and
the probe notes): the flags that make each CLI non-interactive, the variables
that stop it calling home, and the fixes for its MCP start-up race.

The bridge token never goes on a command line. Codex and Pi read it from an
environment variable (``bearer_token_env_var``; ``${VAR}`` in Pi's headers);
Claude Code's ``--mcp-config`` file holds it, mode 0600 inside the 0700 turn
directory, deleted with the turn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from sharedos.harness.hostconfig import HarnessConfig
from sharedos.harness.scripted_model.plan import SERVER_NAME
from sharedos.harness.tools import default_command, pi_adapter_dir

#: The env var carrying the turn's bearer token to Codex and Pi.
TOKEN_ENV = "SHAREDOS_BRIDGE_TOKEN"
#: The env var carrying the scripted model's dummy API key.
MODEL_KEY_ENV = "SHAREDOS_MODEL_KEY"

#: Environment variables every harness inherits from the host (nothing else is passed
#: unless the host file's ``env`` says so: a credential in the host's environment
#: does not leak into a harness that was not configured to receive it).
_BASE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "SYSTEMROOT")


@dataclass
class BridgeEndpoint:
    """What the harness connects to: an HTTP URL + token, or a stdio command."""

    transport: str
    url: str | None = None
    token: str | None = field(default=None, repr=False)
    command: list[str] | None = None
    stdio_env: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass
class Launch:
    """A fully prepared harness process for one turn."""

    argv: list[str]
    env: dict[str, str] = field(repr=False)
    cwd: Path
    output_format: str  # stream-json | codex-json | pi-json | text
    files: list[Path] = field(default_factory=list)
    secret_values: tuple[str, ...] = field(default=(), repr=False)


def _write_private(path: Path, text: str) -> Path:
    """Create ``path`` with mode 0600 (it may hold the turn token or a provider key)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


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
) -> Launch:
    """Write the harness's configuration for this turn and return how to launch it.

    ``bridge`` is ``None`` for the live column (no SharedOS catalogue at all).
    ``model_url`` is the scripted model's base URL when ``cfg.provider`` is
    ``scripted``. ``host_env`` is the host's environment, read only to resolve
    ``${VAR}`` references of the host file.
    """
    home = turn_dir / "home"
    work = turn_dir / "work"
    for d in (home, work):
        d.mkdir(mode=0o700, exist_ok=True)
    env = base_env(host_env, home)
    resolved = cfg.env.resolve(host_env, harness=cfg.id)
    argv_prefix = list(command or cfg.command or default_command(cfg.kind))
    if cfg.kind == "claude-code":
        launch = _claude(cfg, bridge, turn_dir, work, prompt, model_url, env, argv_prefix)
    elif cfg.kind == "codex":
        launch = _codex(cfg, bridge, turn_dir, work, prompt, model_url, env, argv_prefix)
    else:
        launch = _pi(cfg, bridge, turn_dir, work, prompt, model_url, env, argv_prefix)
    # Host-file env last: the operator's settings win over the recipe's defaults
    # (that is how a real provider is plugged in), except the token plumbing.
    launch.env.update(resolved)
    if bridge is not None and bridge.token:
        launch.env[TOKEN_ENV] = bridge.token
    launch.argv.extend(cfg.args)
    secrets = [v for v in resolved.values() if len(v) >= 4]
    if bridge is not None and bridge.token:
        secrets.append(bridge.token)
    launch.secret_values = tuple(secrets)
    return launch


# ----------------------------------------------------------------------------- Claude Code
def _claude(
    cfg: HarnessConfig,
    bridge: BridgeEndpoint | None,
    turn_dir: Path,
    work: Path,
    prompt: str,
    model_url: str | None,
    env: dict[str, str],
    argv: list[str],
) -> Launch:
    env.update(
        {
            # The one variable that stops every call home (measured: 0 DNS queries).
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            # -p mode connects MCP servers without blocking by default: the first
            # model request could then lack the mcp__ tools. Block, with room for
            # the stdio bridge's cold import.
            "MCP_CONNECTION_NONBLOCKING": "0",
            "MCP_CONNECT_TIMEOUT_MS": "30000",
            # 2.1.3xx defers MCP tools behind ToolSearch for models it does not
            # know; the catalogue must be in the request, as published.
            "ENABLE_TOOL_SEARCH": "false" if not cfg.vendor.get("tool_search") else "true",
        }
    )
    if cfg.provider == "scripted":
        assert model_url is not None
        env["ANTHROPIC_BASE_URL"] = model_url
        env["ANTHROPIC_API_KEY"] = "sharedos-scripted-model-no-key"
    files: list[Path] = []
    servers: dict[str, Any] = {}
    if bridge is not None:
        if bridge.transport == "http":
            servers[SERVER_NAME] = {
                "type": "http",
                "url": bridge.url,
                "headers": {"Authorization": f"Bearer {bridge.token}"},
            }
        else:
            assert bridge.command
            servers[SERVER_NAME] = {
                "type": "stdio",
                "command": bridge.command[0],
                "args": bridge.command[1:],
                "env": dict(bridge.stdio_env),
            }
    mcp_path = _write_private(turn_dir / "claude-mcp.json", json.dumps({"mcpServers": servers}))
    files.append(mcp_path)
    full = [
        *argv,
        "-p",
        prompt,
        "--mcp-config",
        str(mcp_path),
        "--strict-mcp-config",
        "--output-format",
        "stream-json",
        "--verbose",
        "--no-session-persistence",
    ]
    if bridge is not None:
        # Allow the whole SharedOS server (SharedOS authorizes each call itself);
        # as root, --dangerously-skip-permissions is refused anyway.
        full += ["--allowedTools", f"mcp__{SERVER_NAME}"]
    if cfg.provider == "scripted":
        full += ["--model", cfg.declared_model]
    return Launch(argv=full, env=env, cwd=work, output_format="stream-json", files=files)


# ----------------------------------------------------------------------------- Codex
def _codex(
    cfg: HarnessConfig,
    bridge: BridgeEndpoint | None,
    turn_dir: Path,
    work: Path,
    prompt: str,
    model_url: str | None,
    env: dict[str, str],
    argv: list[str],
) -> Launch:
    codex_home = turn_dir / "codex-home"
    codex_home.mkdir(mode=0o700, exist_ok=True)
    config: dict[str, Any] = {
        "check_for_update_on_startup": False,
        # Every feature that would reach the network or run a login shell at start-up.
        "features": {
            "plugins": False,
            "remote_plugin": False,
            "shell_snapshot": False,
            "apps": False,
        },
        "analytics": {"enabled": False},
        "feedback": {"enabled": False},
        "otel": {"exporter": "none"},
    }
    if cfg.provider == "scripted":
        assert model_url is not None
        # A model name Codex does not know: it then offers the MCP tools up front
        # instead of deferring them behind tool_search.
        config["model"] = cfg.declared_model
        config["model_provider"] = "sharedos-scripted"
        config["model_providers"] = {
            "sharedos-scripted": {
                "name": "SharedOS scripted model",
                "base_url": f"{model_url}/v1",
                "wire_api": "responses",
                "env_key": MODEL_KEY_ENV,
                "supports_websockets": False,
                "request_max_retries": 0,
                "stream_max_retries": 0,
            }
        }
        env[MODEL_KEY_ENV] = "sharedos-scripted-model-no-key"
    extra = cfg.vendor.get("config")
    if isinstance(extra, dict):
        _merge(config, extra)
    if bridge is not None:
        server: dict[str, Any] = {
            "required": True,
            "tool_timeout_sec": 60,
            "startup_timeout_sec": 30,
        }
        if bridge.transport == "http":
            server["url"] = bridge.url
            server["bearer_token_env_var"] = TOKEN_ENV
        else:
            assert bridge.command
            server["command"] = bridge.command[0]
            server["args"] = bridge.command[1:]
            if bridge.stdio_env:
                server["env"] = dict(bridge.stdio_env)
        config.setdefault("mcp_servers", {})[SERVER_NAME] = server
    path = _write_private(codex_home / "config.toml", tomli_w.dumps(config))
    env["CODEX_HOME"] = str(codex_home)
    # RUST_BACKTRACE=1 would append a backtrace to every MCP error text the model sees.
    env["RUST_BACKTRACE"] = "0"
    full = [
        *argv,
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--ephemeral",
        "--json",
        "-C",
        str(work),
        prompt,
    ]
    return Launch(argv=full, env=env, cwd=work, output_format="codex-json", files=[path])


def _merge(into: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


# ----------------------------------------------------------------------------- Pi
def _pi(
    cfg: HarnessConfig,
    bridge: BridgeEndpoint | None,
    turn_dir: Path,
    work: Path,
    prompt: str,
    model_url: str | None,
    env: dict[str, str],
    argv: list[str],
) -> Launch:
    agent = turn_dir / "pi-agent"
    agent.mkdir(mode=0o700, exist_ok=True)
    env.update(
        {
            "PI_CODING_AGENT_DIR": str(agent),
            "PI_OFFLINE": "1",
            "PI_SKIP_VERSION_CHECK": "1",
            "PI_TELEMETRY": "0",
            "MCP_UI_VIEWER": "none",
        }
    )
    files: list[Path] = []
    provider_args: list[str] = []
    if cfg.provider == "scripted":
        assert model_url is not None
        models = {
            "providers": {
                "sharedos-scripted": {
                    "baseUrl": f"{model_url}/v1",
                    "api": "openai-completions",
                    "apiKey": "sharedos-scripted-model-no-key",
                    "models": [
                        {
                            "id": cfg.declared_model,
                            "name": "SharedOS scripted model",
                            "reasoning": False,
                            "input": ["text"],
                            "contextWindow": 128000,
                            "maxTokens": 4096,
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                        }
                    ],
                }
            }
        }
        files.append(_write_private(agent / "models.json", json.dumps(models)))
        provider_args = ["--provider", "sharedos-scripted", "--model", cfg.declared_model]
    elif isinstance(cfg.vendor.get("models"), dict):
        files.append(_write_private(agent / "models.json", json.dumps(cfg.vendor["models"])))
    servers: dict[str, Any] = {}
    if bridge is not None:
        entry: dict[str, Any] = {
            # Pi built-in: expose each tool directly (default "codemode" would make
            # the model write JS). pi-mcp-adapter: register direct tools too.
            "exposure": "direct",
            "directTools": True,
        }
        if bridge.transport == "http":
            entry["url"] = bridge.url
            entry["headers"] = {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}
        else:
            assert bridge.command
            entry["command"] = bridge.command[0]
            entry["args"] = bridge.command[1:]
            if bridge.stdio_env:
                entry["env"] = dict(bridge.stdio_env)
        if cfg.kind == "pi-adapter":
            entry.pop("exposure")
            if bridge.transport == "http":
                # Static bearer from the environment; no OAuth discovery, no SSE fallback.
                entry.pop("headers")
                entry.update(
                    auth="bearer", bearerTokenEnv=TOKEN_ENV, httpTransport="streamable-http"
                )
        servers[SERVER_NAME] = entry
    files.append(_write_private(agent / "mcp.json", json.dumps({"mcpServers": servers})))
    full = [*argv]
    if cfg.kind == "pi-adapter":
        ext = cfg.vendor.get("extension") or str(pi_adapter_dir())
        full += ["-e", str(ext), "--no-mcp"]
    elif bridge is None:
        full += ["--no-mcp"]
    full += [*provider_args, "--no-session", "--mode", "json", "-p", prompt]
    return Launch(argv=full, env=env, cwd=work, output_format="pi-json", files=files)
