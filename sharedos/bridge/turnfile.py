"""The stdio turn file: what the host prepares so a harness can launch one turn's bridge.

The harness launches ``sharedos bridge --stdio --turn FILE`` as its MCP server
and supplies nothing but the path; the host writes the file with mode 0600 in
a fresh 0700 directory. Two kinds:

- **relayed** (what ``open_turn`` writes by default): the file names the
  turn's relay socket and its per-turn secret (``relay``); the bridge process
  serves MCP and relays every call to the host that opened the turn, which
  holds the trusted context, the policy, the evidence store and the pooled
  upstream sessions (``sharedos.bridge.relay``). Nothing that affects
  authorization is in the file, and brokered tools are served like built-in ones.
- **standalone** (``StdioLaunch(relay=False)``, or a file written by other
  tooling): everything that affects authorization — the trusted context, the
  policy (rules or a compiled bundle), the run policy, the evidence store, the
  tool sets and their sandbox root — is in the file, and the bridge process
  builds its own runtime from it (built-in tool sets only).

The turn is open while the ``open_marker`` file exists; the host removes it to
close the turn, and the stdio bridge then refuses every further call
(recorded, ``turn_closed``) and exits.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from sharedos.atomicfile import write_atomically
from sharedos.bridge.limits import TransportLimits
from sharedos.confine.door import private_base
from sharedos.confine.leftovers import Claim, claim, discard_empty
from sharedos.context import AccessContext
from sharedos.errors import BridgeError
from sharedos.toolpolicy import ToolPolicy

if TYPE_CHECKING:
    from sharedos.bridge.relay import RelayHost
    from sharedos.bridge.server import CallRuntime
    from sharedos.bridge.turn import Turn
    from sharedos.kernel import TurnCatalog

#: Tool sets a turn file may ask for. Closed on purpose: a turn file names
#: capabilities, it never imports arbitrary code.
ToolSet = Literal["files", "conformance"]

TURN_FILE_VERSION = 1


class TurnFileError(BridgeError, ValueError):
    """A turn file that cannot be used (unreadable, not private, malformed, stale)."""


class StdioLaunch(BaseModel):
    """Host-side settings of a stdio turn.

    ``relay=True`` (the default): the bridge process relays every call to this
    host (``rules``, ``bundle``, ``evidence_db``, ``tool_sets``,
    ``sandbox_root`` and ``run_policy`` are not used: the host's own runtime
    serves the turn, brokered upstreams included). ``relay=False``: a
    standalone bridge that builds its own runtime from those paths.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    relay: bool = True
    rules: tuple[Path, ...] = ()
    bundle: Path | None = None
    evidence_db: Path | None = None
    tool_sets: tuple[ToolSet, ...] = ("files",)
    sandbox_root: Path | None = None
    run_policy: str | None = None
    python: str = Field(default_factory=lambda: sys.executable)
    directory: Path | None = None
    handler_timeout_s: float = 30.0
    close_linger_s: float = Field(default=0.5, ge=0)
    #: the stdio bridge's frame size limit and malformed-request rate limit
    limits: TransportLimits = Field(default_factory=TransportLimits)

    @model_validator(mode="after")
    def _check(self) -> StdioLaunch:
        if self.relay:
            return self
        if not self.rules and self.bundle is None:
            raise ValueError(
                "a standalone StdioLaunch needs rules (paths of .sos files/directories) or a "
                "compiled bundle"
            )
        if self.evidence_db is None:
            raise ValueError("a standalone StdioLaunch needs evidence_db")
        if "files" in self.tool_sets and self.sandbox_root is None:
            raise ValueError("the files tool set needs sandbox_root")
        return self


class RelayAddress(BaseModel):
    """Where a relayed stdio bridge reaches the host of its turn, and the turn's secret."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    socket: Path
    #: per-turn secret (``secrets.token_urlsafe(32)``), compared in constant time by the host
    secret: str = Field(repr=False, min_length=16)


class TurnFile(BaseModel):
    """The on-disk turn description (JSON, mode 0600)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    #: a relayed turn: the host's socket and secret (then nothing below about policy is used)
    relay: RelayAddress | None = None
    context: AccessContext | None = None
    run_policy: str | None = None
    tool_policy: ToolPolicy | None = None
    rules: tuple[Path, ...] = ()
    bundle: Path | None = None
    evidence_db: Path | None = None
    tool_sets: tuple[ToolSet, ...] = ("files",)
    sandbox_root: Path | None = None
    open_marker: Path
    catalog_hash: str | None = None
    #: a standalone turn: the bundle hash of the policy the host opened the turn under (its
    #: rules or bundle are read again when the bridge launches: they must still be that policy)
    policy_hash: str | None = None
    server_name: str = "sharedos"
    portable_names: bool = False
    #: SystemIdentity stored on every evidence record of the turn (never read by a decision)
    identity: dict[str, JsonValue] | None = None
    handler_timeout_s: float = 30.0
    close_linger_s: float = Field(default=0.5, ge=0)
    limits: TransportLimits = Field(default_factory=TransportLimits)
    #: a standalone turn: the host's ``[approvals]`` (``ApprovalSettings.as_json``), so its
    #: bridge asks, times out and resolves approvers as the host would (None: the defaults)
    approvals: dict[str, JsonValue] | None = None

    @model_validator(mode="after")
    def _check(self) -> TurnFile:
        if self.relay is not None:
            return self
        if self.context is None:
            raise ValueError("a standalone turn file needs context (or relay)")
        if self.evidence_db is None:
            raise ValueError("a standalone turn file needs evidence_db (or relay)")
        if not self.rules and self.bundle is None:
            raise ValueError("a turn file needs rules or bundle")
        if self.tool_policy is None and self.run_policy is None:
            raise ValueError(
                "a turn file needs tool_policy or run_policy (the name of a toolpolicy)"
            )
        return self


def _scrubbed_identity(
    identity: Mapping[str, Any] | None, runtime_host: CallRuntime
) -> dict[str, Any] | None:
    """``identity`` as the host's own rows keep it (``stored_json``): its secrets scrubbed."""
    from sharedos.evidence.record import stored_json
    from sharedos.redaction import Redactor

    secrets_ = getattr(runtime_host, "host_secrets", None)
    kept = stored_json(identity, secrets_ if isinstance(secrets_, Redactor) else Redactor())
    return dict(kept) if kept is not None else None


def _policy_hash(runtime_host: Any) -> str | None:
    """The bundle hash of the host's policy (None: a runtime without a kernel)."""
    found = getattr(getattr(runtime_host, "kernel", None), "policy_hash", None)
    return str(found) if found is not None else None


def _approval_settings(runtime_host: Any) -> dict[str, JsonValue] | None:
    """The host's approval settings as JSON (None: it keeps no approvals)."""
    settings = getattr(getattr(runtime_host, "approvals", None), "settings", None)
    as_json = getattr(settings, "as_json", None)
    return as_json() if callable(as_json) else None


def write_turn_file(turn: TurnFile, path: Path) -> Path:
    """Write ``turn`` to ``path`` atomically with mode 0600 (created private, never widened)."""
    data = turn.model_dump_json(indent=2).encode("utf-8")
    return write_atomically(path, data, mode=0o600, exact_mode=True, durable=True)


def read_turn_file(path: Path) -> TurnFile:
    """Read and validate a turn file; refuse one that others could read or write."""
    try:
        # no link followed, and no wait on a pipe put in the file's place
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        # the host removes a turn's file when the turn closes: a harness relaunching its
        # MCP server after that finds nothing here, as a wrong path does
        raise TurnFileError(
            f"cannot open turn file {path}: no such file (its turn has closed, and the host "
            "removed it; or the path is wrong): a bridge serves only a turn that is open"
        ) from None
    except OSError as exc:
        raise TurnFileError(f"cannot open turn file {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TurnFileError(f"turn file {path} is not a regular file")
        if st.st_mode & 0o077:
            raise TurnFileError(
                f"turn file {path} is accessible by other users (mode {st.st_mode & 0o777:o}); "
                "it must be 0600, as written by the host"
            )
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise TurnFileError(f"turn file {path} is not owned by the user running the bridge")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read()
    finally:
        os.close(fd)
    try:
        return TurnFile.model_validate_json(raw)
    except Exception as exc:
        raise TurnFileError(
            f"turn file {path} is not a valid SharedOS turn file: {validation_summary(exc)}"
        ) from None


def validation_summary(exc: Exception) -> str:
    """One readable line for a (pydantic) validation error: the first problem and how many more."""
    errors = getattr(exc, "errors", None)
    try:
        found = errors() if callable(errors) else None
    except Exception:
        found = None
    if not found:
        return one_line(str(exc))
    first = found[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "(the file)"
    more = (
        f" (and {len(found) - 1} more problem{'s' if len(found) > 2 else ''})"
        if len(found) > 1
        else ""
    )
    return one_line(f"{where}: {first.get('msg', 'invalid')}{more}")


def one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line (newlines folded), at most ``limit`` characters."""
    folded = " ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return folded if len(folded) <= limit else folded[: limit - 1] + "…"


def harness_command(turn_file: Path, *, python: str | None = None) -> list[str]:
    """The MCP server command line a harness launches for this turn (stdio).

    ``sharedos bridge --stdio --turn FILE`` when the console script sits next
    to the interpreter (a virtualenv), else ``python -m sharedos.bridge ...``.
    """
    interpreter = python or sys.executable
    script = Path(interpreter).parent / "sharedos"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script), "bridge", "--stdio", "--turn", str(turn_file)]
    return [interpreter, "-m", "sharedos.bridge", "--stdio", "--turn", str(turn_file)]


def harness_mcp_config(
    turn_file: Path, *, server_name: str = "sharedos", python: str | None = None
) -> dict[str, Any]:
    """``{"mcpServers": {name: {"command", "args"}}}`` as Claude Code / Pi adapters read it."""
    cmd = harness_command(turn_file, python=python)
    return {"mcpServers": {server_name: {"command": cmd[0], "args": cmd[1:]}}}


#: name prefix of a stdio turn's private directory (its turn file, marker and relay socket)
TURN_PREFIX = "sharedos-turn-"


@contextlib.asynccontextmanager
async def open_stdio_turn(
    launch: StdioLaunch,
    runtime_host: CallRuntime,
    context: AccessContext,
    tool_policy: ToolPolicy,
    catalog: TurnCatalog,
    *,
    server_name: str = "sharedos",
    portable_names: bool = False,
    identity: Mapping[str, Any] | None = None,
) -> AsyncIterator[Turn]:
    """Write the turn file and open-marker (and, relayed, serve the relay socket); yield the
    ``Turn``; close the relay, and remove all of it, when the turn closes."""
    from sharedos.bridge.turn import Turn

    # by default under ``$TMPDIR/sharedos-UID`` (``private_base``), which every sandbox
    # masks: directly in the temporary directory, an upstream given that directory as a
    # root read the turn's relay secret there (and, read-write, could rewrite the file the
    # bridge obeys)
    directory = Path(launch.directory) if launch.directory else private_base()
    workdir = Path(tempfile.mkdtemp(prefix=TURN_PREFIX, dir=directory))  # 0700
    # a process killed outright leaves it (and the relay secret): the next run removes it
    claimed: Claim | None = None
    with contextlib.suppress(OSError):
        claimed = claim(workdir)
    turn_path = workdir / "turn.json"
    marker = workdir / "open"
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    relay_host: RelayHost | None = None
    try:
        if launch.relay:
            from sharedos.bridge.relay import RelayHost, RelayTurn
            from sharedos.bridge.relay_wire import RELAY_SOCKET, bridge_message_bytes

            # in the turn's private directory whatever its length (``confine.sockpath``):
            # never beside it in the temporary directory, which an upstream may be given
            socket_path = workdir / RELAY_SOCKET
            secret = secrets.token_urlsafe(32)
            relay_host = RelayHost(
                RelayTurn(runtime_host, context, tool_policy, catalog, identity, portable_names),
                socket_path,
                secret,
                max_connections=launch.limits.max_connections,
                max_message_bytes=bridge_message_bytes(launch.limits.max_frame_bytes),
            )
            await relay_host.start()
            record = TurnFile(
                relay=RelayAddress(socket=socket_path, secret=secret),
                open_marker=marker,
                catalog_hash=str(catalog.catalog_hash),
                server_name=server_name,
                portable_names=portable_names,
                # the host runs every call under its own handler timeout: at the end of its
                # input the bridge answers calls in flight within it, not the launch's
                # default 30 s (``sharedos run`` with an upstream gives a call 70 s)
                handler_timeout_s=max(
                    launch.handler_timeout_s,
                    float(getattr(runtime_host, "handler_timeout_s", 0.0)),
                ),
                close_linger_s=launch.close_linger_s,
                limits=launch.limits,
            )
        else:
            assert launch.evidence_db is not None  # the validator saw to it
            record = TurnFile(
                context=context,
                run_policy=launch.run_policy,
                tool_policy=None if launch.run_policy else tool_policy,
                rules=tuple(p.resolve() for p in launch.rules),
                bundle=launch.bundle.resolve() if launch.bundle else None,
                evidence_db=launch.evidence_db.resolve(),
                tool_sets=launch.tool_sets,
                sandbox_root=launch.sandbox_root.resolve() if launch.sandbox_root else None,
                open_marker=marker,
                catalog_hash=str(catalog.catalog_hash),
                policy_hash=_policy_hash(runtime_host),
                server_name=server_name,
                portable_names=portable_names,
                # the bridge process records it on each call's row, with no host secrets of
                # its own to scrub: scrubbed here, as the host's own rows have it
                identity=_scrubbed_identity(identity, runtime_host),
                handler_timeout_s=launch.handler_timeout_s,
                close_linger_s=launch.close_linger_s,
                limits=launch.limits,
                approvals=_approval_settings(runtime_host),
            )
        write_turn_file(record, turn_path)
        turn = Turn(
            transport="stdio",
            context=context,
            tool_policy=tool_policy,
            catalog=catalog,
            catalog_hash=str(catalog.catalog_hash),
            server_name=server_name,
            command=harness_command(turn_path, python=launch.python),
            turn_file=turn_path,
            relay_secret=record.relay.secret if record.relay is not None else None,
        )
        yield turn
    finally:
        if relay_host is not None:
            relay_host.closed = True  # from now on every relayed call is refused, recorded
        # Removing the marker is what closes the door: a running stdio bridge
        # sees it gone, refuses every further call and exits.
        with contextlib.suppress(FileNotFoundError):
            marker.unlink()
        if relay_host is not None:
            import anyio

            with anyio.CancelScope(shield=True):
                # a bridge still attached refuses (and the host records) calls for its
                # linger, then leaves; what is still running after that is cancelled
                await relay_host.close(linger_s=launch.close_linger_s + 0.25)
        with contextlib.suppress(FileNotFoundError):
            turn_path.unlink()
        discard_empty(workdir, claimed)
