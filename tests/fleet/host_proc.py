"""One host of the fleet test: many concurrent turns of real calls, evidence on a shared store.

Usage::

    python -m tests.fleet.host_proc --db URL --host H --sandbox DIR \\
        [--turns 25] [--calls 12] [--pause-after N] [--checkpoint-interval S] [--sign-key PEM]

A real ``RuntimeHost`` (kernel, the files tools over ``DIR``, the evidence
store at ``URL``) runs ``--turns`` turns at once; each turn opens its chain,
makes ``--calls`` calls in sequence — a write (an effect: a file named after
the call id), an allowed read, a denied read — and seals its chain. Every
returned result is printed at once, flushed, as::

    R <turn_id> <call_id> <outcome> <reason> <evidence_seq>

so the parent knows what was answered even if it kills this process. With
``--pause-after N`` every turn waits, after its N-th call, for a line on
stdin (the parent kills a database connection meanwhile). The last line is
``DONE <calls made> <seconds> <start epoch> <end epoch>``. ``--checkpoint-interval``
and ``--sign-key`` are the host's ``[evidence] checkpoint_interval_s`` and ``sign_key``.
"""

from __future__ import annotations

import argparse
import sys
import time

import anyio

from sharedos.catalog import ToolRegistry
from sharedos.evidence.turns import evidence_turn
from sharedos.evidence.url import open_store
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools

POLICY = """
namespace files
requirement files.read  { action read;  resource path(args.path) }
requirement files.write { action write; resource path(args.path) }
permit read on "/public/**"
permit read, write on "/home/{context.principal}/**"
forbid * on "/private/**"
"""
RUN = ToolPolicy(name="fleet", mode=RunMode.OPEN, managed=("files.*",))


def _call(turn: str, principal: str, i: int) -> ToolCall:
    call_id = f"{turn}.{i}"
    kind = i % 3
    if kind == 0:
        return ToolCall(
            call_id=call_id,
            tool="files.write",
            arguments={"path": f"/home/{principal}/{call_id}.txt", "content": call_id},
        )
    if kind == 1:
        return ToolCall(call_id=call_id, tool="files.read", arguments={"path": "/public/a.txt"})
    return ToolCall(call_id=call_id, tool="files.read", arguments={"path": "/private/s.txt"})


async def main(args: argparse.Namespace) -> None:
    registry = ToolRegistry()
    register_files_tools(registry, args.sandbox)
    kernel = Kernel(compile_source(POLICY, "fleet.sos"), registry)
    signer = None
    if args.sign_key:
        from pathlib import Path

        from sharedos.evidence.chain import Signer

        signer = Signer.from_pem(Path(args.sign_key).read_bytes())
    store = open_store(args.db, signer=signer, checkpoint_interval_s=args.checkpoint_interval)
    host = RuntimeHost(kernel, store)
    made = 0
    resume = anyio.Event()
    paused = 0

    def out(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    async def wait_for_parent() -> None:
        await anyio.to_thread.run_sync(sys.stdin.readline)
        resume.set()

    async def turn(n: int) -> None:
        nonlocal made, paused
        principal = f"{args.host}-p{n}"
        ctx = AccessContext(principal=principal, turn_id=f"{args.host}-t{n}")
        catalog = kernel.list_tools(ctx, RUN)
        async with evidence_turn(
            store,
            turn_id=ctx.turn_id,
            catalog_hash=catalog.catalog_hash,
            policy_hash=kernel.policy_hash,
        ):
            for i in range(args.calls):
                made += 1
                result = await host.invoke_tool(
                    _call(ctx.turn_id, principal, i), ctx, RUN, catalog=catalog
                )
                reason = str(result.reason) if result.reason is not None else "-"
                out(
                    f"R {ctx.turn_id} {result.call_id} {result.outcome} {reason} {result.evidence_seq}"
                )
                if args.pause_after and i + 1 == args.pause_after:
                    paused += 1
                    if paused == args.turns:
                        out("PAUSED")
                    await resume.wait()

    started, wall_start = time.perf_counter(), time.time()
    async with anyio.create_task_group() as tg:
        if args.pause_after:
            tg.start_soon(wait_for_parent)
        for n in range(args.turns):
            tg.start_soon(turn, n)
    out(f"DONE {made} {time.perf_counter() - started:.3f} {wall_start:.6f} {time.time():.6f}")
    store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--sandbox", required=True)
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--pause-after", type=int, default=0)
    parser.add_argument("--checkpoint-interval", type=float, default=None)
    parser.add_argument("--sign-key", default=None)
    anyio.run(main, parser.parse_args())
