"""The bridge-process side of the stdio relay: a runtime whose every call runs in the host.

``RelayChannel.connect(socket, secret)`` authenticates to the host that opened
the turn and receives the turn's catalogue; ``RelayRuntime`` stands where a
``RuntimeHost`` stands for a ``TurnEndpoint`` — ``invoke_tool`` and ``refuse``
go to the host, which re-authorizes, records and runs them with the trusted
context it alone holds (``sharedos.bridge.relay``). Progress, log
notifications and server->client requests of a running call come back over
the same channel and go out on the call's own MCP stream.

If the host goes away the channel is lost: a call in flight is answered as
failed (``evidence_unavailable``: it may have run, its outcome could not be
recorded) and every later call as refused (``turn_closed``, unrecorded); the
stdio bridge then treats the turn as closed and exits.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectSendStream

from sharedos.bridge.relay_wire import (
    AUTH_TIMEOUT_S,
    MAX_HOST_MESSAGE_BYTES,
    RELAY_VERSION,
    RelayProtocolError,
    decode,
    encode,
    result_from_wire,
)
from sharedos.confine.sockpath import socket_address
from sharedos.context import AccessContext, ToolCall
from sharedos.errors import BridgeError
from sharedos.kernel import ToolResult, TurnCatalog
from sharedos.kernel.handlers import LogHook, ProgressHook
from sharedos.outcomes import ReasonCode
from sharedos.redaction import Redactor
from sharedos.toolpolicy import ToolPolicy

logger = logging.getLogger(__name__)

#: The bridge process never holds the trusted context: the ``AccessContext`` its
#: endpoint carries names only the turn (for the calls it builds); the host
#: substitutes its own context for every relayed call.
RELAYED_PRINCIPAL = "relayed-to-host"


class RelayError(BridgeError, RuntimeError):
    """The host of the turn could not be reached, or refused this bridge process."""


class RelayChannel:
    """One authenticated connection to the host of a turn."""

    def __init__(
        self, stream: SocketStream, reader: BufferedByteReceiveStream, hello: dict[str, Any]
    ):
        self._stream = stream
        self._reader = reader
        self.hello = hello
        self._lock = anyio.Lock()
        self._ids = itertools.count(1)
        self._waiters: dict[int, MemoryObjectSendStream[dict[str, Any]]] = {}
        #: set once the host is gone (end of stream, or a write failed)
        self.lost = anyio.Event()
        #: the turn's tools that declare an outputSchema: the answers this process makes up
        #: itself when the host is gone fold their payload into the text for them, as the
        #: kernel does for every refusal of such a tool (a schema-validating client rejects
        #: a refusal payload as structuredContent: a protocol error instead of a result)
        self.folds = _declaring_output_schema(hello.get("tools"))

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(cls, path: Path, secret: str) -> AsyncIterator[RelayChannel]:
        """Connect, authenticate, read the turn; the channel serves until the block exits."""
        try:
            with socket_address(path) as address:  # a long path stays where it is
                stream = await anyio.connect_unix(address)
        except OSError as exc:
            raise RelayError(
                f"cannot reach the host of this turn at {path}: {exc.strerror or exc}"
            ) from None
        async with stream:
            reader = BufferedByteReceiveStream(stream)
            hello: dict[str, Any] | None = None
            with anyio.move_on_after(AUTH_TIMEOUT_S * 2):
                await stream.send(encode({"version": RELAY_VERSION, "secret": secret}))
                with contextlib.suppress(
                    anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound
                ):
                    hello = decode(await reader.receive_until(b"\n", MAX_HOST_MESSAGE_BYTES))
            if hello is None or hello.get("ok") is not True:
                raise RelayError("the host of this turn refused this bridge (wrong turn secret?)")
            if hello.get("version") != RELAY_VERSION:
                raise RelayError(f"the host speaks relay version {hello.get('version')!r}")
            channel = cls(stream, reader, hello)
            async with anyio.create_task_group() as tg:
                tg.start_soon(channel._read_loop)
                try:
                    yield channel
                finally:
                    tg.cancel_scope.cancel()

    # -- what the host sent at the hello ----------------------------------------------
    def catalog(self) -> TurnCatalog:
        """The turn's catalogue as the host published it (its hash checked here again)."""
        from sharedos.catalog.definition import PublishedToolDefinition
        from sharedos.catalog.hashing import catalog_hash

        try:
            tools = tuple(PublishedToolDefinition.model_validate(t) for t in self.hello["tools"])
        except Exception as exc:
            raise RelayError(f"the host sent a catalogue this bridge cannot read ({exc})") from None
        computed = catalog_hash(tools)
        if computed != self.hello.get("catalogHash"):
            raise RelayError(
                "the catalogue the host sent does not hash to the catalogHash it sent; refusing "
                "to serve it"
            )
        return TurnCatalog(
            tools=tools, catalog_hash=computed, names=frozenset(t.name for t in tools)
        )

    def tool_policy(self) -> ToolPolicy:
        """The run policy the host applies (shown, never decided on, in this process)."""
        return ToolPolicy.model_validate(self.hello["toolPolicy"])

    def context(self) -> AccessContext:
        """A context naming only the turn (see ``RELAYED_PRINCIPAL``)."""
        return AccessContext(principal=RELAYED_PRINCIPAL, turn_id=str(self.hello["turnId"]))

    # -- the channel --------------------------------------------------------------------
    async def _read_loop(self) -> None:
        try:
            while True:
                message = decode(await self._reader.receive_until(b"\n", MAX_HOST_MESSAGE_BYTES))
                rid = message.get("id")
                waiter = self._waiters.get(rid) if isinstance(rid, int) else None
                if waiter is not None:
                    with contextlib.suppress(anyio.WouldBlock, anyio.BrokenResourceError):
                        waiter.send_nowait(message)
        except (
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            anyio.DelimiterNotFound,
            RelayProtocolError,
        ) as exc:
            if not isinstance(exc, anyio.EndOfStream | anyio.IncompleteRead):
                logger.warning("bridge relay: the channel to the host broke (%s)", exc)
        finally:
            self._lose()

    def _lose(self) -> None:
        self.lost.set()
        for waiter in list(self._waiters.values()):
            with contextlib.suppress(anyio.WouldBlock, anyio.BrokenResourceError):
                waiter.send_nowait({"lost": True})

    async def _send(self, message: Mapping[str, Any]) -> None:
        data = encode(message)
        async with self._lock:
            await self._stream.send(data)

    async def call(
        self,
        op: str,
        call: ToolCall,
        diagnostics: Mapping[str, Any] | None,
        *,
        progress: ProgressHook | None = None,
        log: LogHook | None = None,
        peer: Any = None,
        reason: ReasonCode | None = None,
        detail: str | None = None,
    ) -> ToolResult:
        """Have the host run (``invoke``) or record (``refuse``) ``call``; its result."""
        if self.lost.is_set():
            return _host_gone(call, ran=False, folds=self.folds)
        rid = next(self._ids)
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
        self._waiters[rid] = send
        message: dict[str, Any] = {
            "id": rid,
            "op": op,
            "tool": call.tool,
            "arguments": call.arguments,
            "diagnostics": dict(diagnostics) if diagnostics is not None else None,
        }
        if op == "invoke" and peer is not None:
            message["peer"] = {
                "canRequest": bool(peer.can_request),
                "supports": [c for c in ("sampling", "elicitation") if _supports(peer, c)],
                "client": _client_name(peer),
            }
        if op == "refuse":
            message["reason"] = str(reason)
            message["detail"] = detail
        try:
            try:
                # Shielded: the host records the attempt when it receives it (write-ahead,
                # as RuntimeHost.invoke_tool does in process). A client that cancels at once
                # (a tools/call and its notifications/cancelled in one write) cancelled this
                # send, only the cancel went out, and the attempt left no record at all. Sent
                # whole, the cancellation lands below: the host cancels the call and
                # records it as cancelled.
                with anyio.CancelScope(shield=True):
                    await self._send(message)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self._lose()
                return _host_gone(call, ran=False, folds=self.folds)
            async with receive, anyio.create_task_group() as asking:
                # a question to the client (elicitation, sampling) is asked beside the
                # call, never in its way: the host may give up on the answer (its
                # elicitation timeout) and send the call's result, which must reach the
                # client at once; the question still open is then withdrawn
                async for reply in receive:
                    if "result" in reply:
                        asking.cancel_scope.cancel()
                        return result_from_wire(reply["result"])
                    if "lost" in reply:
                        asking.cancel_scope.cancel()
                        return _host_gone(call, ran=True, folds=self.folds)
                    if "peer" in reply:
                        asking.start_soon(self._answer_peer, rid, reply, peer)
                    else:
                        await self._hook(rid, reply, progress, log, peer)
                asking.cancel_scope.cancel()
            return _host_gone(call, ran=True, folds=self.folds)
        except anyio.get_cancelled_exc_class():
            # the client cancelled (or the turn is closing): the host cancels the handler
            # and records the attempt as cancelled
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(1.0),
                contextlib.suppress(Exception),
            ):
                await self._send({"id": rid, "op": "cancel"})
            raise
        finally:
            self._waiters.pop(rid, None)
            send.close()

    async def _hook(
        self,
        rid: int,
        reply: dict[str, Any],
        progress: ProgressHook | None,
        log: LogHook | None,
        peer: Any,
    ) -> None:
        """A progress/log notification of a running call, passed on."""
        if isinstance(reply.get("progress"), list) and progress is not None:
            value, total, text = [*reply["progress"], None, None, None][:3]
            await progress(float(value), total, text)
        elif isinstance(reply.get("log"), list) and log is not None and len(reply["log"]) == 2:
            await log(str(reply["log"][0]), reply["log"][1])

    async def _answer_peer(self, rid: int, reply: dict[str, Any], peer: Any) -> None:
        """A peer request of a running call: ask the client, send its answer to the host."""
        answer: dict[str, Any] = {"id": rid, "op": "peer", "peer": reply["peer"]}
        try:
            answer["result"] = await _ask_peer(peer, reply.get("method"), reply.get("params"))
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            answer["error"] = f"{type(exc).__name__}: {exc}"[:500]
        try:
            await self._send(answer)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            self._lose()  # the call's own loop answers it (host gone)


def _client_name(peer: Any) -> str | None:
    """The client's ``initialize`` name and version (approval evidence says who answered)."""
    try:
        name = peer.client_name()
    except Exception:
        return None
    return name[:200] if isinstance(name, str) else None


def _supports(peer: Any, capability: str) -> bool:
    try:
        return bool(peer.client_supports(capability))
    except Exception:
        return False


async def _ask_peer(peer: Any, method: object, params: object) -> dict[str, Any]:
    if peer is None:
        raise RuntimeError("this call's transport has no back channel")
    args = params if isinstance(params, dict) else {}
    if method == "create_message":
        result: dict[str, Any] = await peer.create_message(
            str(args.get("prompt", "")), max_tokens=int(args.get("maxTokens", 100))
        )
        return result
    if method == "elicit":
        schema = args.get("requestedSchema")
        elicited: dict[str, Any] = await peer.elicit(
            str(args.get("message", "")), schema if isinstance(schema, dict) else {}
        )
        return elicited
    raise RuntimeError(f"unknown peer request {method!r}")


def _declaring_output_schema(tools: object) -> frozenset[str]:
    """Names of the hello's tools (wire spelling) that declare an ``outputSchema``."""
    if not isinstance(tools, list):
        return frozenset()
    return frozenset(
        t["name"]
        for t in tools
        if isinstance(t, dict) and isinstance(t.get("name"), str) and t.get("outputSchema")
    )


def _host_gone(call: ToolCall, *, ran: bool, folds: frozenset[str] = frozenset()) -> ToolResult:
    """The answer when the host is gone: nothing can be recorded any more.

    For a tool in ``folds`` (it declares an ``outputSchema``) the payload is folded
    into the text, never sent as ``structuredContent``, like every other refusal.
    """
    tool = call.tool if isinstance(call.tool, str) else repr(call.tool)
    fold = tool in folds
    if ran:
        return ToolResult.refusal(
            ReasonCode.EVIDENCE_UNAVAILABLE,
            tool,
            call.call_id,
            detail="the host of this turn went away while the call was running",
            ran=True,
            fold=fold,
        )
    return ToolResult.refusal(
        ReasonCode.TURN_CLOSED,
        tool,
        call.call_id,
        detail="the host of this turn is gone",
        fold=fold,
    )


class RelayRuntime:
    """Stands for ``RuntimeHost`` in a relayed stdio bridge: every call goes to the host."""

    def __init__(self, channel: RelayChannel) -> None:
        self.channel = channel

    async def invoke_tool(
        self,
        call: ToolCall,
        context: AccessContext,
        tool_policy: ToolPolicy,
        *,
        catalog: TurnCatalog | None = None,
        diagnostics: Mapping[str, Any] | None = None,
        identity: Mapping[str, Any] | None = None,
        progress: ProgressHook | None = None,
        log: LogHook | None = None,
        peer: Any = None,
        turn_secrets: Redactor | None = None,
    ) -> ToolResult:
        """The host's ``invoke_tool`` for ``call`` (context, policy and catalogue are the host's;
        a relayed stdio bridge has no bearer token, so ``turn_secrets`` is None)."""
        return await self.channel.call(
            "invoke", call, diagnostics, progress=progress, log=log, peer=peer
        )

    async def refuse(
        self,
        call: ToolCall,
        context: AccessContext,
        tool_policy: ToolPolicy,
        reason: ReasonCode,
        *,
        catalog: TurnCatalog | None = None,
        diagnostics: Mapping[str, Any] | None = None,
        identity: Mapping[str, Any] | None = None,
        detail: str | None = None,
        turn_secrets: Redactor | None = None,
    ) -> ToolResult:
        """The host's ``refuse`` for a refusal this process's transport decided."""
        return await self.channel.call("refuse", call, diagnostics, reason=reason, detail=detail)
