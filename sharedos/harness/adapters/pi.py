"""Pi (``@earendil-works/pi-coding-agent`` on Node >= 22.19), with its built-in MCP
client (``pi``) or with the ``pi-mcp-adapter`` extension (``pi-adapter``).

Launched as ``node cli.js [-e ADAPTER --no-mcp] --provider P --model M
--no-session --mode json -p -- PROMPT`` with a private ``PI_CODING_AGENT_DIR``
holding ``models.json`` and ``mcp.json``; its model endpoint is OpenAI chat
completions. The bridge token is read from the environment (``${VAR}`` in the
headers for the built-in client, ``bearerTokenEnv`` for the adapter).

Under a strict run policy ``--exclude-tools`` drops the built-in tools of the
kinds the run policy's ``harness_local`` does not name (MCP tools stay).

Its ``--mode json`` output: ``tool_execution_end`` (``toolCallId``,
``toolName``, ``isError``) and ``agent_end``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from sharedos.harness.adapters.base import (
    SCRIPTED_MODEL_KEY,
    TOKEN_ENV,
    Launch,
    TurnInputs,
    check_paths,
    task_argv,
    write_private,
)
from sharedos.harness.localtools import local_tool_kinds
from sharedos.harness.outputs import HarnessOutput, HarnessToolEvent, json_lines, obj, text_of
from sharedos.harness.paths import node22, pi_adapter_dir, tools_dir
from sharedos.identity import McpSupport
from sharedos.testing.scripted_model.plan import SERVER_NAME

#: Pi 1.6.0 needs Node >= 22.19 (``node:fs`` ``globSync``).
PI_MIN_NODE = (22, 19)
#: Pi's built-in tools per kind of ``harness_local`` tool (sharedos.harness.localtools);
#: it has no web tool of its own
TOOLS: dict[str, tuple[str, ...]] = {
    "shell": ("bash",),
    "edit": ("edit", "write"),
    "read": ("read", "grep", "find", "ls"),
    "web": (),
}


def adapter_version() -> str | None:
    """pi-mcp-adapter's version from its package.json (it has no CLI of its own to ask)."""
    try:
        data = json.loads((pi_adapter_dir() / "package.json").read_text())
    except (OSError, ValueError):
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return str(version) if version else None


class PiAdapter:
    """Pi with its built-in MCP client (``exposure: direct``)."""

    kind: ClassVar[str] = "pi"
    label: ClassVar[str] = "Pi (built-in MCP)"
    mcp_support: ClassVar[McpSupport] = McpSupport.NATIVE
    mcp_extension: ClassVar[str | None] = None
    live_kind: ClassVar[str] = "pi"
    vendor_keys: ClassVar[Mapping[str, type]] = {"models": dict}
    correlation_keys: ClassVar[tuple[str, ...]] = ()
    client_route: ClassVar[str] = (
        "its built-in MCP client answers a call to an unoffered mcp__sharedos__ name with "
        "'Tool ... not found'"
    )

    def default_command(self) -> tuple[str, ...]:
        """The Node 22 binary and Pi's ``cli.js`` from ``.tools``."""
        return (
            str(node22()),
            str(tools_dir() / "@earendil-works" / "pi-coding-agent" / "dist" / "cli.js"),
        )

    def check_command(self, command: tuple[str, ...]) -> None:
        """Node and the script must exist when given as paths."""
        check_paths(self.kind, command[:2])

    def version_env(self, environ: Mapping[str, str], scratch: Path) -> dict[str, str]:
        """``--version`` needs nothing special."""
        return dict(environ)

    def server_entry(self, inputs: TurnInputs) -> dict[str, Any]:
        """The ``mcpServers.sharedos`` entry of ``mcp.json``."""
        bridge = inputs.bridge
        assert bridge is not None
        entry: dict[str, Any] = {
            # Pi built-in: expose each tool directly (default "codemode" would make
            # the model write JS). pi-mcp-adapter: register direct tools too.
            "exposure": "direct",
            "directTools": True,
            # Pi's per-request timeout (s, 60 by default), past SharedOS's own bound on the
            # call: its answer, not Pi's "MCP request timed out", is what the model sees
            "timeout": bridge.client_timeout_s(),
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
        return entry

    def extension_args(self, inputs: TurnInputs) -> list[str]:
        """Built-in client: none, or ``--no-mcp`` when there is no bridge (live column)."""
        return ["--no-mcp"] if inputs.bridge is None else []

    def tool_args(self, inputs: TurnInputs) -> list[str]:
        """Strict: ``--exclude-tools`` drops the built-in tools of kinds the run policy lacks.

        A denylist, not ``--tools``: measured with Pi 1.6.0, an allowlist such as
        ``--tools bash`` also removed the MCP tools (built-in ``mcp__*`` and the
        adapter's ``sharedos_*``) from the model's request.
        """
        if not inputs.strict:
            return []
        kinds = local_tool_kinds(inputs.local_tools)
        dropped = [t for kind, tools in sorted(TOOLS.items()) if kind not in kinds for t in tools]
        return ["--exclude-tools", ",".join(dropped)] if dropped else []

    def prepare(self, inputs: TurnInputs) -> Launch:
        """``models.json`` for the provider, ``mcp.json`` for the bridge, ``--mode json``."""
        cfg, env = inputs.cfg, inputs.env
        agent = inputs.turn_dir / "pi-agent"
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
            assert inputs.model_url is not None
            files.append(write_private(agent / "models.json", json.dumps(_models(inputs))))
            provider_args = ["--provider", "sharedos-scripted", "--model", cfg.declared_model]
        elif isinstance(cfg.vendor.get("models"), dict):
            files.append(write_private(agent / "models.json", json.dumps(cfg.vendor["models"])))
        servers = {SERVER_NAME: self.server_entry(inputs)} if inputs.bridge is not None else {}
        files.append(write_private(agent / "mcp.json", json.dumps({"mcpServers": servers})))
        argv = [
            *inputs.argv,
            *self.extension_args(inputs),
            *provider_args,
            *self.tool_args(inputs),
            # no AGENTS.md / CLAUDE.md from the directories above the turn's (Pi reads
            # them up to `/`: /tmp's in the default run directory, anyone's to write)
            "--no-context-files",
            "--no-session",
            "--mode",
            "json",
            "-p",
        ]
        # Pi reads an argument that starts with ``@`` as a file to attach, even after
        # ``--`` (``cli/args.js``): such a prompt is given with a leading space instead.
        prompt = f" {inputs.prompt}" if inputs.prompt.startswith("@") else inputs.prompt
        return Launch(argv=argv, env=env, cwd=inputs.work, files=files, task=task_argv(prompt))

    def parse_output(self, stdout: str) -> HarnessOutput:
        """``tool_execution_end`` events and the last assistant message of ``agent_end``."""
        out = json_lines(stdout)
        for ev in out.events:
            if ev.get("type") == "tool_execution_end":
                result = obj(ev.get("result"))
                details = obj(result.get("details"))
                out.tool_events.append(
                    HarnessToolEvent(
                        call_id=str(ev.get("toolCallId")),
                        alias=str(ev.get("toolName")),
                        tool=details.get("tool") if isinstance(details.get("tool"), str) else None,
                        is_error=bool(ev.get("isError")),
                        text=text_of(result.get("content")),
                    )
                )
            elif ev.get("type") == "agent_end":
                msgs = ev.get("messages") or []
                for m in reversed(msgs if isinstance(msgs, list) else []):
                    if isinstance(m, dict) and m.get("role") == "assistant":
                        out.final_text = text_of(m.get("content"))
                        # Pi exits 0 when its model call failed (measured: a 401 from the
                        # provider): the last answer's stopReason is the only sign of it
                        if m.get("stopReason") in ("error", "aborted"):
                            why = m.get("errorMessage")
                            out.error = (why if isinstance(why, str) and why else "")[
                                :500
                            ] or f"the model's answer ended with {m.get('stopReason')}"
                        break
        return out

    def turn_notes(self, output: HarnessOutput) -> list[str]:
        """Nothing beyond the common notes."""
        return []


class PiMcpAdapter(PiAdapter):
    """Pi with the ``pi-mcp-adapter`` extension as its MCP client (``directTools``)."""

    kind: ClassVar[str] = "pi-adapter"
    label: ClassVar[str] = "Pi + pi-mcp-adapter"
    mcp_support: ClassVar[McpSupport] = McpSupport.EXTENSION
    mcp_extension: ClassVar[str | None] = "pi-mcp-adapter"
    live_kind: ClassVar[str] = "pi"
    vendor_keys: ClassVar[Mapping[str, type]] = {"models": dict, "extension": str}
    client_route: ClassVar[str] = (
        "even its `mcp` proxy tool, which takes any name as a string, resolves the "
        "name against the tools it listed from the server and answers 'Tool ... not found' "
        "instead of forwarding it"
    )

    def server_entry(self, inputs: TurnInputs) -> dict[str, Any]:
        """The adapter ignores ``exposure``; over HTTP it takes a static bearer from the env."""
        entry = super().server_entry(inputs)
        entry.pop("exposure")
        # the adapter's own key for the per-request timeout (ms; the SDK's 60 s by default)
        entry["requestTimeoutMs"] = entry.pop("timeout") * 1000
        if inputs.bridge is not None and inputs.bridge.transport == "http":
            # Static bearer from the environment; no OAuth discovery, no SSE fallback.
            entry.pop("headers")
            entry.update(auth="bearer", bearerTokenEnv=TOKEN_ENV, httpTransport="streamable-http")
        return entry

    def extension_args(self, inputs: TurnInputs) -> list[str]:
        """``-e <pi-mcp-adapter> --no-mcp`` (the adapter replaces the built-in client)."""
        ext = inputs.cfg.vendor.get("extension") or str(pi_adapter_dir())
        return ["-e", str(ext), "--no-mcp"]

    def turn_notes(self, output: HarnessOutput) -> list[str]:
        """Which pi-mcp-adapter version was the MCP client."""
        version = adapter_version()
        return (
            [f"MCP client: pi-mcp-adapter {version} (extension loaded with -e)"] if version else []
        )


def _models(inputs: TurnInputs) -> dict[str, Any]:
    """``models.json`` naming the scripted model endpoint as an OpenAI-compatible provider."""
    cfg = inputs.cfg
    return {
        "providers": {
            "sharedos-scripted": {
                "baseUrl": f"{inputs.model_url}/v1",
                "api": "openai-completions",
                "apiKey": SCRIPTED_MODEL_KEY,
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
