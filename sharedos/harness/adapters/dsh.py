"""DeepSeek Harness (``dsh`` 0.2.1-rc.2, PyPI ``deepseek-harness-runtime-bin``).

Installed by ``scripts/install-tools.sh`` into its own small venv in the tools
cache (``.dsh`` links to it). It needs no system Node and requires a non-empty
``DSH_HOME``; each turn gets a fresh one inside the 0700 turn directory.

Launched as ``dsh --profile headless --patch FILE --json -- PROMPT``. The patch
file (0600) gives its ``agent-instructions`` entry no instruction file to read
(``NO_INSTRUCTION_FILES``) and inserts one ``@deepseek-ai/dsh-mcp-client`` entry for the turn
bridge (none in the live column): ``transport: streamable-http`` with the bearer header built from
``SHAREDOS_BRIDGE_TOKEN`` at boot (a ``!!js`` template, so the token is never
written to disk), or ``transport: stdio`` with the ``sharedos bridge --stdio``
command. Its model endpoint is Anthropic Messages at ``DEEPSEEK_BASE_URL``
(``POST /v1/messages``, ``x-api-key`` from ``DEEPSEEK_API_KEY``); SharedOS
points that at the scripted model only for ``provider = "scripted"`` and
selects no model. ``DSH_TELEMETRY_MODE=DISABLED`` turns its OTLP exporter off.
Under a strict run policy ``DSH_PERMISSION_MODE`` is ``workspace-write`` when
the run policy keeps an edit tool and ``read-only`` otherwise (its own
sandbox for its shell and file tools; never ``danger-full-access``).

The model sees ``mcp__sharedos__<name>``, normalized to ``[A-Za-z0-9_-]{1,64}``
with a 12-hex identity hash appended when that changed the name
(``files.read`` → ``mcp__sharedos__files_read_369b5d85e292``). A refusal
reaches the model as ``is_error: true`` and the text ``Error: <message>``;
structured content is not shown to it.

Its ``--json`` output: ``session``, ``status`` (``turn_start``,
``step_start``, ``step_end``, ``turn_end``), ``tool_call {callId, tool,
input}``, ``tool_result {callId, status: completed|error, result}``, ``text``
and ``final``. Its MCP discovery is asynchronous (the plugin does not hold the
turn until ``tools/list`` is done): a turn whose model requests never carried
the SharedOS tools is reported as such and its rows stay not exercised.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

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
from sharedos.harness.outputs import HarnessOutput, HarnessToolEvent, json_lines
from sharedos.harness.paths import dsh_dir
from sharedos.identity import McpSupport
from sharedos.testing.scripted_model.plan import SERVER_NAME

#: The dsh release this adapter (and ``shapes/dsh.py``) was written against.
DSH_VERSION = "0.2.1-rc.2"
#: The plugin that gives dsh an MCP client (it ships inside the dsh executable).
MCP_CLIENT_PLUGIN = "@deepseek-ai/dsh-mcp-client"


def _q(value: str) -> str:
    """A YAML double-quoted scalar (JSON string syntax is valid YAML)."""
    return json.dumps(value)


#: dsh's workspace-instructions entry with no instruction file to read: dsh reads
#: ``AGENTS.md``/``CLAUDE.md`` (and ``.local`` overlays) from the git repository's root
#: down to its working directory, and the directories above the turn's are not SharedOS's
#: (``--workdir`` inside a repository). A patch's ``config`` replaces the entry's whole
#: config, so the profile's ``maxBytes`` is repeated.
NO_INSTRUCTION_FILES = (
    "- id: agent-instructions",
    "  config:",
    "    maxBytes: 65536",
    "    instructionFileCandidates: []",
    "    localInstructionFileCandidates: []",
)


def turn_patch(inputs: TurnInputs) -> str:
    """The ``--patch`` overlay (YAML): no instruction files, and the SharedOS MCP client
    entry when the turn has a bridge."""
    lines = [
        "# SharedOS settings for one dsh turn (written by sharedos; deleted with the turn)",
        *NO_INSTRUCTION_FILES,
    ]
    text = "\n".join(lines) + "\n"
    return text + mcp_patch(inputs) if inputs.bridge is not None else text


def mcp_patch(inputs: TurnInputs) -> str:
    """The ``--patch`` overlay entry (YAML) inserting the SharedOS MCP client entry."""
    bridge = inputs.bridge
    assert bridge is not None
    lines = [
        "- insert:",
        "    - id: sharedos-mcp",
        f"      name: {_q(MCP_CLIENT_PLUGIN)}",
        "      config:",
        f"        serverName: {_q(SERVER_NAME)}",
        # dsh's per-call timeout, past SharedOS's own bound on the call (``client_timeout_s``)
        f"        toolCallTimeoutMs: {bridge.client_timeout_s() * 1000}",
    ]
    if bridge.transport == "http":
        assert bridge.url
        lines += [
            '        transport: "streamable-http"',
            f"        url: {_q(bridge.url)}",
            "        headers:",
            # evaluated by dsh at boot: the token stays in the environment
            f"          Authorization: !!js {_q('`Bearer ${process.env.' + TOKEN_ENV + '}`')}",
        ]
    else:
        assert bridge.command
        lines += [
            '        transport: "stdio"',
            f"        command: {_q(bridge.command[0])}",
            f"        args: [{', '.join(_q(a) for a in bridge.command[1:])}]",
        ]
        if bridge.stdio_env:
            lines.append("        env:")
            lines += [f"          {k}: {_q(v)}" for k, v in sorted(bridge.stdio_env.items())]
    return "\n".join(lines) + "\n"


class DshAdapter:
    """dsh with its bundled MCP client plugin."""

    kind: ClassVar[str] = "dsh"
    label: ClassVar[str] = "dsh"
    mcp_support: ClassVar[McpSupport] = McpSupport.NATIVE
    mcp_extension: ClassVar[str | None] = None
    live_kind: ClassVar[str] = "dsh"
    vendor_keys: ClassVar[Mapping[str, type]] = {}
    correlation_keys: ClassVar[tuple[str, ...]] = ()
    client_route: ClassVar[str] = (
        "its tool registry answers a call to an unoffered mcp__sharedos__ name as an unknown tool"
    )

    def default_command(self) -> tuple[str, ...]:
        """``.dsh/bin/dsh`` (the venv's console script, which execs the native runtime)."""
        return (str(dsh_dir() / "bin" / "dsh"),)

    def check_command(self, command: tuple[str, ...]) -> None:
        """The program must exist when it is given as a path."""
        check_paths(self.kind, command[:1])

    def version_env(self, environ: Mapping[str, str], scratch: Path) -> dict[str, str]:
        """dsh refuses to start without a non-empty ``DSH_HOME`` (it never uses ``~/.dsh``)."""
        return {**environ, "DSH_HOME": str(scratch), "DSH_TELEMETRY_MODE": "DISABLED"}

    def prepare(self, inputs: TurnInputs) -> Launch:
        """A fresh ``DSH_HOME``, the MCP patch, the model endpoint; ``--profile headless --json``."""
        cfg, env = inputs.cfg, inputs.env
        home = inputs.turn_dir / "dsh-home"
        home.mkdir(mode=0o700, exist_ok=True)
        env["DSH_HOME"] = str(home)
        env["DSH_TELEMETRY_MODE"] = "DISABLED"
        if inputs.strict:
            # dsh's own sandbox mode in addition to SharedOS's: writes only in the work
            # directory when the run policy keeps an edit tool, none otherwise (never
            # danger-full-access). Reads it does not restrict: SharedOS's view does.
            kinds = local_tool_kinds(inputs.local_tools)
            env["DSH_PERMISSION_MODE"] = "workspace-write" if "edit" in kinds else "read-only"
        if cfg.provider == "scripted":
            assert inputs.model_url is not None
            env["DEEPSEEK_BASE_URL"] = inputs.model_url
            env["DEEPSEEK_API_KEY"] = SCRIPTED_MODEL_KEY
        patch = write_private(inputs.turn_dir / "dsh-turn.patch.yml", turn_patch(inputs))
        files: list[Path] = [patch]
        argv = [*inputs.argv, "--profile", "headless", "--patch", str(patch), "--json"]
        return Launch(
            argv=argv, env=env, cwd=inputs.work, files=files, task=task_argv(inputs.prompt)
        )

    def parse_output(self, stdout: str) -> HarnessOutput:
        """``tool_call`` events answered by ``tool_result`` events; ``final``'s text."""
        out = json_lines(stdout)
        by_id: dict[str, HarnessToolEvent] = {}
        for ev in out.events:
            kind = ev.get("type")
            call_id = ev.get("callId")
            if kind == "tool_call" and isinstance(call_id, str):
                te = HarnessToolEvent(call_id=call_id, alias=str(ev.get("tool")))
                by_id[call_id] = te
                out.tool_events.append(te)
            elif kind == "tool_result" and isinstance(call_id, str) and call_id in by_id:
                result = ev.get("result")
                by_id[call_id].is_error = ev.get("status") != "completed"
                by_id[call_id].text = result[:500] if isinstance(result, str) else None
            elif kind == "final" and isinstance(ev.get("text"), str):
                out.final_text = ev["text"]
        return out

    def turn_notes(self, output: HarnessOutput) -> list[str]:
        """Nothing beyond the common notes."""
        return []
