"""The MCP harness runtime (ADR 0014's ``createMcpHarnessRuntime``).

``create_mcp_harness_runtime(harness, host_config)`` returns a runtime whose
``run_turn`` does one turn end to end:

1. computes the turn's catalogue and stamps ``SystemIdentity`` (the CLI's real
   version, column ``mcp``, ``mcpSupport``, declared model, catalogHash);
2. opens the turn bridge (HTTP with a bearer token, or stdio), and, for the
   offline provider, a scripted model endpoint;
3. has the harness's adapter write its own MCP configuration into a fresh
   0700 directory and launches the CLI non-interactively in its own process
   group;
4. waits within a deadline, kills the group on timeout or cancellation, closes
   the bridge (the port is released), and checks the door is shut;
5. returns the turn's evidence and the harness's own account of it.

With ``live=True`` no bridge is opened and no catalogue is configured: the CLI
has only its local tools (the live column).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sharedos.context import AccessContext
from sharedos.harness import recipes
from sharedos.harness.adapters import HarnessAdapter, get_adapter
from sharedos.harness.adapters.base import HarnessUnavailable
from sharedos.harness.correlate import aliases_from_events, resolve_event_tools
from sharedos.harness.endpoints import check_model_endpoints
from sharedos.harness.hostconfig import HarnessConfig, HostConfig
from sharedos.harness.outputs import HarnessOutput
from sharedos.harness.process import OutputHook, ProcessResult, redact, run_process
from sharedos.harness.scripted_model import ScriptedAttempt, ScriptedModelServer
from sharedos.harness.scripted_model.plan import IssuedCall
from sharedos.harness.tools import harness_version
from sharedos.identity import ColumnKind, McpSupport, SystemIdentity
from sharedos.toolpolicy import ToolPolicy

if TYPE_CHECKING:
    from sharedos.bridge.turnfile import StdioLaunch
    from sharedos.kernel import RuntimeHost, TurnCatalog


def build_prompt(plan: Sequence[ScriptedAttempt], *, live: bool = False) -> str:
    """The user prompt: the same instructions a real model would get for these attempts."""
    if not plan:
        return "Reply with the single word: done."
    lines = [
        "Use the SharedOS tools to make exactly these tool calls, in order, one at a time.",
        "Make each call even if you expect it to be refused; do not retry a refused call.",
    ]
    if live:
        lines = ["Use the files.read tool to make these calls, in order, one at a time."]
    for i, attempt in enumerate(plan, 1):
        shown = attempt.tool if len(attempt.tool) <= 80 else attempt.tool[:77] + "..."
        lines.append(
            f"{i}. {shown} with arguments {json.dumps(dict(attempt.arguments), sort_keys=True)}"
        )
    lines.append("Then reply with a one-line summary.")
    return "\n".join(lines)


@dataclass
class HarnessTurnResult:
    """Everything one harness turn produced: identity, evidence, and diagnostics."""

    harness: str
    transport: str | None
    identity: SystemIdentity
    turn_id: str
    process: ProcessResult
    evidence: list[Any]
    output: HarnessOutput
    issued: list[IssuedCall]
    #: canonical tool name -> the alias the harness showed the model (from its own requests)
    aliases_shown: dict[str, str]
    catalog_names: tuple[str, ...]
    model_requests: int
    #: every tool name the harness offered the model in its last request that offered any
    offered_tools: list[str]
    port_closed_after_turn: bool | None
    turn_dir: Path
    notes: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        """Wall time of the harness process."""
        return self.process.duration_s

    @property
    def saw_catalogue(self) -> bool:
        """Whether any model request of the turn carried a SharedOS tool."""
        return bool(self.aliases_shown)

    def diagnostics(self) -> dict[str, Any]:
        """JSON-ready diagnostics (no secrets: output is redacted, env is never included)."""
        return {
            "harness": self.harness,
            "transport": self.transport,
            "turnId": self.turn_id,
            "returncode": self.process.returncode,
            "timedOut": self.process.timed_out,
            "durationS": round(self.process.duration_s, 3),
            "modelRequests": self.model_requests,
            "aliasesShown": dict(self.aliases_shown),
            "offeredTools": list(self.offered_tools),
            "issued": [c.as_dict() for c in self.issued],
            "harnessOutput": self.output.as_dict(),
            "portClosedAfterTurn": self.port_closed_after_turn,
            "stderrTail": self.process.stderr[-2000:],
            "notes": list(self.notes),
        }


def port_refuses(url: str | None) -> bool | None:
    """True when nothing accepts connections at ``url``'s port any more (None: no URL)."""
    if not url:
        return None
    port = int(url.split(":")[2].split("/")[0])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(("127.0.0.1", port))
        except OSError:
            return True
    return False


@dataclass
class _Turn:
    """One turn's working state, threaded through ``run_turn``'s steps."""

    identity: SystemIdentity
    catalog_names: tuple[str, ...]
    turn_dir: Path
    prompt: str
    deadline: float
    transport: str | None
    model: ScriptedModelServer | None = None
    url: str | None = None
    launch: recipes.Launch | None = None
    on_output: OutputHook | None = None
    #: values scrubbed from the harness's output besides the launch's own
    secrets: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)


class McpHarnessRuntime:
    """Launches one configured harness CLI for SharedOS turns."""

    def __init__(
        self,
        harness: HarnessConfig,
        host_config: HostConfig | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.harness = harness
        self.host_config = host_config
        self.environ = dict(environ if environ is not None else os.environ)
        self._version: str | None = None

    @property
    def adapter(self) -> HarnessAdapter:
        """The adapter of this harness's kind."""
        return get_adapter(self.harness.kind)

    @property
    def command(self) -> tuple[str, ...]:
        """argv prefix of the CLI (host file paths resolved)."""
        if self.harness.command is None:
            return self.adapter.default_command()
        if self.host_config is None:
            return self.harness.command
        first = [self.host_config.resolve_path(p, self.environ) for p in self.harness.command[:2]]
        return (*first, *self.harness.command[2:])

    def version(self) -> str:
        """The CLI's real version, read from ``--version`` once per runtime."""
        if self._version is None:
            self._version = harness_version(self.command, self.harness.kind).version
        return self._version

    def identity(
        self,
        *,
        catalog_hash: str | None,
        policy_hash: str | None,
        live: bool = False,
        policy_revision: str | None = None,
    ) -> SystemIdentity:
        """SystemIdentity for this harness's records."""
        adapter = self.adapter
        return SystemIdentity(
            harness=self.harness.kind,
            harness_version=self.version(),
            column=ColumnKind.LIVE if live else ColumnKind.MCP,
            declared_model=self.harness.declared_model,
            mcp_support=McpSupport.NONE if live else adapter.mcp_support,
            mcp_extension=None if live else adapter.mcp_extension,
            catalog_hash=catalog_hash,
            policy_bundle_hash=policy_hash,
            policy_bundle_revision=policy_revision,
        )

    async def run_turn(
        self,
        runtime_host: RuntimeHost,
        context: AccessContext,
        tool_policy: ToolPolicy,
        *,
        plan: Sequence[ScriptedAttempt],
        workdir: Path,
        transport: str | None = None,
        stdio_launch: StdioLaunch | None = None,
        timeout_s: float | None = None,
        live: bool = False,
        prompt: str | None = None,
        on_output: OutputHook | None = None,
        secrets: Sequence[str] = (),
    ) -> HarnessTurnResult:
        """Run one turn of this harness against ``context``'s catalogue (see module doc).

        ``on_output(stream, line)`` receives the harness's stdout and stderr line by
        line while it runs, scrubbed like the captured output (``run_process``) of the
        launch's secrets (turn token, the host file's env values) and of ``secrets``
        (more values the host holds, e.g. upstream credentials).
        """
        turn = self._begin(runtime_host, context, tool_policy, plan, workdir, live=live)
        turn.on_output = on_output
        turn.secrets = tuple(secrets)
        turn.transport = None if live else (transport or self.harness.transport)
        turn.deadline = timeout_s if timeout_s is not None else self.harness.timeout_s
        turn.prompt = prompt or build_prompt(plan, live=live)
        turn.model = self._start_model(plan, turn)
        try:
            if live:
                proc = await self._launch(turn, None)
            else:
                proc = await self._run_bridged(
                    runtime_host, context, tool_policy, stdio_launch, turn
                )
        finally:
            if turn.model is not None:
                turn.model.stop()
        evidence = [] if live else list(runtime_host.evidence.query(turn_id=context.turn_id))
        return self._finish(turn, proc, evidence, context.turn_id)

    # ------------------------------------------------------------------ steps of a turn
    def _begin(
        self,
        runtime_host: RuntimeHost,
        context: AccessContext,
        tool_policy: ToolPolicy,
        plan: Sequence[ScriptedAttempt],
        workdir: Path,
        *,
        live: bool,
    ) -> _Turn:
        """The catalogue and identity of the turn, and its private directory."""
        kernel = runtime_host.kernel
        catalog: TurnCatalog | None = None if live else kernel.list_tools(context, tool_policy)
        policy_hash = getattr(kernel, "policy_hash", None)
        revision = getattr(kernel.policy, "bundle_revision", None)  # a distributed bundle's
        identity = self.identity(
            catalog_hash=None if catalog is None else str(catalog.catalog_hash),
            policy_hash=str(policy_hash) if policy_hash else None,
            live=live,
            policy_revision=str(revision) if revision is not None else None,
        )
        workdir.mkdir(parents=True, exist_ok=True)
        turn_dir = Path(tempfile.mkdtemp(prefix=f"{self.harness.id}-", dir=workdir))
        os.chmod(turn_dir, 0o700)
        names = tuple(sorted(catalog.names)) if catalog is not None else ()
        return _Turn(identity, names, turn_dir, prompt="", deadline=0.0, transport=None)

    def _start_model(
        self, plan: Sequence[ScriptedAttempt], turn: _Turn
    ) -> ScriptedModelServer | None:
        """The scripted model endpoint, when this harness's provider is the scripted one."""
        if self.harness.provider != "scripted":
            return None
        return ScriptedModelServer(
            plan,
            log_path=turn.turn_dir / "model-requests.jsonl",
            catalog_names=turn.catalog_names,
        ).start()

    async def _run_bridged(
        self,
        runtime_host: RuntimeHost,
        context: AccessContext,
        tool_policy: ToolPolicy,
        stdio_launch: StdioLaunch | None,
        turn: _Turn,
    ) -> ProcessResult:
        """Open the turn bridge, run the harness against it, close it."""
        from sharedos.bridge.turn import open_turn
        from sharedos.bridge.turnfile import StdioLaunch

        async with open_turn(
            runtime_host,
            context,
            tool_policy,
            transport=turn.transport,  # type: ignore[arg-type]
            identity=turn.identity.as_record(),
            # stdio: by default a relayed bridge whose turn file and socket sit in the
            # harness's private turn directory; the calls run here, upstreams included
            stdio=stdio_launch
            if stdio_launch is not None
            else StdioLaunch(directory=turn.turn_dir),
        ) as bridge:
            if bridge.catalog_hash != turn.identity.catalog_hash:
                turn.notes.append(
                    f"catalogHash changed between listing ({turn.identity.catalog_hash}) "
                    f"and bridge ({bridge.catalog_hash})"
                )
                turn.identity = turn.identity.model_copy(
                    update={"catalog_hash": bridge.catalog_hash}
                )
            turn.url = bridge.url
            endpoint = recipes.BridgeEndpoint(
                transport=bridge.transport,
                url=bridge.url,
                token=bridge.token,
                command=bridge.command,
            )
            return await self._launch(turn, endpoint)

    async def _launch(self, turn: _Turn, bridge: recipes.BridgeEndpoint | None) -> ProcessResult:
        """Prepare the harness's files for this turn and run it within the deadline."""
        turn.launch = launch = recipes.prepare(
            self.harness,
            bridge=bridge,
            turn_dir=turn.turn_dir,
            prompt=turn.prompt,
            model_url=turn.model.url if turn.model is not None else None,
            host_env=self.environ,
            command=self.command,
        )
        if turn.secrets:
            launch.secret_values = tuple(dict.fromkeys((*launch.secret_values, *turn.secrets)))
        if self.harness.provider != "scripted":
            # a refusing model endpoint is said now, not after the deadline's retries
            check_model_endpoints(self.harness.id, launch, skip=(turn.url,))
        try:
            return await run_process(
                launch.argv,
                env=launch.env,
                cwd=launch.cwd,
                timeout_s=turn.deadline,
                secrets=launch.secret_values,
                on_output=turn.on_output,
            )
        except (FileNotFoundError, PermissionError) as exc:
            shown = redact(launch.argv[0], launch.secret_values)
            raise HarnessUnavailable(
                f"{self.harness.id}: cannot start {shown}: {exc.strerror}"
            ) from None

    def _finish(
        self, turn: _Turn, proc: ProcessResult, evidence: list[Any], turn_id: str
    ) -> HarnessTurnResult:
        """Keep the harness's output, remove its config files, read its account of the turn."""
        assert turn.launch is not None
        (turn.turn_dir / "harness-stdout.jsonl").write_text(proc.stdout, encoding="utf-8")
        (turn.turn_dir / "harness-stderr.txt").write_text(proc.stderr, encoding="utf-8")
        # The harness config may hold the turn token (Claude Code): the turn is
        # closed, but the file goes anyway.
        for path in turn.launch.files:
            with contextlib.suppress(OSError):
                path.unlink()
        output = self.adapter.parse_output(proc.stdout)
        # events reported only by alias get their canonical tool (for correlation, aliases)
        resolve_event_tools(output.tool_events, turn.catalog_names)
        notes = [*turn.notes, *self.adapter.turn_notes(output), *self._exit_notes(turn, proc)]
        model = turn.model
        return HarnessTurnResult(
            harness=self.harness.id,
            transport=turn.transport,
            identity=turn.identity,
            turn_id=turn_id,
            process=proc,
            evidence=evidence,
            output=output,
            issued=list(model.issued) if model is not None else [],
            # the scripted model reads what was offered; with an operator-supplied model,
            # the harness's own events say which name the model used for each tool it called
            aliases_shown=dict(model.offered_seen)
            if model is not None
            else aliases_from_events(output.tool_events),
            catalog_names=turn.catalog_names,
            model_requests=model.requests if model is not None else 0,
            offered_tools=list(model.last_offered) if model is not None else [],
            port_closed_after_turn=port_refuses(turn.url) if turn.url else None,
            turn_dir=turn.turn_dir,
            notes=notes,
        )

    def _exit_notes(self, turn: _Turn, proc: ProcessResult) -> list[str]:
        """How the harness process ended, when that was not a clean exit."""
        if proc.timed_out:
            return [
                f"{self.harness.id} did not finish within {turn.deadline:g} s; "
                "its process group was killed"
            ]
        if proc.returncode not in (0, None):
            return [
                f"{self.harness.id} exited with status {proc.returncode}: "
                f"{proc.stderr.strip()[-300:]}"
            ]
        return []


def create_mcp_harness_runtime(
    harness: HarnessConfig | str,
    host_config: HostConfig | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> McpHarnessRuntime:
    """The ADR's ``createMcpHarnessRuntime``: a runtime for one configured harness.

    ``harness`` is a ``HarnessConfig`` or the id of one in ``host_config`` (or
    in the embedded offline default when ``host_config`` is ``None``).
    """
    if isinstance(harness, str):
        from sharedos.harness.hostconfig import default_host_config

        host = host_config or default_host_config()
        return McpHarnessRuntime(host.get(harness), host, environ=environ)
    return McpHarnessRuntime(harness, host_config, environ=environ)
