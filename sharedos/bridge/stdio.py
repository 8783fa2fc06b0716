"""``sharedos bridge --stdio --turn FILE``: one turn's bridge over stdin/stdout.

Start-up matters (a harness launches this once per turn), so only what stdio
needs is imported: no uvicorn, no HTTP session manager of ours, no
conformance or harness machinery; a compiled policy bundle is loaded rather
than parsed when the turn file names one. The mcp SDK itself is the floor:
``import mcp`` pulls in its client and wire models (~0.6 s warm on the
reference machine).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from sharedos.bridge.turnfile import TurnFile, TurnFileError, one_line, read_turn_file
from sharedos.errors import BridgeError

if TYPE_CHECKING:
    import mcp_types as types

    from sharedos.bridge.server import TurnEndpoint, TurnServer
    from sharedos.bridge.stdio_wire import RawLine, StdioWire
    from sharedos.kernel import RuntimeHost
    from sharedos.toolpolicy import ToolPolicy

logger = logging.getLogger(__name__)

#: frames above this size take the slow classification path in a worker thread
_THREAD_CLASSIFY_BYTES = 64 * 1024
#: how long the answers of a refused line may still take to write once the bridge stops
_STOP_ANSWER_S = 0.1
#: how long a message read off the pipe and not yet handed to the server when the bridge
#: stops may take to be answered and recorded
_UNHANDED_S = 2.0


class TurnClosedError(BridgeError, RuntimeError):
    """The turn this bridge was launched for has already closed."""


def build_runtime(turn: TurnFile, turn_path: Path | None = None) -> tuple[RuntimeHost, ToolPolicy]:
    """``(RuntimeHost, ToolPolicy)`` from the turn file: policy, registry, evidence store.

    ``turn_path``: where the turn file was read from. It, like the turn's open marker,
    is state no files root may hold: the turn file names the trusted context (a
    ``files.write`` replacing it keeps its mode 0600 and owner, so the next bridge
    launched on it served the principal the model wrote), the marker whether the turn
    is open."""
    from sharedos.catalog.registry import ToolRegistry
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    if turn.evidence_db is None:
        raise TurnFileError("a standalone turn file needs evidence_db")
    from sharedos.kernel.kernel import Kernel
    from sharedos.kernel.runtime import RuntimeHost

    if turn.bundle is not None:
        from sharedos.policy import load_bundle

        policy = load_bundle(turn.bundle)
    else:
        from sharedos.policy import compile_paths

        policy = compile_paths(turn.rules)
    if turn.policy_hash is not None and str(policy.bundle_hash) != turn.policy_hash:
        # The rules or bundle were read again at this launch (a harness relaunching its
        # MCP server mid-turn, a rollout into the same file meanwhile): a policy that
        # publishes the same catalogue passes the catalogue check, and its decisions were
        # recorded in a turn the host opened, and named, under another policy.
        raise TurnFileError(
            f"policy drift: the host opened this turn under policy {turn.policy_hash[:12]}…, "
            f"{'the bundle' if turn.bundle is not None else 'the rules'} now read "
            f"{str(policy.bundle_hash)[:12]}…; refusing to serve (a new policy applies to "
            "turns opened after it)"
        )
    registry = ToolRegistry()
    if "files" in turn.tool_sets:
        if turn.sandbox_root is None:
            raise TurnFileError("the files tool set needs sandbox_root in the turn file")
        from sharedos.confine.programs import import_dirs, sharedos_installation
        from sharedos.evidence.url import store_files
        from sharedos.tools.files import register_files_tools, root_holds_code, root_holds_state

        state: list[str | os.PathLike[str]] = [*turn.rules, *store_files(turn.evidence_db)]
        state.append(turn.open_marker)
        if turn_path is not None:
            state.append(turn_path)
        if turn.bundle is not None:
            state.append(turn.bundle)
        problem = root_holds_state(turn.sandbox_root, state)
        if problem is None:
            problem = root_holds_code(
                turn.sandbox_root, import_dirs(), trees=sharedos_installation()
            )
        if problem is not None:
            raise TurnFileError(f"sandbox_root {problem}")
        register_files_tools(registry, turn.sandbox_root)
    if "conformance" in turn.tool_sets:
        from sharedos.testing.conformance_tools import conformance_tools

        registry.register_many(conformance_tools())
    if turn.tool_policy is not None:
        tool_policy = turn.tool_policy
    else:
        assert turn.run_policy is not None
        try:
            tool_policy = policy.tool_policies[turn.run_policy]
        except KeyError:
            known = ", ".join(sorted(policy.tool_policies)) or "none"
            raise TurnFileError(
                f"run policy {turn.run_policy!r} is not defined (defined: {known})"
            ) from None
    approvals = None
    if turn.approvals is not None:
        from sharedos.kernel.approvals import ApprovalSettings

        try:
            approvals = ApprovalSettings.from_json(turn.approvals)
        except (KeyError, TypeError, ValueError) as exc:
            raise TurnFileError(f"the turn file's approvals are not usable ({exc})") from None
    evidence = SqliteEvidenceStore(turn.evidence_db)
    host = RuntimeHost(
        Kernel(policy, registry),
        evidence,
        handler_timeout_s=turn.handler_timeout_s,
        approvals=approvals,
    )
    return host, tool_policy


async def serve_stdio(
    turn: TurnFile, *, poll_s: float = 0.05, turn_path: Path | None = None
) -> int:
    """Serve the turn on stdin/stdout until the client leaves or the turn closes; exit code.

    0: the client closed stdin. 3: the host closed the turn; the bridge then
    answers and records every call that arrives (``turn_closed``) for
    ``close_linger_s`` and exits — at the latest ``close_linger_s`` after it
    saw the turn close, whatever the harness does, because nothing here
    waits outside the event loop.
    """
    if not turn.open_marker.exists():
        raise TurnClosedError("this turn has already closed")
    if turn.relay is not None:
        return await _serve_relayed(turn, poll_s)
    assert turn.context is not None  # a standalone turn file has one (its validator)
    host, tool_policy = build_runtime(turn, turn_path)
    try:
        return await _serve_standalone(turn, host, tool_policy, poll_s)
    finally:
        # a host of its own: before it goes, the records of calls its store refused for a
        # cause that passes (a lock, a full disk) are written if the store takes them now,
        # and its store is closed (its last checkpoint), as ``sharedos run`` does
        from sharedos.kernel.recorder import unwritten_note

        with anyio.CancelScope(shield=True):
            note = unwritten_note(
                await host.settle_unwritten(), host.unsealed_turns(), host.unwritten_outcomes()
            )
        if note is not None:
            print(note, file=sys.stderr)
        close = getattr(host.evidence, "close", None)
        if callable(close):
            close()


async def _serve_standalone(
    turn: TurnFile, host: RuntimeHost, tool_policy: ToolPolicy, poll_s: float
) -> int:
    """Serve a standalone turn with its own ``host`` (``serve_stdio``)."""
    assert turn.context is not None
    catalog = host.kernel.list_tools(turn.context, tool_policy)
    if turn.catalog_hash is not None and catalog.catalog_hash != turn.catalog_hash:
        # Policy, tools or sandbox changed between the host opening the turn and
        # the harness launching us: serving a different catalogue than the one
        # the host recorded would make the run's catalogHash a lie.
        raise TurnFileError(
            f"catalogue drift: the host opened this turn with catalogHash {turn.catalog_hash[:12]}…, "
            f"this bridge computes {catalog.catalog_hash[:12]}… (policy or tools changed); refusing to serve"
        )

    from sharedos.bridge.server import TurnEndpoint
    from sharedos.bridge.stdio_wire import StdioWire

    endpoint = TurnEndpoint(
        runtime_host=host,
        context=turn.context,
        tool_policy=tool_policy,
        catalog=catalog,
        server_name=turn.server_name,
        portable_names=turn.portable_names,
        transport="stdio",
        identity=turn.identity,
        is_open=turn.open_marker.exists,
        limits=turn.limits,
    )
    server = endpoint.build_server()
    with StdioWire.claim_std(max_frame=endpoint.limits.max_frame_bytes) as wire:
        closed = await _serve(wire, endpoint, server, turn, poll_s, turn.open_marker.exists)
    return 3 if closed else 0


async def _serve_relayed(turn: TurnFile, poll_s: float) -> int:
    """Serve a relayed turn: MCP here, every call run by the host that opened the turn."""
    from sharedos.bridge.relay_client import RelayChannel, RelayError, RelayRuntime
    from sharedos.bridge.server import TurnEndpoint
    from sharedos.bridge.stdio_wire import StdioWire

    assert turn.relay is not None
    try:
        async with RelayChannel.connect(turn.relay.socket, turn.relay.secret) as channel:
            catalog = channel.catalog()
            if turn.catalog_hash is not None and catalog.catalog_hash != turn.catalog_hash:
                raise TurnFileError(
                    f"catalogue drift: the turn file names catalogHash {turn.catalog_hash[:12]}…, "
                    f"the host serves {catalog.catalog_hash[:12]}…; refusing to serve"
                )

            def still_open() -> bool:
                return turn.open_marker.exists() and not channel.lost.is_set()

            endpoint = TurnEndpoint(
                runtime_host=RelayRuntime(channel),
                context=channel.context(),
                tool_policy=channel.tool_policy(),
                catalog=catalog,
                server_name=turn.server_name,
                portable_names=turn.portable_names,
                transport="stdio",
                is_open=still_open,
                limits=turn.limits,
            )
            server = endpoint.build_server()
            with StdioWire.claim_std(max_frame=endpoint.limits.max_frame_bytes) as wire:
                closed = await _serve(wire, endpoint, server, turn, poll_s, still_open)
    except RelayError as exc:
        raise TurnFileError(str(exc)) from None
    return 3 if closed else 0


async def _serve(
    wire: StdioWire,
    endpoint: TurnEndpoint,
    server: TurnServer,
    turn: TurnFile,
    poll_s: float,
    still_open: Callable[[], bool],
) -> bool:
    """Run the SDK server over ``wire`` until end of input or the turn's close; True if closed."""
    import mcp_types
    from mcp.shared.dispatcher import coerce_request_id
    from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
    from mcp.shared.message import SessionMessage

    from sharedos.bridge.answers import CONNECTION_CLOSED, UNANSWERED, error_message

    to_server, server_in = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    server_out, from_server = anyio.create_memory_object_stream[SessionMessage](0)
    closed_by_host = False
    linger = max(0.0, turn.close_linger_s)
    #: kept for the final drain and shutdown within the linger
    reserve = min(0.1, linger / 4)

    async def watch_turn() -> None:
        nonlocal closed_by_host
        while still_open():
            await anyio.sleep(poll_s)
            with anyio.CancelScope(shield=True):
                await endpoint.recorder.flush_if_allowed()
        endpoint.closed = True
        closed_by_host = True
        # Calls arriving in this window are refused and recorded (turn_closed);
        # then the door closes for good.
        await anyio.sleep(linger - reserve)
        tg.cancel_scope.cancel()

    #: requests handed to the server and not yet answered, counted (ids may repeat) by the id
    #: as the SDK's dispatcher correlates it: "7" and 7 are one id (``coerce_request_id``), so
    #: a cancellation naming "7" settles request 7, which the SDK then never answers
    pending: Counter[object] = Counter()
    #: the ids, as the client wrote them, of the requests counted in ``pending``: a request
    #: still owed its answer when the host closes the turn is answered with an error
    owed: dict[object, list[str | int]] = {}

    def settle(key: object) -> None:
        """One request of id ``key`` is answered or cancelled: it is owed nothing more."""
        if pending[key] > 1:
            pending[key] -= 1
        else:
            pending.pop(key, None)
        ids = owed.get(key)
        if ids:
            ids.pop(0)
            if not ids:
                del owed[key]

    #: tools/call requests handed to the server that its middleware has not seen yet, by id.
    #: The SDK's runner refuses some before any middleware (an envelope of the other protocol
    #: era, an unsupported or malformed one): its error answer is then the only trace, so the
    #: call is recorded as the writer sends that answer (as the HTTP transport's rejections are).
    unreached: dict[object, list[mcp_types.JSONRPCRequest]] = {}

    def take_unreached(request_id: object) -> mcp_types.JSONRPCRequest | None:
        waiting = unreached.get(request_id)
        if not waiting:
            return None
        request = waiting.pop(0)
        if not waiting:
            del unreached[request_id]
        return request

    endpoint.on_call_reached = take_unreached

    #: a message read off the pipe and not yet handed to the server when the bridge stopped
    #: (its reader was cancelled while the line was classified in a worker thread, or while
    #: the server had not taken it): the final drain answers and records it, as it does the
    #: lines still in the pipe. Dropped, a tools/call the client wrote was never answered
    #: nor recorded.
    unhanded: list[mcp_types.JSONRPCMessage] = []

    async def read_frames() -> None:
        async with to_server:
            while (line := await wire.read_line()) is not None:
                message = await _take_line(wire, endpoint, line)
                if message is None:
                    continue
                unhanded.append(message)
                if isinstance(message, mcp_types.JSONRPCRequest):
                    pending[coerce_request_id(message.id)] += 1
                    owed.setdefault(coerce_request_id(message.id), []).append(message.id)
                    if message.method == "tools/call":
                        unreached.setdefault(message.id, []).append(message)
                elif isinstance(message, mcp_types.JSONRPCNotification) and (
                    message.method == "notifications/cancelled"
                ):
                    # read as the SDK reads it: a requestId that is no id (a list, an
                    # object: unhashable) cancels nothing, and must not end the reader
                    # (one request: with an id in flight twice the SDK cancels the newer,
                    # and the older one is still answered)
                    cancelled = cancelled_request_id_from_params(message.params)
                    settle(None if cancelled is None else coerce_request_id(cancelled))
                await to_server.send(SessionMessage(message))
                unhanded.clear()
            # End of input: the client may still read. Answer what it already asked
            # (bounded by the handler timeout) before the server's input ends.
            with anyio.move_on_after(turn.handler_timeout_s + 1.0):
                while +pending and not endpoint.closed:
                    await anyio.sleep(0.01)

    written = anyio.Event()

    async def write_frames() -> None:
        try:
            async with from_server:
                async for item in from_server:
                    message = item.message
                    if isinstance(message, mcp_types.JSONRPCError) and (
                        (turned_away := take_unreached(message.id)) is not None
                    ):
                        with anyio.CancelScope(shield=True):  # recorded before it is answered
                            await endpoint.record_rejected_call(
                                {"id": turned_away.id, "params": turned_away.params},
                                None,
                                code=message.error.code,
                            )
                    if isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError):
                        settle(None if message.id is None else coerce_request_id(message.id))
                    data = message.model_dump_json(by_alias=True, exclude_unset=True)
                    await wire.write_line(data.encode("utf-8", "surrogatepass"))
        finally:
            written.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_turn)
            tg.start_soon(read_frames)
            tg.start_soon(write_frames)
            async with server_out:
                await server.run(server_in, server_out, server.create_initialization_options())
            # the client left: let the last answers out (the writer ends with the stream)
            with anyio.move_on_after(1.0):
                await written.wait()
            tg.cancel_scope.cancel()
    except anyio.BrokenResourceError:
        logger.info("bridge: the client closed stdout; ending the turn's stdio bridge")
    for message in unhanded:
        if isinstance(message, mcp_types.JSONRPCRequest) and message.method == "tools/call":
            # the final drain answers it: it is owed nothing else
            settle(coerce_request_id(message.id))
            waiting = unreached.get(message.id)
            if waiting and waiting[-1] is message:
                waiting.pop()
                if not waiting:
                    del unreached[message.id]
    # tools/call requests the server took that none of its middleware saw (nor its runner
    # refused): the stop ended it between taking one and dispatching it. Nothing recorded
    # them; they were answered "cancelled, and recorded as cancelled" all the same.
    taken = [message for waiting in unreached.values() for message in waiting]
    unreached.clear()
    for message in taken:
        settle(coerce_request_id(message.id))  # the final drain answers it
    if unhanded or taken:
        # a few messages: read before the stop, each is answered and recorded as a call
        # in flight is when its turn closes, not within the drain's share of the linger
        with anyio.CancelScope(shield=True), anyio.move_on_after(_UNHANDED_S):
            await _final_drain(wire, endpoint, [*unhanded, *taken], pipe=False)
    with anyio.CancelScope(shield=True), anyio.move_on_after(max(reserve, 0.05)):
        await _final_drain(wire, endpoint)
    if closed_by_host:
        # Requests still running when the host closed the turn (a call is cancelled, and
        # recorded so): answered as the HTTP bridge answers them, so the client reads why,
        # never only the end of its input ("Connection closed").
        for request_id in [i for ids in owed.values() for i in ids]:
            answer = error_message(request_id, CONNECTION_CLOSED, UNANSWERED)
            wire.write_line_nowait(json.dumps(answer, separators=(",", ":")).encode())
    with anyio.CancelScope(shield=True):
        await endpoint.recorder.flush()
    return closed_by_host


async def _take_line(
    wire: StdioWire, endpoint: TurnEndpoint, line: RawLine
) -> types.JSONRPCMessage | None:
    """Classify one line: the message to deliver, or ``None`` after refusing and answering it."""
    from sharedos.bridge.frames import classify, is_blank, oversized

    if line.oversized:
        frame = oversized(line.size, line.data, line.tail)
    elif is_blank(line.data):
        return None  # a blank line between frames: nothing was sent
    elif line.size > _THREAD_CLASSIFY_BYTES:
        # shielded: the thread runs to its end either way, and a cancellation taken at this
        # await threw its frame away, read off the pipe and never answered; the reader's
        # caller takes the cancellation at its next step, with the message in hand
        with anyio.CancelScope(shield=True):
            frame = await anyio.to_thread.run_sync(classify, line.data)
    else:
        frame = classify(line.data)
    if frame.message is not None:
        return frame.message
    with anyio.CancelScope(shield=True):  # a refused call is recorded even as the turn ends
        answers = [
            json.dumps(answer, separators=(",", ":")).encode()
            for answer in await endpoint.recorder.refuse(frame)
        ]
    written = 0
    try:
        for answer in answers:
            await wire.write_line(answer)
            written += 1
    except anyio.get_cancelled_exc_class():
        # the bridge stops (its turn closed): the client still reads until it exits, and an
        # answer left unwritten here was owed for a line it sent, recorded as refused
        with anyio.CancelScope(shield=True), anyio.move_on_after(_STOP_ANSWER_S):
            for answer in answers[written:]:
                await wire.write_line(answer)
        raise
    return None


async def _final_drain(
    wire: StdioWire,
    endpoint: TurnEndpoint,
    taken: Sequence[types.JSONRPCMessage] = (),
    *,
    pipe: bool = True,
) -> None:
    """Answer and record every call of ``taken`` (messages read off the pipe that never
    reached the server, or that it took and never dispatched) and, when ``pipe``, every
    call still in the pipe when the bridge stops (never run)."""
    import mcp_types

    from sharedos.bridge.answers import result_message
    from sharedos.bridge.frames import Frame, classify, is_blank, oversized
    from sharedos.context import ToolCall

    def frames() -> Iterator[Frame]:
        for message in taken:
            yield Frame(size=0, message=message)
        for line in wire.read_available() if pipe else ():
            if not line.oversized and is_blank(line.data):
                continue
            yield (
                oversized(line.size, line.data, line.tail)
                if line.oversized
                else classify(line.data)
            )

    for frame in frames():
        message = frame.message
        if message is None:
            for answer in await endpoint.recorder.refuse(frame):
                wire.write_line_nowait(json.dumps(answer, separators=(",", ":")).encode())
            continue
        if not (isinstance(message, mcp_types.JSONRPCRequest) and message.method == "tools/call"):
            continue
        params = message.params or {}
        name = params.get("name")
        tool = endpoint.canonical_name(name) if isinstance(name, str) else json.dumps(name)[:1024]
        call = ToolCall(
            tool=tool, arguments=params.get("arguments"), turn_id=endpoint.context.turn_id
        )
        meta = params.get("_meta")
        version = (
            meta.get("io.modelcontextprotocol/protocolVersion") if isinstance(meta, dict) else None
        )
        result = await endpoint.refuse_closed(
            call,
            {"bridge": {"transport": "stdio", "server": endpoint.server_name}, "finalDrain": True},
        )
        answer = result_message(message.id, result, version if isinstance(version, str) else None)
        wire.write_line_nowait(json.dumps(answer, separators=(",", ":")).encode())


def main_stdio(turn_path: Path) -> int:
    """Entry point of the CLI command; prints a one-line error (never a traceback) and returns a code."""
    try:
        turn = read_turn_file(turn_path)
        return anyio.run(partial(serve_stdio, turn, turn_path=turn_path))
    except TurnClosedError as exc:
        print(f"sharedos bridge: {one_line(str(exc))}", file=sys.stderr)
        return 3
    except (TurnFileError, OSError) as exc:
        print(f"sharedos bridge: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except Exception as exc:
        policy_error = type(exc).__name__ == "PolicyError"
        print(
            f"sharedos bridge: {'policy error' if policy_error else 'error'}: {one_line(str(exc))}",
            file=sys.stderr,
        )
        if os.environ.get("SHAREDOS_DEBUG"):
            raise
        return 2
