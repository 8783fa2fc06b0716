"""The MCP harness runtime (ADR 0014's ``createMcpHarnessRuntime``).

``create_mcp_harness_runtime(harness, host_config)`` returns a runtime whose
``run_turn`` does one turn end to end:

1. computes the turn's catalogue and stamps ``SystemIdentity`` (the CLI's real
   version, column ``mcp``, ``mcpSupport``, declared model, catalogHash);
2. opens the turn bridge (HTTP with a bearer token, or stdio), and, for the
   offline provider, a scripted model endpoint;
3. writes the harness's own MCP configuration into a fresh 0700 directory and
   launches the CLI non-interactively in its own process group;
4. waits within a deadline, kills the group on timeout or cancellation, closes
   the bridge (the port is released), and checks the door is shut;
5. returns the turn's evidence and the harness's own account of it.

With ``live=True`` no bridge is opened and no catalogue is configured: the CLI
has only its local tools (the live column).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sharedos.context import AccessContext
from sharedos.harness import recipes
from sharedos.harness.hostconfig import HarnessConfig, HostConfig
from sharedos.harness.outputs import HarnessOutput, parse_output
from sharedos.harness.process import ProcessResult, redact, run_process
from sharedos.harness.scripted_model import ScriptedAttempt, ScriptedModelServer
from sharedos.harness.scripted_model.plan import IssuedCall
from sharedos.harness.tools import (
    HarnessUnavailable,
    adapter_version,
    default_command,
    harness_version,
)
from sharedos.identity import ColumnKind, McpSupport, SystemIdentity
from sharedos.toolpolicy import ToolPolicy


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
    #: every tool name the harness offered the model in its last request
    offered_tools: list[str]
    port_closed_after_turn: bool | None
    turn_dir: Path
    notes: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        """Wall time of the harness process."""
        return self.process.duration_s

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
        except ConnectionRefusedError:
            return True
        except OSError:
            return True
    return False


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
    def command(self) -> tuple[str, ...]:
        """argv prefix of the CLI (host file paths resolved)."""
        if self.harness.command is None:
            return default_command(self.harness.kind)
        if self.host_config is None:
            return self.harness.command
        first = [self.host_config.resolve_path(p, self.environ) for p in self.harness.command[:2]]
        return (*first, *self.harness.command[2:])

    def version(self) -> str:
        """The CLI's real version, read from ``--version`` once per runtime."""
        if self._version is None:
            info = harness_version(self.command, self.harness.kind)
            self._version = info.version
        return self._version

    def identity(
        self, *, catalog_hash: str | None, policy_hash: str | None, live: bool = False
    ) -> SystemIdentity:
        """SystemIdentity for this harness's records."""
        ext = self.harness.mcp_extension
        return SystemIdentity(
            harness=self.harness.kind,
            harness_version=self.version(),
            column=ColumnKind.LIVE if live else ColumnKind.MCP,
            declared_model=self.harness.declared_model,
            mcp_support=McpSupport.NONE if live else McpSupport(self.harness.mcp_support),
            mcp_extension=None if live else ext,
            catalog_hash=catalog_hash,
            policy_bundle_hash=policy_hash,
        )

    async def run_turn(
        self,
        runtime_host: Any,
        context: AccessContext,
        tool_policy: ToolPolicy,
        *,
        plan: Sequence[ScriptedAttempt],
        workdir: Path,
        transport: str | None = None,
        stdio_launch: Any = None,
        timeout_s: float | None = None,
        live: bool = False,
        prompt: str | None = None,
    ) -> HarnessTurnResult:
        """Run one turn of this harness against ``context``'s catalogue (see module doc)."""
        cfg = self.harness
        transport = None if live else (transport or cfg.transport)
        deadline = timeout_s if timeout_s is not None else cfg.timeout_s
        kernel = runtime_host.kernel
        catalog = None if live else kernel.list_tools(context, tool_policy)
        catalog_hash = None if catalog is None else str(catalog.catalog_hash)
        policy_hash = getattr(kernel, "policy_hash", None)
        identity = self.identity(
            catalog_hash=catalog_hash,
            policy_hash=str(policy_hash) if policy_hash else None,
            live=live,
        )
        workdir.mkdir(parents=True, exist_ok=True)
        turn_dir = Path(tempfile.mkdtemp(prefix=f"{cfg.id}-", dir=workdir))
        os.chmod(turn_dir, 0o700)
        text = prompt or build_prompt(plan, live=live)
        notes: list[str] = []
        model: ScriptedModelServer | None = None
        if cfg.provider == "scripted":
            model = ScriptedModelServer(
                plan,
                log_path=turn_dir / "model-requests.jsonl",
                catalog_names=sorted(catalog.names) if catalog is not None else (),
            ).start()
        url: str | None = None
        model_url = model.url if model is not None else None

        def prepare(bridge: recipes.BridgeEndpoint | None) -> recipes.Launch:
            return recipes.prepare(
                cfg,
                bridge=bridge,
                turn_dir=turn_dir,
                prompt=text,
                model_url=model_url,
                host_env=self.environ,
                command=self.command,
            )

        try:
            if live:
                launch = prepare(None)
                proc = await self._run(launch, deadline)
            else:
                from sharedos.bridge.turn import open_turn

                async with open_turn(
                    runtime_host,
                    context,
                    tool_policy,
                    transport=transport,  # type: ignore[arg-type]
                    identity=identity.as_record(),
                    stdio=stdio_launch,
                ) as turn:
                    if turn.catalog_hash != catalog_hash:
                        notes.append(
                            f"catalogHash changed between listing ({catalog_hash}) and bridge ({turn.catalog_hash})"
                        )
                        identity = identity.model_copy(update={"catalog_hash": turn.catalog_hash})
                    url = turn.url
                    bridge = recipes.BridgeEndpoint(
                        transport=turn.transport,
                        url=turn.url,
                        token=turn.token,
                        command=turn.command,
                    )
                    launch = prepare(bridge)
                    proc = await self._run(launch, deadline)
        finally:
            if model is not None:
                model.stop()
        port_closed = port_refuses(url) if url else None
        (turn_dir / "harness-stdout.jsonl").write_text(proc.stdout, encoding="utf-8")
        (turn_dir / "harness-stderr.txt").write_text(proc.stderr, encoding="utf-8")
        # The harness config may hold the turn token (Claude Code): the turn is
        # closed, but the file goes anyway.
        for path in launch.files:
            with contextlib.suppress(OSError):
                path.unlink()
        output = parse_output(launch.output_format, proc.stdout)
        evidence = [] if live else list(runtime_host.evidence.query(turn_id=context.turn_id))
        if cfg.kind == "pi-adapter" and (v := adapter_version()):
            notes.append(f"MCP client: pi-mcp-adapter {v} (extension loaded with -e)")
        if proc.timed_out:
            notes.append(
                f"{cfg.id} did not finish within {deadline:g} s; its process group was killed"
            )
        elif proc.returncode not in (0, None):
            notes.append(
                f"{cfg.id} exited with status {proc.returncode}: {proc.stderr.strip()[-300:]}"
            )
        return HarnessTurnResult(
            harness=cfg.id,
            transport=transport,
            identity=identity,
            turn_id=context.turn_id,
            process=proc,
            evidence=evidence,
            output=output,
            issued=list(model.issued) if model is not None else [],
            aliases_shown=dict(model.offered_seen) if model is not None else {},
            catalog_names=tuple(sorted(catalog.names)) if catalog is not None else (),
            model_requests=model.requests if model is not None else 0,
            offered_tools=list(model.last_offered) if model is not None else [],
            port_closed_after_turn=port_closed,
            turn_dir=turn_dir,
            notes=notes,
        )

    async def _run(self, launch: recipes.Launch, deadline: float) -> ProcessResult:
        try:
            return await run_process(
                launch.argv,
                env=launch.env,
                cwd=launch.cwd,
                timeout_s=deadline,
                secrets=launch.secret_values,
            )
        except (FileNotFoundError, PermissionError) as exc:
            raise HarnessUnavailable(
                f"{self.harness.id}: cannot start {redact(launch.argv[0], launch.secret_values)}: {exc.strerror}"
            ) from None


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


async def cancel_safely(task: asyncio.Task[Any]) -> None:
    """Cancel a running ``run_turn`` task and wait until its process group is dead."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
