"""The host side of the stdio relay: a stdio bridge's calls run in the process that opened the turn.

A stdio bridge is a process the harness launches. It cannot hold the host's
pooled upstream sessions, and must not open its own copy of every upstream
(that would need the upstreams' credentials in the harness's environment and
one unpooled session per harness). So a host-opened stdio turn relays: the
bridge process speaks MCP to the harness (framing, classification, limits,
close handling — ``sharedos.bridge.stdio``), and hands every ``tools/call``
over this channel to the host, which re-authorizes, records (write-ahead) and
runs it with ``RuntimeHost.invoke_tool`` exactly as the HTTP bridge does, with
the turn's trusted context, run policy and catalogue. The bridge process never
holds the trusted context, the policy or the evidence store.

The channel: a Unix socket in the turn's private (0700) directory, the socket
itself 0600; a peer must run as the host's user (``SO_PEERCRED``) and present
the per-turn secret (compared in constant time) before anything else is read.
Messages are newline-delimited JSON objects (``sharedos.bridge.relay_wire``).
A bridge that leaves cancels its calls in flight (recorded ``cancelled``), as
an HTTP client that disconnects does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import logging
import os
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectSendStream

from sharedos.bridge.diagnostics import bounded
from sharedos.bridge.relay_wire import (
    AUTH_TIMEOUT_S,
    MAX_HELLO_BYTES,
    MAX_MESSAGE_BYTES,
    RELAY_VERSION,
    RelayProtocolError,
    decode,
    encode,
    result_to_wire,
)
from sharedos.bridge.server import CallRuntime
from sharedos.confine.sockpath import socket_address
from sharedos.context import AccessContext, ToolCall, new_call_id
from sharedos.kernel import ToolResult, TurnCatalog
from sharedos.names import unlisted_portable
from sharedos.outcomes import ReasonCode
from sharedos.redaction import Redactor
from sharedos.toolpolicy import ToolPolicy

logger = logging.getLogger(__name__)

#: refusals a bridge process may ask the host to record (its transport's own refusals)
RELAYED_REFUSALS = frozenset(
    {ReasonCode.TURN_CLOSED, ReasonCode.MALFORMED_REQUEST, ReasonCode.INTERNAL_ERROR}
)


@dataclass(frozen=True)
class RelayTurn:
    """What the host relays calls into: the runtime and the turn's trusted inputs."""

    runtime_host: CallRuntime
    context: AccessContext
    tool_policy: ToolPolicy
    catalog: TurnCatalog
    identity: Mapping[str, Any] | None = None
    #: the turn publishes portable names: a call of a tool it did not list, by the portable
    #: name it would have, is that tool's (``unlisted_portable``; the bridge process has no
    #: registry to tell)
    portable_names: bool = False


#: Linux reports a Unix socket peer's credentials (``SO_PEERCRED``); elsewhere the 0700
#: directory and the per-turn secret are the fences
_PEER_CREDENTIALS = hasattr(socket, "SO_PEERCRED")


def peer_uid(stream: SocketStream) -> int | None:
    """The uid of the process at the other end of a Unix socket (``SO_PEERCRED``), or None."""
    try:
        raw: socket.socket = stream.extra(SocketAttribute.raw_socket)
        creds = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return int(struct.unpack("3i", creds)[1])
    except (OSError, AttributeError, anyio.TypedAttributeLookupError):
        return None


class RelayPeer:
    """A handler's server->client requests (sampling, elicitation), relayed to the bridge process."""

    def __init__(self, conn: _Connection, call: int, info: Mapping[str, Any]) -> None:
        self._conn = conn
        self._call = call
        self.can_request = bool(info.get("canRequest"))
        client = info.get("client")
        self._client = client[:200] if isinstance(client, str) else None
        supports = info.get("supports")
        self._supports = (
            frozenset(s for s in supports if isinstance(s, str))
            if isinstance(supports, list)
            else frozenset()
        )

    def client_supports(self, capability: str) -> bool:
        """Whether the harness's client declared ``capability`` (``sampling``, ``elicitation``)."""
        return capability in self._supports

    def client_name(self) -> str | None:
        """The name and version the harness's client gave in ``initialize``, as relayed."""
        return self._client

    async def create_message(self, prompt: str, *, max_tokens: int = 100) -> dict[str, Any]:
        """``sampling/createMessage`` through the bridge process; the result as a wire dict."""
        return await self._conn.peer_request(
            self._call, "create_message", {"prompt": prompt, "maxTokens": max_tokens}
        )

    async def elicit(self, message: str, requested_schema: dict[str, Any]) -> dict[str, Any]:
        """``elicitation/create`` (form mode) through the bridge process; the result as a wire dict."""
        return await self._conn.peer_request(
            self._call, "elicit", {"message": message, "requestedSchema": requested_schema}
        )


@dataclass(eq=False)  # kept in a set: identity, not value
class _Connection:
    """One authenticated bridge process: its calls in flight and its pending peer requests."""

    host: RelayHost
    stream: SocketStream
    reader: BufferedByteReceiveStream
    calls: dict[int, anyio.CancelScope] = field(default_factory=dict)
    peers: dict[int, MemoryObjectSendStream[dict[str, Any]]] = field(default_factory=dict)
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    _peer_ids: itertools.count[int] = field(default_factory=itertools.count)

    async def send(self, message: Mapping[str, Any]) -> None:
        """Write one message (serialized: calls answer concurrently)."""
        data = encode(message)
        async with self.lock:
            await self.stream.send(data)

    async def run(self) -> None:
        """Read the bridge's messages until it leaves; then cancel what it left running."""
        async with anyio.create_task_group() as tg:
            while True:
                try:
                    message = decode(
                        await self.reader.receive_until(b"\n", self.host.max_message_bytes)
                    )
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                    break
                except (anyio.DelimiterNotFound, RelayProtocolError) as exc:
                    logger.warning("bridge relay: dropping a bridge process that sent %s", exc)
                    break
                if not self._take(message, tg):
                    logger.warning("bridge relay: dropping a bridge process (unknown message)")
                    break
            # The bridge process left (or broke the protocol): like an HTTP client that
            # disconnects, its calls in flight are cancelled, and recorded as such.
            tg.cancel_scope.cancel()

    def _take(self, message: dict[str, Any], tg: anyio.abc.TaskGroup) -> bool:
        op, rid = message.get("op"), message.get("id")
        if not isinstance(rid, int) or isinstance(rid, bool):
            return False
        if op in ("invoke", "refuse"):
            if rid in self.calls:
                return False
            scope = anyio.CancelScope()
            self.calls[rid] = scope
            tg.start_soon(self._serve_call, rid, message, scope)
            return True
        if op == "cancel":
            running = self.calls.get(rid)
            if running is not None:
                running.cancel()
            return True
        if op == "peer":
            pid = message.get("peer")
            waiter = self.peers.pop(pid, None) if isinstance(pid, int) else None
            if waiter is not None:
                waiter.send_nowait(message)
                waiter.close()
            return True
        return False

    async def _serve_call(
        self, rid: int, message: dict[str, Any], scope: anyio.CancelScope
    ) -> None:
        try:
            with scope:
                try:
                    result = await self.host.answer(self, rid, message)
                except anyio.get_cancelled_exc_class():
                    raise
                except Exception as exc:  # fail closed, as a result: never drop the connection
                    logger.exception("bridge relay: internal failure answering a relayed call")
                    result = self.host.internal_error(
                        str(message.get("tool"))[:1024], type(exc).__name__
                    )
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await self.send({"id": rid, "result": result_to_wire(result)})
        finally:
            self.calls.pop(rid, None)

    async def peer_request(self, call: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Ask the bridge process's client (sampling / elicitation) and wait for its answer."""
        pid = next(self._peer_ids)
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](1)
        self.peers[pid] = send
        try:
            await self.send({"id": call, "peer": pid, "method": method, "params": params})
            async with receive:
                async for answer in receive:
                    if isinstance(answer.get("result"), dict):
                        result: dict[str, Any] = answer["result"]
                        return result
                    raise RuntimeError(str(answer.get("error") or "the client refused the request"))
        finally:
            self.peers.pop(pid, None)
        raise RuntimeError("the bridge process left before the client answered")


class RelayHost:
    """Serves one turn's relay socket: authenticates bridge processes and runs their calls."""

    def __init__(
        self,
        turn: RelayTurn,
        path: Path,
        secret: str,
        *,
        max_connections: int = 128,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.turn = turn
        self.path = path
        #: the largest message read from a bridge process (``bridge_message_bytes``): one
        #: larger drops the process, so it must hold whatever a frame the bridge accepted
        #: becomes on the channel
        self.max_message_bytes = max_message_bytes
        #: open connections at once (authenticated or not): each holds one of the host's
        #: file descriptors, and the harness can connect as often as it likes
        self.max_connections = max(1, max_connections)
        self._secret = secret.encode("utf-8")
        # A model that learns the secret (the harness can read its own turn file) and
        # passes it into a call must not have it recorded or echoed: the HTTP bridge's
        # bearer token is kept out the same way
        self._turn_secrets = Redactor((secret,))
        self.closed = False
        self._live: set[_Connection] = set()
        #: connections still authenticating, oldest first (the first to go at the cap)
        self._pending: dict[SocketStream, anyio.CancelScope] = {}
        self._idle = anyio.Event()
        self._listener: anyio.abc.SocketListener | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Bind the socket (0600, in the caller's 0700 directory) and start serving."""
        with socket_address(self.path) as address:  # a long path stays where it is
            self._listener = await anyio.create_unix_listener(address, mode=0o600)
        # The listener lives in its own task so that no task group spans the caller's
        # ``yield`` (open_turn is an async context manager around the harness's run).
        self._task = asyncio.get_running_loop().create_task(self._serve(self._listener))

    async def _serve(self, listener: anyio.abc.SocketListener) -> None:
        # Not ``listener.serve``: it ends on the first failed accept, and one failure
        # (the process out of file descriptors for a moment, EMFILE) would leave the
        # socket unanswered for the rest of the turn. A failed accept is retried.
        async with anyio.create_task_group() as tg:
            while True:
                try:
                    stream = await listener.accept()
                except anyio.ClosedResourceError:
                    return
                except anyio.BrokenResourceError as exc:
                    logger.warning(
                        "bridge relay: accepting a connection failed (%s); retrying",
                        exc.__cause__ or exc,
                    )
                    await anyio.sleep(0.1)
                    continue
                tg.start_soon(self._handle, stream)

    @property
    def connections(self) -> int:
        """Bridge processes connected now."""
        return len(self._live)

    async def close(self, linger_s: float) -> None:
        """Refuse further calls (recorded ``turn_closed``); wait up to ``linger_s`` for the
        bridge processes to leave; then cancel what is left and remove the socket."""
        self.closed = True
        if self._live:
            with anyio.move_on_after(linger_s):
                while self._live:
                    self._idle = anyio.Event()
                    await self._idle.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.aclose()
        with contextlib.suppress(OSError):
            self.path.unlink()

    def _admit(self, stream: SocketStream) -> anyio.CancelScope | None:
        """A cancel scope for a new connection's authentication, or None (refused at the cap).

        At the cap the oldest connection still authenticating is dropped for the new
        one; a new one is refused only when every open connection is authenticated."""
        if len(self._pending) + len(self._live) >= self.max_connections:
            if not self._pending:
                logger.warning(
                    "bridge relay: refused a connection (%d open, the cap)", self.max_connections
                )
                return None
            oldest = next(iter(self._pending))
            self._pending.pop(oldest).cancel()
        scope = anyio.CancelScope()
        self._pending[stream] = scope
        return scope

    async def _handle(self, stream: SocketStream) -> None:
        try:
            async with stream:
                scope = self._admit(stream)
                if scope is None:
                    return
                reader = BufferedByteReceiveStream(stream)
                authenticated = False
                try:
                    with scope:
                        authenticated = await self._authenticate(stream, reader)
                finally:
                    self._pending.pop(stream, None)
                if not authenticated:
                    return
                conn = _Connection(self, stream, reader)
                self._live.add(conn)
                try:
                    await conn.run()
                finally:
                    self._live.discard(conn)
                    self._idle.set()
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:  # one bridge process's failure must not stop the listener
            logger.exception("bridge relay: a bridge connection failed")

    async def _authenticate(self, stream: SocketStream, reader: BufferedByteReceiveStream) -> bool:
        """The peer runs as our user and presents the turn's secret; then it gets the turn."""
        if _PEER_CREDENTIALS:
            uid = peer_uid(stream)
            if uid is None or uid != os.getuid():
                logger.warning("bridge relay: refused a connection from uid %s", uid)
                return False
        hello: dict[str, Any] | None = None
        with anyio.move_on_after(AUTH_TIMEOUT_S):
            with contextlib.suppress(Exception):
                hello = decode(await reader.receive_until(b"\n", MAX_HELLO_BYTES))
        offered = hello.get("secret") if hello is not None else None
        if not isinstance(offered, str) or not hmac.compare_digest(
            offered.encode("utf-8"), self._secret
        ):
            logger.warning("bridge relay: refused a connection without the turn's secret")
            with contextlib.suppress(Exception):
                await stream.send(encode({"ok": False, "error": "unauthorized"}))
            return False
        turn = self.turn
        await stream.send(
            encode(
                {
                    "ok": True,
                    "version": RELAY_VERSION,
                    "turnId": turn.context.turn_id,
                    "catalogHash": str(turn.catalog.catalog_hash),
                    "toolPolicy": turn.tool_policy.model_dump(mode="json"),
                    "tools": turn.catalog.wire(),
                }
            )
        )
        return True

    def internal_error(self, tool: str, what: str) -> ToolResult:
        """The (unrecorded) answer when the relay itself failed: fail closed, as a result."""
        return ToolResult.refusal(
            ReasonCode.INTERNAL_ERROR,
            tool,
            "",
            detail=f"internal error in the bridge relay ({what})",
            fold=any(
                t.name == tool and t.output_schema is not None for t in self.turn.catalog.tools
            ),
        )

    async def answer(self, conn: _Connection, rid: int, message: dict[str, Any]) -> ToolResult:
        """Run (``invoke``) or record (``refuse``) one relayed call with the turn's own inputs."""
        turn = self.turn
        tool = message.get("tool")
        name = tool if isinstance(tool, str) else repr(tool)[:1024]
        raw = message.get("diagnostics")
        diagnostics = bounded(raw) if isinstance(raw, Mapping) else None
        kernel = getattr(turn.runtime_host, "kernel", None)
        if turn.portable_names and isinstance(tool, str) and kernel is not None:
            name = unlisted_portable(
                tool, lambda n: kernel.lookup(n, turn.context, turn.catalog) is not None
            )
            if name != tool:
                given = diagnostics if isinstance(diagnostics, Mapping) else {}
                diagnostics = {**given, "portableName": tool}
        call = ToolCall(
            # minted here: the bridge process is on the harness's side of the boundary
            call_id=new_call_id(),
            tool=name,
            arguments=message.get("arguments"),
            turn_id=turn.context.turn_id,
        )
        if message.get("op") == "refuse" or self.closed:
            reason = ReasonCode.TURN_CLOSED
            detail = "the turn this bridge served has closed"
            if message.get("op") == "refuse":
                asked = message.get("reason")
                reason = (
                    ReasonCode(asked)
                    if asked in {r.value for r in RELAYED_REFUSALS}
                    else ReasonCode.INTERNAL_ERROR
                )
                detail = str(message.get("detail") or "")[:2000] or detail
            return await turn.runtime_host.refuse(
                call,
                turn.context,
                turn.tool_policy,
                reason,
                catalog=turn.catalog,
                diagnostics=diagnostics,  # type: ignore[arg-type]
                identity=turn.identity,
                detail=detail,
                turn_secrets=self._turn_secrets,
            )
        hooks = _hooks(conn, rid, message.get("peer"))
        return await turn.runtime_host.invoke_tool(
            call,
            turn.context,
            turn.tool_policy,
            catalog=turn.catalog,
            diagnostics=diagnostics,  # type: ignore[arg-type]
            identity=turn.identity,
            turn_secrets=self._turn_secrets,
            **hooks,
        )


def _hooks(conn: _Connection, rid: int, peer: object) -> dict[str, Any]:
    """``progress``/``log``/``peer`` for one relayed call: each rides back to its bridge process."""

    async def progress(
        value: float, total: float | None = None, message: str | None = None
    ) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await conn.send({"id": rid, "progress": [value, total, message]})

    async def log(level: str, data: object) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await conn.send({"id": rid, "log": [level, data]})

    relayed = RelayPeer(conn, rid, peer) if isinstance(peer, Mapping) else None
    return {"progress": progress, "log": log, "peer": relayed}
