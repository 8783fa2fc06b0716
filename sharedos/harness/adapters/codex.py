"""Codex (``@openai/codex``, pinned in ``tools/package.json``).

Launched as ``codex exec --skip-git-repo-check
--dangerously-bypass-approvals-and-sandbox --ephemeral --json -C WORK -- PROMPT``
with a private ``CODEX_HOME/config.toml``; its model endpoint is OpenAI
Responses. The bridge token reaches it through ``bearer_token_env_var``.

Its ``--json`` output: ``item.completed`` with ``type: mcp_tool_call``
(``status`` failed for ``isError`` and for transport errors) and
``agent_message``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import tomli_w

from sharedos.harness.adapters.base import (
    MODEL_KEY_ENV,
    SCRIPTED_MODEL_KEY,
    TOKEN_ENV,
    Launch,
    TurnInputs,
    check_paths,
    task_argv,
    write_private,
)
from sharedos.harness.outputs import HarnessOutput, HarnessToolEvent, json_lines, obj, text_of
from sharedos.harness.paths import tools_dir
from sharedos.identity import McpSupport
from sharedos.names import codex_sanitized
from sharedos.testing.scripted_model.plan import SERVER_NAME


def merge(into: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """Deep-merge ``extra`` into ``into`` (tables merge, other values replace)."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value


class CodexAdapter:
    """Codex with its own MCP client."""

    kind: ClassVar[str] = "codex"
    label: ClassVar[str] = "Codex"
    mcp_support: ClassVar[McpSupport] = McpSupport.NATIVE
    mcp_extension: ClassVar[str | None] = None
    live_kind: ClassVar[str] = "codex"
    vendor_keys: ClassVar[Mapping[str, type]] = {"config": dict}
    correlation_keys: ClassVar[tuple[str, ...]] = ("callId",)
    client_route: ClassVar[str] = (
        "it answers a call in the mcp__sharedos namespace to an unlisted name as an "
        "unsupported call"
    )

    def default_command(self) -> tuple[str, ...]:
        """``.tools/node_modules/.bin/codex``."""
        return (str(tools_dir() / ".bin" / "codex"),)

    def check_command(self, command: tuple[str, ...]) -> None:
        """The program must exist when it is given as a path."""
        check_paths(self.kind, command[:1])

    def version_env(self, environ: Mapping[str, str], scratch: Path) -> dict[str, str]:
        """``--version`` needs nothing special."""
        return dict(environ)

    def config(self, inputs: TurnInputs) -> dict[str, Any]:
        """``config.toml``: nothing that reaches the network, the provider, the bridge."""
        cfg, bridge = inputs.cfg, inputs.bridge
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
            # no AGENTS.md from the project (the git repository) the run directory is in:
            # the model's instructions are the prompt's
            "project_doc_max_bytes": 0,
        }
        if cfg.provider == "scripted":
            assert inputs.model_url is not None
            # A model name Codex does not know: it then offers the MCP tools up front
            # instead of deferring them behind tool_search.
            config["model"] = cfg.declared_model
            config["model_provider"] = "sharedos-scripted"
            config["model_providers"] = {
                "sharedos-scripted": {
                    "name": "SharedOS scripted model",
                    "base_url": f"{inputs.model_url}/v1",
                    "wire_api": "responses",
                    "env_key": MODEL_KEY_ENV,
                    "supports_websockets": False,
                    "request_max_retries": 0,
                    "stream_max_retries": 0,
                }
            }
        extra = cfg.vendor.get("config")
        if isinstance(extra, dict):
            merge(config, extra)
        if bridge is not None:
            server: dict[str, Any] = {
                "required": True,
                # past SharedOS's own bound on the call: its answer, not Codex's
                # timeout, is what the model sees
                "tool_timeout_sec": bridge.client_timeout_s(),
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
            if inputs.strict:
                # No bypass flag under a strict run: Codex keeps its own sandbox, and the
                # SharedOS tools are approved explicitly (SharedOS authorizes each call).
                server["default_tools_approval_mode"] = "approve"
            config.setdefault("mcp_servers", {})[SERVER_NAME] = server
        if inputs.strict:
            config["approval_policy"] = "never"
            config["sandbox_mode"] = "workspace-write"
        return config

    def prepare(self, inputs: TurnInputs) -> Launch:
        """A private ``CODEX_HOME`` with ``config.toml``; ``codex exec --json``."""
        env = inputs.env
        codex_home = inputs.turn_dir / "codex-home"
        codex_home.mkdir(mode=0o700, exist_ok=True)
        if inputs.cfg.provider == "scripted":
            env[MODEL_KEY_ENV] = SCRIPTED_MODEL_KEY
        path = write_private(codex_home / "config.toml", tomli_w.dumps(self.config(inputs)))
        env["CODEX_HOME"] = str(codex_home)
        # RUST_BACKTRACE=1 would append a backtrace to every MCP error text the model sees.
        env["RUST_BACKTRACE"] = "0"
        # Under a strict run policy never the bypass flag: Codex's own sandbox
        # (workspace-write: writes only in the work directory, no network for its
        # commands) runs inside SharedOS's; an open run keeps the measured recipe.
        safety = (
            ["--sandbox", "workspace-write"]
            if inputs.strict
            else ["--dangerously-bypass-approvals-and-sandbox"]
        )
        argv = [
            *inputs.argv,
            "exec",
            "--skip-git-repo-check",
            *safety,
            "--ephemeral",
            "--json",
            "-C",
            str(inputs.work),
        ]
        return Launch(
            argv=argv, env=env, cwd=inputs.work, files=[path], task=task_argv(inputs.prompt)
        )

    def parse_output(self, stdout: str) -> HarnessOutput:
        """``item.completed`` events of type ``mcp_tool_call`` and ``agent_message``."""
        out = json_lines(stdout)
        for ev in out.events:
            item = ev.get("item") if isinstance(ev.get("item"), dict) else None
            if ev.get("type") != "item.completed" or item is None:
                continue
            if item.get("type") == "mcp_tool_call":
                result = obj(item.get("result"))
                error = item.get("error")
                out.tool_events.append(
                    HarnessToolEvent(
                        call_id=str(item.get("id")),
                        # what the model saw: namespace mcp__<server>, function <sanitized tool>
                        alias=f"mcp__{codex_sanitized(str(item.get('server')))}/"
                        f"{codex_sanitized(str(item.get('tool')))}",
                        tool=str(item.get("tool")),
                        is_error=item.get("status") == "failed",
                        text=text_of(result.get("content"))
                        if result
                        else (str(error)[:500] if error else None),
                    )
                )
            elif item.get("type") == "agent_message":
                out.final_text = item.get("text")
        out.mcp_status = "connected" if out.events else None
        return out

    def turn_notes(self, output: HarnessOutput) -> list[str]:
        """Nothing beyond the common notes."""
        return []
