"""The MCP harness runtime (ADR 0014's ``createMcpHarnessRuntime``).

``create_mcp_harness_runtime(harness, host_config)`` returns a runtime whose
``run_turn`` does one turn end to end:

1. computes the turn's catalogue and stamps ``SystemIdentity`` (the CLI's real
   version, column ``mcp``, ``mcpSupport``, declared model, catalogHash);
2. opens the turn bridge (HTTP with a bearer token, or stdio), and, for the
   offline provider, a scripted model endpoint;
3. has the harness's adapter write its own MCP configuration into a fresh
   0700 directory and launches the CLI non-interactively in its own process
   group — under a strict run policy inside a bubblewrap sandbox
   (``sharedos.confine``: the system read-only, its turn directory
   read-write, no managed root, a loopback holding only the bridge and the
   model; a strict run that cannot be confined raises
   ``ConfinementUnavailable`` unless ``unconfined=True``), otherwise under a
   supervisor that ends its whole process tree with the run;
4. waits within a deadline, kills the group on timeout or cancellation, closes
   the bridge (the port is released), and checks the door is shut;
5. returns the turn's evidence and the harness's own account of it.

With ``live=True`` no bridge is opened and no catalogue is configured: the CLI
has only its local tools (the live column).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sharedos.atomicfile import write_atomically
from sharedos.confine import (
    ConfinementUnavailable,
    HarnessSandbox,
    SandboxSetupFailed,
    StdioDoor,
    canonical,
    find_bubblewrap,
    private_files,
    supervised,
)
from sharedos.confine.door import STDIO_PREFIX, private_base, run_base
from sharedos.confine.leftovers import Claim, claim, discard, remove_tree
from sharedos.confine.ports import ServeFn
from sharedos.confine.programs import too_wide
from sharedos.context import AccessContext
from sharedos.evidence.url import store_files
from sharedos.harness import recipes
from sharedos.harness.adapters import HarnessAdapter, get_adapter
from sharedos.harness.adapters.base import HarnessUnavailable
from sharedos.harness.correlate import aliases_from_events, resolve_event_tools
from sharedos.harness.endpoints import check_model_endpoints, loopback_ports
from sharedos.harness.hostconfig import HarnessConfig, HostConfig
from sharedos.harness.jiti import adopt, jiti_cache_dir
from sharedos.harness.outputs import HarnessOutput
from sharedos.harness.paths import dsh_dir, tools_dir
from sharedos.harness.process import OutputHook, ProcessResult, redact, run_process
from sharedos.harness.tools import harness_version
from sharedos.identity import (
    ColumnKind,
    Confinement,
    ConfinementState,
    McpSupport,
    SystemIdentity,
)
from sharedos.testing.scripted_model import ScriptedAttempt, ScriptedModelServer
from sharedos.testing.scripted_model.plan import IssuedCall
from sharedos.toolpolicy import RunMode, ToolPolicy

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
    def failed(self) -> bool:
        """The harness timed out, exited non-zero, or said its turn failed (``output.error``)."""
        return (
            self.process.timed_out
            or self.process.returncode not in (0, None)
            or self.output.error is not None
        )

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


def _port(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


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
    #: the harness's sandbox (None: not confined; see ``identity.confinement``)
    sandbox: HarnessSandbox | None = None
    #: serves the HTTP bridge on a listener from the sandbox's loopback
    serve_bridge: ServeFn | None = None
    #: the turn's view of the harness's own local tools (``ToolPolicy.harness_local``)
    strict: bool = False
    local_tools: tuple[str, ...] = ()
    #: confined stdio: a private host directory, outside the sandbox's view, for the
    #: turn file, its open marker and relay socket, and the door's bridge HOME
    stdio_dir: Path | None = None
    #: this run's claim on ``stdio_dir`` (``sharedos.confine.leftovers``)
    stdio_claim: Claim | None = None
    #: the host's bound on one call's handler (``RuntimeHost.handler_timeout_s``): the
    #: harness's MCP client is told to wait past it (``BridgeEndpoint.client_timeout_s``)
    answer_within_s: float | None = None


def bundle_stamp(policy: Any) -> tuple[str | None, bool]:
    """(revision, kept) of a kernel's policy: a distributed bundle's revision (None for a
    policy of files), and whether it was put in force from the host's kept copy."""
    revision = getattr(policy, "bundle_revision", None)
    kept = getattr(policy, "bundle_kept", False) is True
    return (str(revision) if revision is not None else None), kept


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

    def check_env(self) -> None:
        """Raise ``MissingHostVariable`` when an env value of this harness names a ``${VAR}``
        unset in the host's environment: said before a turn opens, not as the launch fails."""
        self.harness.env.resolve(self.environ, harness=self.harness.id)

    def version(self) -> str:
        """The CLI's real version, read from ``--version`` once per runtime.

        The probe may take as long as the harness's turn (``timeout_s``, the operator's
        bound for this CLI): a fixed 30 s marked a harness not available on a saturated
        machine, where a Node CLI's start alone took longer, though its turns would have run.
        """
        if self._version is None:
            self._version = harness_version(
                self.command, self.harness.kind, self.environ, timeout_s=self.harness.timeout_s
            ).version
        return self._version

    def identity(
        self,
        *,
        catalog_hash: str | None,
        policy_hash: str | None,
        live: bool = False,
        policy_revision: str | None = None,
        policy_kept: bool = False,
        confinement: Confinement | None = None,
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
            policy_bundle_kept=True if policy_kept else None,
            confinement=confinement,
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
        unconfined: bool = False,
        managed_roots: Sequence[str | os.PathLike[str]] = (),
        upstream_confinement: Mapping[str, str] | None = None,
    ) -> HarnessTurnResult:
        """Run one turn of this harness against ``context``'s catalogue (see module doc).

        ``on_output(stream, line)`` receives the harness's stdout and stderr line by
        line while it runs, scrubbed like the captured output (``run_process``) of the
        launch's secrets (turn token, the host file's env values) and of ``secrets``
        (more values the host holds, e.g. upstream credentials).

        Confinement (docs/confinement.md): under a strict ``tool_policy`` the CLI
        runs in a bubblewrap sandbox that shows none of ``managed_roots`` (plus
        what the runtime finds itself: the evidence store, the stdio turn's
        policy and sandbox root, the host file, its keys); ``ConfinementUnavailable``
        (or its subclass ``SandboxSetupFailed``) when that cannot be done, or
        ``ManagedRootVisible`` when the view would show a managed root —
        unless ``unconfined`` (the operator's ``--unconfined``), which is then
        stamped on the identity. ``upstream_confinement`` (upstream id → how it
        was confined) is recorded beside it.
        """
        turn = self._begin(runtime_host, context, tool_policy, plan, workdir, live=live)
        turn.on_output = on_output
        turn.secrets = tuple(secrets)
        turn.transport = None if live else (transport or self.harness.transport)
        turn.deadline = timeout_s if timeout_s is not None else self.harness.timeout_s
        turn.prompt = prompt or build_prompt(plan, live=live)
        try:
            self._confine(
                turn,
                tool_policy,
                runtime_host,
                stdio_launch,
                unconfined=unconfined,
                managed_roots=managed_roots,
                upstreams=upstream_confinement,
            )
        except BaseException:
            remove_tree(turn.turn_dir)  # nothing ran in it
            _remove_stdio_dir(turn)
            raise
        try:
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
        finally:
            # The harness config may hold the turn token (Claude Code): whatever
            # ended the turn, the file goes with it.
            if turn.launch is not None:
                for path in turn.launch.files:
                    with contextlib.suppress(OSError):
                        path.unlink()
            if turn.sandbox is not None:
                await turn.sandbox.close()
            _remove_stdio_dir(turn)
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
        revision, kept = bundle_stamp(kernel.policy)
        identity = self.identity(
            catalog_hash=None if catalog is None else str(catalog.catalog_hash),
            policy_hash=str(policy_hash) if policy_hash else None,
            live=live,
            policy_revision=revision,
            policy_kept=kept,
        )
        workdir.mkdir(parents=True, exist_ok=True)
        turn_dir = Path(tempfile.mkdtemp(prefix=f"{self.harness.id}-", dir=workdir))
        os.chmod(turn_dir, 0o700)
        names = tuple(sorted(catalog.names)) if catalog is not None else ()
        turn = _Turn(identity, names, turn_dir, prompt="", deadline=0.0, transport=None)
        turn.strict = tool_policy.mode is RunMode.STRICT
        turn.local_tools = tuple(tool_policy.harness_local)
        turn.answer_within_s = runtime_host.handler_timeout_s
        return turn

    def _confine(
        self,
        turn: _Turn,
        tool_policy: ToolPolicy,
        runtime_host: RuntimeHost,
        stdio_launch: StdioLaunch | None,
        *,
        unconfined: bool,
        managed_roots: Sequence[str | os.PathLike[str]],
        upstreams: Mapping[str, str] | None,
    ) -> None:
        """Plan the turn's sandbox (strict) or say plainly that it has none; stamp the identity."""
        ups = dict(upstreams) if upstreams else None
        if tool_policy.mode is not RunMode.STRICT:
            record = Confinement(
                state=ConfinementState.OPEN,
                note=(
                    f"open run policy {tool_policy.name!r}: the harness and its own tools are not "
                    "confined"
                ),
                upstreams=ups,
            )
        elif unconfined:
            record = Confinement(
                state=ConfinementState.UNCONFINED,
                note=(
                    f"strict run policy {tool_policy.name!r} started with --unconfined: the "
                    "harness's own tools could reach every managed resource"
                ),
                upstreams=ups,
            )
        else:
            mechanism = find_bubblewrap()  # ConfinementUnavailable says why not
            door = None
            managed = self._managed_roots(runtime_host, stdio_launch, managed_roots)
            if turn.transport == "stdio":
                door = StdioDoor(env={})
            try:
                if door is not None:
                    # The turn file (which the bridge outside the sandbox obeys), its relay
                    # socket and the bridge's HOME must not be where the harness can write:
                    # a private host directory beside the door's, itself a managed root.
                    where = door.directory.parent
                    turn.stdio_dir = Path(tempfile.mkdtemp(prefix=STDIO_PREFIX, dir=where))
                    # killed outright, the run leaves it: the next run removes it
                    with contextlib.suppress(OSError):
                        turn.stdio_claim = claim(turn.stdio_dir)
                    managed.append(str(turn.stdio_dir))
                    door.env = recipes.base_env(self.environ, turn.stdio_dir / "bridge-home")
                sandbox = HarnessSandbox.plan(
                    mechanism,
                    readonly=self._install_paths(),
                    writable=[turn.turn_dir],
                    managed=managed,
                    network=self._network(),
                    placeholders={str(turn.turn_dir): "{turn}"},
                    door=door,
                    # the workdir keeps every turn's directory (``sharedos run --workdir``
                    # keeps them all): a readonly path holding it must not show the others
                    private=[turn.turn_dir.parent],
                    declared=self._declared_readonly(),
                )
                if stdio_launch is not None and stdio_launch.directory is not None:
                    _refuse_visible_turn_files(Path(stdio_launch.directory), sandbox)
            except BaseException:
                if door is not None:
                    door.close()
                raise
            turn.sandbox = sandbox
            record = sandbox.record(ups)
        turn.identity = turn.identity.model_copy(update={"confinement": record})

    def _install_paths(self) -> list[str]:
        """What the CLI needs to run, read-only: the pinned tools, its command, extra paths.

        Paths are given as the CLI is called (``.tools/...``): the view binds what
        they resolve to and recreates the symbolic links on the way.
        """
        paths: list[str] = []
        roots: list[str] = []
        for root in (tools_dir(), dsh_dir()):
            if root.exists():
                paths.append(str(root))
                roots.append(canonical(root))
        for part in self.command[:2]:
            if "/" in part and os.path.exists(part):
                real = canonical(part)
                where = os.path.dirname(real)
                # its directory (a CLI's own files beside it), unless that is a home,
                # the temporary directory or ``/``: then the file alone
                if not any(real.startswith(r.rstrip("/") + "/") for r in roots) and not too_wide(
                    where
                ):
                    paths.append(where)
                paths.append(part)  # its own symlinks (``.tools/node_modules/.bin/claude``)
        return [*paths, *self._declared_readonly()]

    def _declared_readonly(self) -> list[str]:
        """The host file's ``[confinement] readonly`` paths, as the host reads them."""
        if self.host_config is None:
            return []
        return [
            # paths, as every path of the host file is read (a bare name is no program
            # looked up on PATH here, and never one in the working directory)
            self.host_config.written_path(p, self.environ, what="[confinement] readonly")
            for p in self.host_config.confinement.readonly
        ]

    def _network(self) -> Any:
        """``loopback`` (default) or ``host``, from the host file's ``[confinement]``."""
        if self.host_config is None:
            return "loopback"
        return self.host_config.confinement.network

    def _managed_roots(
        self,
        runtime_host: RuntimeHost,
        stdio_launch: StdioLaunch | None,
        extra: Sequence[str | os.PathLike[str]],
    ) -> list[str]:
        """Every managed root the runtime knows of, beside the caller's ``extra``."""
        # every turn's door and stdio turn files (its own door is bound elsewhere, at
        # /run/sharedos/door): a view that holds the temporary directory must not show them
        roots: list[str] = [os.fspath(p) for p in extra] + [str(private_base())]
        store_path = getattr(getattr(runtime_host, "evidence", None), "path", None)
        if isinstance(store_path, str):
            roots += store_files(store_path, self.environ)
        if stdio_launch is not None:
            if stdio_launch.evidence_db is not None:
                roots += store_files(stdio_launch.evidence_db, self.environ)
            roots += map(str, stdio_launch.rules)
            if stdio_launch.bundle is not None:
                roots.append(str(stdio_launch.bundle))
            if stdio_launch.sandbox_root is not None:
                roots.append(str(stdio_launch.sandbox_root))
        if self.host_config is not None:
            roots += self.host_config.managed_paths(self.environ)
        return roots

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
        opened = False
        try:
            async with self._bridge(
                runtime_host, context, tool_policy, stdio_launch, turn
            ) as bridge:
                opened = True
                return await self._bridged(turn, bridge)
        except OSError as exc:
            if opened:
                raise
            # the stdio turn file could not be written (a full disk, a quota): the turn
            # opened and closed with no call, and the harness cannot start
            raise self._cannot_write(turn, exc) from None

    def _cannot_write(self, turn: _Turn, exc: OSError) -> HarnessUnavailable:
        """Remove the turn directory (what was written of the harness's files) and say why
        the harness cannot start: its files could not be written there."""
        remove_tree(turn.turn_dir)
        return HarnessUnavailable(
            f"{self.harness.id}: cannot write its files for this turn in "
            f"{turn.turn_dir.parent}: {exc.strerror or exc}"
        )

    def _bridge(
        self,
        runtime_host: RuntimeHost,
        context: AccessContext,
        tool_policy: ToolPolicy,
        stdio_launch: StdioLaunch | None,
        turn: _Turn,
    ) -> contextlib.AbstractAsyncContextManager[Any]:
        """The turn's bridge (``open_turn``) for this harness run."""
        from sharedos.bridge.turn import open_turn
        from sharedos.bridge.turnfile import StdioLaunch

        return open_turn(
            runtime_host,
            context,
            tool_policy,
            transport=turn.transport,  # type: ignore[arg-type]
            identity=turn.identity.as_record(),
            # stdio: by default a relayed bridge whose turn file and socket sit in a
            # private host directory (confined) or the harness's turn directory (not);
            # the calls run here, upstreams included
            stdio=stdio_launch
            if stdio_launch is not None
            else StdioLaunch(directory=turn.stdio_dir or turn.turn_dir),
        )

    async def _bridged(self, turn: _Turn, bridge: Any) -> ProcessResult:
        """Run the harness against the open ``bridge``."""
        if bridge.catalog_hash != turn.identity.catalog_hash:
            turn.notes.append(
                f"catalogHash changed between listing ({turn.identity.catalog_hash}) "
                f"and bridge ({bridge.catalog_hash})"
            )
            turn.identity = turn.identity.model_copy(update={"catalog_hash": bridge.catalog_hash})
        turn.url = bridge.url
        turn.serve_bridge = bridge.serve_socket
        if bridge.relay_secret:
            # an unconfined harness can read its turn file: what it prints is scrubbed of it
            turn.secrets = (*turn.secrets, bridge.relay_secret)
        endpoint = recipes.BridgeEndpoint(
            transport=bridge.transport,
            url=bridge.url,
            token=bridge.token,
            command=bridge.command,
            answer_within_s=turn.answer_within_s,
        )
        return await self._launch(turn, endpoint)

    async def _launch(self, turn: _Turn, bridge: recipes.BridgeEndpoint | None) -> ProcessResult:
        """Prepare the harness's files for this turn and run it within the deadline."""
        sandbox = turn.sandbox
        if sandbox is not None and bridge is not None and bridge.transport == "stdio":
            # the stdio bridge needs what the sandbox hides: it runs outside, on the
            # harness's own pipes, behind the door (sharedos.confine.door)
            assert sandbox.door is not None and bridge.command
            sandbox.door.command = list(bridge.command)
            bridge = replace(bridge, command=sandbox.connector())
        try:
            turn.launch = launch = recipes.prepare(
                self.harness,
                bridge=bridge,
                turn_dir=turn.turn_dir,
                prompt=turn.prompt,
                model_url=turn.model.url if turn.model is not None else None,
                host_env=self.environ,
                command=self.command,
                strict=turn.strict,
                confined=sandbox is not None,
                local_tools=turn.local_tools,
            )
        except OSError as exc:
            # a full disk or a quota under the run directory: the harness cannot start,
            # and what was written of its files (one may hold the turn token) goes
            raise self._cannot_write(turn, exc) from None
        if turn.secrets:
            launch.secret_values = tuple(dict.fromkeys((*launch.secret_values, *turn.secrets)))
        if self.harness.provider != "scripted":
            # a refusing model endpoint is said now, not after the deadline's retries
            check_model_endpoints(self.harness.id, launch, skip=(turn.url,))
        try:
            if sandbox is not None:
                return await self._run_confined(turn, launch, sandbox)
            # Not confined: a supervisor still ends the whole tree with the run, and
            # removes the token file, whatever kills the run (SIGKILL included).
            holding = [str(p) for p in private_files(launch.files, launch.secret_values, keep=True)]
            return await run_process(
                supervised(launch.argv, cleanup=holding),
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
        except OSError as exc:
            if exc.errno != errno.E2BIG:
                raise
            # the system refused the exec: a prompt (or a plan's arguments in it) or an env
            # value too long for one command line; said as such, never as a traceback.
            # Nothing ran: its directory goes, as when its files cannot be written.
            remove_tree(turn.turn_dir)
            raise HarnessUnavailable(too_long(self.harness.id, launch)) from None

    async def _run_confined(
        self, turn: _Turn, launch: recipes.Launch, sandbox: HarnessSandbox
    ) -> ProcessResult:
        """Run the prepared launch inside its sandbox, serving its loopback from the host."""
        servers: dict[int, ServeFn] = {}
        if turn.url is not None and turn.serve_bridge is not None:
            servers[_port(turn.url)] = turn.serve_bridge
        if turn.model is not None:
            servers[turn.model.port] = turn.model.serve_socket
        extra = [*(self.host_config.confinement.loopback_ports if self.host_config else ())]
        if turn.model is None:  # the operator's model: its loopback endpoint is let in
            extra += [p for p in loopback_ports(launch, skip=(turn.url,)) if p not in servers]
        sandbox.with_ports([*servers, *dict.fromkeys(extra)])
        for cmd in self.command[:1]:
            if "/" in cmd and not os.path.exists(cmd):
                raise FileNotFoundError(2, "No such file or directory", cmd)
        # The sandbox's /tmp is its own; TMPDIR points inside the turn directory so a
        # CLI that refuses to keep helpers "under a temporary dir" (Codex) still can.
        tmp = turn.turn_dir / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        if self.harness.kind == "pi-adapter":
            await self._with_jiti_cache(sandbox, tmp)
        private = private_files(launch.files, launch.secret_values)
        argv = sandbox.argv(launch.argv, cwd=launch.cwd, private=private)
        env = {**launch.env, "TMPDIR": str(tmp)}
        serving = asyncio.ensure_future(sandbox.serve(servers))
        running = asyncio.ensure_future(
            run_process(
                argv,
                env=env,
                cwd=launch.cwd,
                timeout_s=turn.deadline,
                secrets=launch.secret_values,
                on_output=turn.on_output,
                pass_fds=sandbox.pass_fds,
                on_spawn=sandbox.spawned,
            )
        )
        failed = False
        try:
            await asyncio.wait({serving, running}, return_when=asyncio.FIRST_COMPLETED)
            if serving.done() and serving.exception() is not None and not running.done():
                failed = True  # the sandbox's set-up failed: end the harness, do not wait
                running.cancel()
            try:
                proc = await running
            except asyncio.CancelledError:
                if not failed:
                    raise
                proc = None
        finally:
            if not serving.done():
                serving.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await serving
            if not running.done():
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await running
        failure = None if serving.cancelled() else serving.exception()
        if isinstance(failure, ConfinementUnavailable):
            tail = proc.stderr.strip()[-300:] if proc is not None else ""
            raise SandboxSetupFailed(
                f"{self.harness.id}: {failure}" + (f" ({tail})" if tail else "")
            ) from None
        if failure is not None:
            raise failure
        assert proc is not None
        return proc

    async def _with_jiti_cache(self, sandbox: HarnessSandbox, tmp: Path) -> None:
        """Seed this turn's compile cache of pi-mcp-adapter from the trusted one (``harness.jiti``)."""
        target = jiti_cache_dir()
        if not target.is_dir():
            with contextlib.suppress(Exception):  # no cache: the turn compiles, as before
                await self._warm_jiti(sandbox, target)
        if target.is_dir():
            # a copy of its own: jiti drops its cache when the directory is not writable
            # (measured), and what this turn writes must not reach the next one
            shutil.copytree(target, tmp / "jiti", dirs_exist_ok=True)

    async def _warm_jiti(self, like: HarnessSandbox, target: Path) -> None:
        """One run of Pi + the adapter, scripted model, no plan, no bridge: fills the cache."""
        from sharedos.harness.hostconfig import SecretEnv
        from sharedos.testing.scripted_model.plan import SCRIPTED_MODEL_NAME

        # under the runs' private base (masked in every upstream sandbox): what is written
        # here becomes the cache every later turn trusts
        warm = Path(tempfile.mkdtemp(prefix="sharedos-jiti-warm-", dir=run_base()))
        model = ScriptedModelServer([]).start()
        sandbox: HarnessSandbox | None = None
        try:
            cfg = self.harness.model_copy(
                update={
                    "provider": "scripted",
                    "declared_model": SCRIPTED_MODEL_NAME,
                    "env": SecretEnv(),
                    "args": (),
                }
            )
            launch = recipes.prepare(
                cfg,
                bridge=None,
                turn_dir=warm,
                prompt="Reply with the single word: done.",
                model_url=model.url,
                host_env=self.environ,
                command=self.command,
                strict=True,
                confined=True,
            )
            sandbox = HarnessSandbox.plan(
                like.mechanism,
                readonly=self._install_paths(),
                writable=[warm],
                managed=[],
                network="loopback",
                declared=self._declared_readonly(),
            )
            sandbox.with_ports([model.port])
            (warm / "tmp").mkdir(mode=0o700)
            argv = sandbox.argv(launch.argv, cwd=launch.cwd)
            serving = asyncio.ensure_future(sandbox.serve({model.port: model.serve_socket}))
            await run_process(
                argv,
                env={**launch.env, "TMPDIR": str(warm / "tmp")},
                cwd=launch.cwd,
                timeout_s=180,
                pass_fds=sandbox.pass_fds,
                on_spawn=sandbox.spawned,
            )
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await serving
            adopt(warm / "tmp" / "jiti", target)
        finally:
            model.stop()
            if sandbox is not None:
                await sandbox.close()
            shutil.rmtree(warm, ignore_errors=True)

    def _finish(
        self, turn: _Turn, proc: ProcessResult, evidence: list[Any], turn_id: str
    ) -> HarnessTurnResult:
        """Keep the harness's output, remove its config files, read its account of the turn."""
        assert turn.launch is not None
        _write_fresh(turn.turn_dir / "harness-stdout.jsonl", proc.stdout)
        _write_fresh(turn.turn_dir / "harness-stderr.txt", proc.stderr)
        if turn.sandbox is not None:
            view = turn.sandbox.view.describe()
            _write_fresh(
                turn.turn_dir / "sandbox-view.json", json.dumps(view, indent=2, sort_keys=True)
            )
        output = self.adapter.parse_output(proc.stdout)
        # events reported only by alias get their canonical tool (for correlation, aliases)
        resolve_event_tools(output.tool_events, turn.catalog_names)
        notes = [
            *turn.notes,
            *self.adapter.turn_notes(output),
            *self._exit_notes(turn, proc, output),
        ]
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

    def _exit_notes(self, turn: _Turn, proc: ProcessResult, output: HarnessOutput) -> list[str]:
        """How the harness process ended, when that was not a clean exit, or how its turn
        failed by its own account when it exited 0 all the same."""
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
        if output.error is not None:
            return [f"{self.harness.id} exited 0, but its turn failed: {output.error}"]
        return []


#: The longest single argument or environment string Linux execs (``MAX_ARG_STRLEN``,
#: 32 pages, its terminating NUL included).
MAX_ARG_BYTES = 32 * 4096 - 1


def too_long(harness_id: str, launch: recipes.Launch) -> str:
    """Why the system refused to start ``launch`` (``E2BIG``): the sizes, never the text."""
    longest = max((len(a.encode("utf-8", "surrogateescape")) for a in launch.argv), default=0)
    total = sum(len(a.encode("utf-8", "surrogateescape")) + 1 for a in launch.argv) + sum(
        len(f"{k}={v}".encode("utf-8", "surrogateescape")) + 1 for k, v in launch.env.items()
    )
    prompt = launch.task[-1] if launch.task else ""
    return (
        f"{harness_id}: cannot start it: its command line is too long for the system "
        f"(E2BIG): the prompt is {len(prompt.encode('utf-8', 'surrogateescape'))} bytes, "
        f"the longest argument {longest} bytes (at most {MAX_ARG_BYTES} each), "
        f"{total} bytes of arguments and environment in all; give a shorter prompt "
        "(or plan arguments)"
    )


def _remove_stdio_dir(turn: _Turn) -> None:
    """Remove the turn's private stdio directory (if any), then drop the claim on it."""
    if turn.stdio_dir is not None:
        discard(turn.stdio_dir, turn.stdio_claim)


def _refuse_visible_turn_files(directory: Path, sandbox: HarnessSandbox) -> None:
    """``ConfinementUnavailable`` when a caller's stdio turn directory shows in the sandbox.

    The bridge outside the sandbox obeys the turn file there, and its relay socket
    sits beside it: shown writable, the harness could rewrite the file; shown at all,
    it could read it and reach the socket around its own door.
    """
    where = canonical(directory)
    for bound in sandbox.view.visible():
        if where == bound or where.startswith(bound.rstrip("/") + "/"):
            raise ConfinementUnavailable(
                f"the stdio turn directory {directory} lies inside {bound}, which the "
                "confined harness can see: its turn file and relay socket would be within "
                "its reach (give a directory outside the sandbox's view, or none)"
            )


def _write_fresh(path: Path, text: str) -> None:
    """Write ``path`` in the turn directory, which the harness could write too: into a new
    file renamed over whatever is there, so a link it planted is replaced, never followed."""
    if path.is_dir() and not path.is_symlink():
        remove_tree(path)  # a directory it left in the way (of any depth)
    write_atomically(path, text, mode=0o600, exact_mode=True)


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
