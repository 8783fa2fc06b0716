"""Claude Code (``@anthropic-ai/claude-code``, pinned in ``tools/package.json``).

Launched as ``claude -p --mcp-config FILE --strict-mcp-config
--output-format stream-json --verbose --no-session-persistence -- PROMPT``; its model
endpoint is Anthropic Messages (``ANTHROPIC_BASE_URL``). The bridge token is in
the ``--mcp-config`` file (0600 inside the 0700 turn directory, deleted with
the turn; in SharedOS's sandbox it is given to the CLI as in-memory data and
left empty on disk): Claude Code has no bearer-from-environment setting.
Under a strict run policy ``--tools`` offers only the built-in tools of the
kinds the run policy's ``harness_local`` names, and ``--allowedTools`` allows
exactly those and the SharedOS server.

Its ``stream-json`` output: ``system/init`` (``mcp_servers`` status),
``assistant`` events with ``tool_use`` blocks, ``user`` events with
``tool_result`` blocks (``is_error``), a final ``result``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from sharedos.harness.adapters.base import (
    SCRIPTED_MODEL_KEY,
    Launch,
    TurnInputs,
    check_paths,
    task_argv,
    write_private,
)
from sharedos.harness.localtools import local_tool_kinds
from sharedos.harness.outputs import HarnessOutput, HarnessToolEvent, json_lines, obj, text_of
from sharedos.harness.paths import tools_dir
from sharedos.identity import McpSupport
from sharedos.testing.scripted_model.plan import SERVER_NAME

#: Claude Code's built-in tools per kind of ``harness_local`` tool (sharedos.harness.localtools)
TOOLS: dict[str, tuple[str, ...]] = {
    "shell": ("Bash",),
    "edit": ("Edit", "Write", "NotebookEdit"),
    "read": ("Read", "Grep", "Glob"),
    "web": ("WebFetch", "WebSearch"),
}


class ClaudeCodeAdapter:
    """Claude Code with its own MCP client."""

    kind: ClassVar[str] = "claude-code"
    label: ClassVar[str] = "Claude Code"
    mcp_support: ClassVar[McpSupport] = McpSupport.NATIVE
    mcp_extension: ClassVar[str | None] = None
    live_kind: ClassVar[str] = "claude-code"
    vendor_keys: ClassVar[Mapping[str, type]] = {"tool_search": bool}
    correlation_keys: ClassVar[tuple[str, ...]] = ("claudecode/toolUseId",)
    client_route: ClassVar[str] = (
        "it answers a call to an unoffered mcp__sharedos__ name with a tool_use_error"
    )

    def default_command(self) -> tuple[str, ...]:
        """``.tools/node_modules/.bin/claude``."""
        return (str(tools_dir() / ".bin" / "claude"),)

    def check_command(self, command: tuple[str, ...]) -> None:
        """The program must exist when it is given as a path."""
        check_paths(self.kind, command[:1])

    def version_env(self, environ: Mapping[str, str], scratch: Path) -> dict[str, str]:
        """``--version`` needs nothing special."""
        return dict(environ)

    def prepare(self, inputs: TurnInputs) -> Launch:
        """The ``--mcp-config`` file and the measured offline, non-blocking-MCP settings."""
        cfg, bridge, env = inputs.cfg, inputs.bridge, inputs.env
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
                # No CLAUDE.md from the directories above the turn's (it reads them up to
                # `/`: in the default run directory, /tmp's, which any local user or an
                # upstream with a /tmp root can write): the model's instructions are the
                # prompt's. Measured: a planted /tmp/…/CLAUDE.md reached the model.
                "CLAUDE_CODE_DISABLE_CLAUDE_MDS": "1",
            }
        )
        if cfg.provider == "scripted":
            assert inputs.model_url is not None
            env["ANTHROPIC_BASE_URL"] = inputs.model_url
            env["ANTHROPIC_API_KEY"] = SCRIPTED_MODEL_KEY
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
        mcp_path = write_private(
            inputs.turn_dir / "claude-mcp.json", json.dumps({"mcpServers": servers})
        )
        argv = [
            *inputs.argv,
            "-p",
            "--mcp-config",
            str(mcp_path),
            "--strict-mcp-config",
            "--output-format",
            "stream-json",
            "--verbose",
            "--no-session-persistence",
        ]
        allowed = [f"mcp__{SERVER_NAME}"] if bridge is not None else []
        if inputs.strict:
            # Claude Code's own settings in addition to the sandbox: only the built-in
            # tools of the kinds the run policy names are offered, and they are
            # allowed without a prompt (-p has nobody to ask); nothing else is.
            own = [t for kind in sorted(local_tool_kinds(inputs.local_tools)) for t in TOOLS[kind]]
            argv += ["--tools", ",".join(own)]
            allowed += own
        if allowed:
            # Allow the whole SharedOS server (SharedOS authorizes each call itself);
            # never --dangerously-skip-permissions (refused as root anyway).
            argv += ["--allowedTools", ",".join(allowed)]
        if cfg.provider == "scripted":
            argv += ["--model", cfg.declared_model]
        return Launch(
            argv=argv, env=env, cwd=inputs.work, files=[mcp_path], task=task_argv(inputs.prompt)
        )

    def parse_output(self, stdout: str) -> HarnessOutput:
        """``stream-json`` events: tool_use blocks answered by tool_result blocks."""
        out = json_lines(stdout)
        by_id: dict[str, HarnessToolEvent] = {}
        for ev in out.events:
            kind = ev.get("type")
            if kind == "system" and ev.get("subtype") == "init":
                for server in ev.get("mcp_servers") or []:
                    if isinstance(server, dict) and server.get("name") == SERVER_NAME:
                        out.mcp_status = str(server.get("status"))
            content = obj(ev.get("message")).get("content")
            for block in content if isinstance(content, list) else []:
                if not isinstance(block, dict):
                    continue
                if kind == "assistant" and block.get("type") == "tool_use":
                    te = HarnessToolEvent(
                        call_id=str(block.get("id")), alias=str(block.get("name"))
                    )
                    by_id[te.call_id] = te
                    out.tool_events.append(te)
                elif kind == "user" and block.get("type") == "tool_result":
                    answered = by_id.get(str(block.get("tool_use_id")))
                    if answered is not None:
                        answered.is_error = bool(block.get("is_error", False))
                        answered.text = text_of(block.get("content"))
            if kind == "result":
                out.final_text = ev.get("result") if isinstance(ev.get("result"), str) else None
        return out

    def turn_notes(self, output: HarnessOutput) -> list[str]:
        """Nothing beyond the common notes."""
        return []
