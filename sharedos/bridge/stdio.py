"""``sharedos bridge --stdio --turn FILE``: one turn's bridge over stdin/stdout.

Start-up matters (a harness launches this once per turn), so only what stdio
needs is imported: no uvicorn, no HTTP session manager of ours, no
conformance or harness machinery; a compiled policy bundle is loaded rather
than parsed when the turn file names one. The mcp SDK itself is the floor:
``import mcp`` pulls in its client and wire models (~0.6 s warm on the
reference machine).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio

from sharedos.bridge.turnfile import TurnFile, TurnFileError, read_turn_file


class TurnClosedError(RuntimeError):
    """The turn this bridge was launched for has already closed."""


class RecordingReadStream:
    """The stdio read stream, passed through; a ``tools/call`` the transport cannot deliver is recorded.

    Security (ADR 0014: no attempt may vanish): the SDK's stdio reader turns a
    line that is not a valid JSON-RPC message (a batch array, non-object
    ``params``, a wrong ``jsonrpc`` version) into an exception item, and a
    ``tools/call`` without an ``id`` into a notification the server drops;
    neither reaches the server's handler. Each such call is recorded as a
    refusal (nothing is run) before the item is handed on unchanged.
    """

    def __init__(self, inner: Any, on_rejected: Any) -> None:
        self._inner = inner
        self._on_rejected = on_rejected

    @property
    def last_context(self) -> Any:
        """The sender's context of the last item (the SDK reads it when present)."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        """The next item, after recording any tools/call it carries that cannot be served."""
        item = await self._inner.receive()
        for call in undeliverable_calls(item):
            await self._on_rejected(call, None)
        return item

    async def aclose(self) -> None:
        """Close the underlying stream."""
        await self._inner.aclose()

    def __aiter__(self) -> RecordingReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> RecordingReadStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def undeliverable_calls(item: Any) -> list[dict[str, Any]]:
    """The ``tools/call`` messages an item of the SDK's read stream carries but cannot deliver."""
    message = getattr(item, "message", None)
    if message is not None:  # a valid message: only a tools/call "notification" is dropped
        if type(message).__name__ == "JSONRPCNotification" and message.method == "tools/call":
            params = message.params if isinstance(message.params, dict) else {}
            return [{"method": "tools/call", "params": params}]
        return []
    errors = getattr(item, "errors", None)
    if not callable(errors):
        return []
    try:
        found = errors()
    except Exception:
        return []
    # The whole message appears as the input of the union's "is it a request?"
    # error (a batch array) or of the response member's missing "result" (an object).
    wholes = [
        e.get("input")
        for e in found
        if tuple(e.get("loc", ())) in (("JSONRPCRequest",), ("JSONRPCResponse", "result"))
    ]
    calls: list[dict[str, Any]] = []
    for whole in wholes[:1]:
        for candidate in whole if isinstance(whole, list) else [whole]:
            if isinstance(candidate, dict) and candidate.get("method") == "tools/call":
                calls.append(candidate)
    return calls


def build_runtime(turn: TurnFile) -> tuple[Any, Any]:
    """``(RuntimeHost, ToolPolicy)`` from the turn file: policy, registry, evidence store."""
    from sharedos.catalog.registry import ToolRegistry
    from sharedos.evidence.sqlite import SqliteEvidenceStore
    from sharedos.kernel.kernel import Kernel
    from sharedos.kernel.runtime import RuntimeHost

    if turn.bundle is not None:
        from sharedos.policy import load_bundle

        policy = load_bundle(turn.bundle)
    else:
        from sharedos.policy import compile_paths

        policy = compile_paths(turn.rules)
    registry = ToolRegistry()
    if "files" in turn.tool_sets:
        if turn.sandbox_root is None:
            raise TurnFileError("the files tool set needs sandbox_root in the turn file")
        from sharedos.tools.files import register_files_tools

        register_files_tools(registry, turn.sandbox_root)
    if "conformance" in turn.tool_sets:
        from sharedos.bridge.conformance_tools import conformance_tools

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
    evidence = SqliteEvidenceStore(turn.evidence_db)
    host = RuntimeHost(Kernel(policy, registry), evidence, handler_timeout_s=turn.handler_timeout_s)
    return host, tool_policy


async def serve_stdio(turn: TurnFile, *, poll_s: float = 0.05) -> int:
    """Serve the turn on stdin/stdout until the client leaves or the turn closes; exit code."""
    if not turn.open_marker.exists():
        raise TurnClosedError("this turn has already closed")
    host, tool_policy = build_runtime(turn)
    catalog = host.kernel.list_tools(turn.context, tool_policy)
    if turn.catalog_hash is not None and catalog.catalog_hash != turn.catalog_hash:
        # Policy, tools or sandbox changed between the host opening the turn and
        # the harness launching us: serving a different catalogue than the one
        # the host recorded would make the run's catalogHash a lie.
        raise TurnFileError(
            f"catalogue drift: the host opened this turn with catalogHash {turn.catalog_hash[:12]}…, "
            f"this bridge computes {catalog.catalog_hash[:12]}… (policy or tools changed); refusing to serve"
        )

    from mcp.server.stdio import stdio_server

    from sharedos.bridge.server import TurnEndpoint

    marker = turn.open_marker
    endpoint = TurnEndpoint(
        runtime_host=host,
        context=turn.context,
        tool_policy=tool_policy,
        catalog=catalog,
        server_name=turn.server_name,
        portable_names=turn.portable_names,
        transport="stdio",
        identity=turn.identity,
        is_open=marker.exists,
    )
    server = endpoint.build_server()
    closed_by_host = False

    async with anyio.create_task_group() as tg:

        async def watch_turn() -> None:
            nonlocal closed_by_host
            while marker.exists():
                await anyio.sleep(poll_s)
            endpoint.closed = True
            closed_by_host = True
            # Calls arriving in this window are refused and recorded (turn_closed);
            # then the door closes for good.
            await anyio.sleep(turn.close_linger_s)
            tg.cancel_scope.cancel()

        tg.start_soon(watch_turn)
        async with stdio_server() as (read_stream, write_stream):
            recording = RecordingReadStream(read_stream, endpoint.record_rejected_call)
            await server.run(recording, write_stream, server.create_initialization_options())
        tg.cancel_scope.cancel()
    return 3 if closed_by_host else 0


def main_stdio(turn_path: Path) -> int:
    """Entry point of the CLI command; prints a one-line error (never a traceback) and returns a code."""
    try:
        turn = read_turn_file(turn_path)
        return anyio.run(serve_stdio, turn)
    except TurnClosedError as exc:
        print(f"sharedos bridge: {exc}", file=sys.stderr)
        return 3
    except (TurnFileError, OSError) as exc:
        print(f"sharedos bridge: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        policy_error = type(exc).__name__ == "PolicyError"
        print(
            f"sharedos bridge: {'policy error' if policy_error else 'error'}: {exc}",
            file=sys.stderr,
        )
        if os.environ.get("SHAREDOS_DEBUG"):
            raise
        return 2
