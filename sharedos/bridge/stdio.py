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
            await server.run(read_stream, write_stream, server.create_initialization_options())
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
