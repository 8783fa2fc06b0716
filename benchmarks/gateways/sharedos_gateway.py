"""SharedOS in front of the fixture upstream (stdio), as a host runs it: its own process.

``python -m benchmarks.gateways.sharedos_gateway --evidence DB|off -- COMMAND ARGS...``

A broker with the upstream pooled, the kernel (re-authorization of every
call against a compiled policy), write-ahead evidence in SQLite (WAL,
``synchronous=NORMAL``: on) and one turn's HTTP bridge with its bearer
token (``--evidence off``: a store that keeps nothing, to show what the
evidence costs; never a configuration SharedOS offers). Prints one JSON line ``{"url", "token", "tool"}`` when the turn is
open, and serves until its standard input closes.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from typing import Any

import anyio

from benchmarks.bench_kernel import NoEvidence
from sharedos.bridge import open_turn
from sharedos.catalog import ToolRegistry
from sharedos.context import AccessContext
from sharedos.evidence import SqliteEvidenceStore
from sharedos.harness.hostconfig import parse_host_config
from sharedos.kernel import Kernel, RuntimeHost
from sharedos.policy import compile_source
from sharedos.upstream.broker import UpstreamBroker

RULES = """
namespace fx
requirement fx.echo  { action read; resource path(args.path) }
requirement fx.crash { action read; resource path(args.path) }
permit read on "/public/**"
forbid read on "/public/**" when "suspended" in context.roles
toolpolicy run { mode strict
 managed fx.echo
 harness_local "shell" }
"""


async def serve(evidence: str, command: list[str]) -> None:
    """Open the turn, announce it, serve until stdin closes."""
    toml = (
        f"[upstream.fx]\ncommand = {json.dumps(command[0])}\n"
        f'args = {json.dumps(command[1:])}\npinning = "off"\n'
    )
    config = parse_host_config(toml, "gateway.toml")
    policy = compile_source(RULES, "gateway.sos")
    registry = ToolRegistry()
    store: Any = NoEvidence() if evidence == "off" else SqliteEvidenceStore(evidence)
    host = RuntimeHost(Kernel(policy, registry), store)
    tool_policy = policy.tool_policies["run"]
    ctx = AccessContext(principal="bench", roles=("dev",))
    async with UpstreamBroker(config.upstream, environ={}, stderr=io.StringIO()) as broker:
        broker.attach(registry, policy)
        async with broker.turn(ctx) as state, open_turn(host, ctx, tool_policy) as turn:
            assert all(s.state == "ok" for s in state.statuses), state.report()
            print(json.dumps({"url": turn.url, "token": turn.token, "tool": "fx.echo"}), flush=True)
            await anyio.to_thread.run_sync(sys.stdin.read)
    if evidence != "off":
        store.close()


def main() -> None:
    """Serve one turn until stdin closes."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--evidence", required=True)
    parser.add_argument("command", nargs="+")
    opts = parser.parse_args()
    anyio.run(serve, opts.evidence, opts.command)


if __name__ == "__main__":
    main()
