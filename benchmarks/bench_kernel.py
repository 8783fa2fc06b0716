"""Kernel benchmark: list_tools, catalog_hash, invoke_tool with evidence on and off.

Run: .venv/bin/python benchmarks/bench_kernel.py [--calls N]

Targets (issue 3): list_tools with 1,000 registered tools <= 5 ms; catalog_hash
of 1,000 tools <= 20 ms; evidence-on overhead per call <= 100 us at p50.
Figures are printed as measured on this machine; nothing is adjusted.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from sharedos.catalog import (
    PublishedToolDefinition,
    ToolAnnotations,
    ToolDefinition,
    ToolRegistry,
    catalog_hash,
)
from sharedos.evidence import EvidenceCounts, EvidenceRecord, SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy

N_TOOLS = 1000
N_NAMESPACES = 20


class NoEvidence:
    """Evidence off: satisfies the protocol and stores nothing (benchmark baseline only)."""

    def __init__(self) -> None:
        self.n = 0

    def record(self, record: EvidenceRecord) -> int:
        self.n += 1
        return self.n

    def begin(self, attempt: EvidenceRecord) -> int:
        self.n += 1
        return self.n

    def finish(self, seq: int, outcome: Any) -> None:
        return None

    def try_now(self, kind: str, *args: Any) -> tuple[bool, Any]:
        """Commit at once on the calling thread, as the SQLite store's no-wait path does,
        so "off" measures the kernel without a writer-thread hand-off."""
        if kind == "finish":
            return True, None
        self.n += 1
        return True, self.n

    def query(self, turn_id: str | None = None, **kw: Any) -> list[EvidenceRecord]:
        return []

    def counts(self, turn_id: str | None = None) -> EvidenceCounts:
        return EvidenceCounts(total=self.n)


async def trivial(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult(content=[{"type": "text", "text": "ok"}])


def build(distinct_shapes: bool = False) -> tuple[Kernel, ToolPolicy]:
    """1,000 tools in 20 namespaces. By default every tool of a namespace has the
    same requirement shape (action read, resource path(args.path)); with
    ``distinct_shapes`` each tool has its own action, so no two tools share a
    partial evaluation (the kernel's worst case)."""
    lines: list[str] = []
    tools: list[ToolDefinition] = []
    for ns in range(N_NAMESPACES):
        lines.append(f"namespace ns{ns}")
        for i in range(ns, N_TOOLS, N_NAMESPACES):
            name = f"ns{ns}.tool{i}"
            action = f"act{i}" if distinct_shapes else "read"
            lines.append(f"requirement {name} {{ action {action}; resource path(args.path) }}")
            tools.append(
                ToolDefinition(
                    name=name,
                    description=f"Tool number {i} of the benchmark catalogue.",
                    input_schema={
                        "type": "object",
                        "properties": {
                            "path": {"type": "string", "description": "absolute path"},
                            "limit": {"type": "integer", "minimum": 1},
                        },
                        "required": ["path"],
                    },
                    annotations=ToolAnnotations(read_only_hint=True),
                    handler=trivial,
                )
            )
        acts = "*" if distinct_shapes else "read"
        lines.append(f'permit {acts} on "/public/**"')
        lines.append(f'permit {acts} on "/home/{{context.principal}}/**"')
        lines.append(f'forbid {acts} on "/private/**" unless "admin" in context.roles')
    policy = compile_source("\n".join(lines) + "\n", "bench.sos")
    kernel = Kernel(policy, ToolRegistry(tools))
    run = ToolPolicy(name="bench", mode=RunMode.OPEN, managed=("**",))
    return kernel, run


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def row(label: str, samples: list[float], unit: str = "ms", target: float | None = None) -> str:
    k = 1e3 if unit == "ms" else 1e6
    p50, p99 = pct(samples, 0.5) * k, pct(samples, 0.99) * k
    verdict = ""
    if target is not None:
        verdict = f"   target <= {target:g} {unit}: {'MET' if p50 <= target else 'MISSED'}"
    return f"{label:<58} p50 {p50:9.3f} {unit}   p99 {p99:9.3f} {unit}{verdict}"


async def invoke_cpu(host: RuntimeHost, run: ToolPolicy, n: int) -> float:
    """Process CPU seconds per call (every thread: the loop and the evidence writer), mean of ``n``."""
    ctx = AccessContext(principal="alice", turn_id="bench-cpu")
    catalog = host.kernel.list_tools(ctx, run)
    calls = [
        ToolCall(call_id=f"cpu{i}", tool="ns3.tool3", arguments={"path": "/public/a.txt"})
        for i in range(n)
    ]
    t0 = time.process_time()
    for call in calls:
        await host.invoke_tool(call, ctx, run, catalog=catalog)
    return (time.process_time() - t0) / n


async def invoke_samples(host: RuntimeHost, run: ToolPolicy, n: int) -> list[float]:
    ctx = AccessContext(principal="alice", turn_id="bench")
    catalog = host.kernel.list_tools(ctx, run)
    samples = []
    for i in range(n):
        call = ToolCall(call_id=f"c{i}", tool="ns3.tool3", arguments={"path": "/public/a.txt"})
        t0 = time.perf_counter()
        result = await host.invoke_tool(call, ctx, run, catalog=catalog)
        samples.append(time.perf_counter() - t0)
        assert not result.is_error, result
    return samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="fewer calls (development)")
    args = ap.parse_args()
    if args.quick or os.environ.get("BENCH_QUICK") == "1":
        args.calls, args.reps = min(args.calls, 500), min(args.reps, 40)
    print(f"python {platform.python_version()} on {platform.machine()}, {N_TOOLS} tools")

    t0 = time.perf_counter()
    kernel, run = build()
    print(
        f"setup: compile policy + register {N_TOOLS} tools: {(time.perf_counter() - t0) * 1e3:.0f} ms"
    )

    alice = AccessContext(principal="alice", turn_id="bench")
    assert len(kernel.list_tools(alice, run)) == N_TOOLS

    def list_cold() -> None:
        # a context never seen before: no catalogue cache, no per-context policy cache
        list_cold.i += 1  # type: ignore[attr-defined]
        kernel.list_tools(AccessContext(principal=f"user{list_cold.i}", turn_id="b"), run)  # type: ignore[attr-defined]

    list_cold.i = 0  # type: ignore[attr-defined]

    def list_uncached() -> None:
        kernel._cache.clear()  # policy's per-context cache stays warm: a returning user
        kernel.list_tools(alice, run)

    print(
        row(
            "list_tools, 1,000 tools (20 requirement shapes), new context",
            timed(list_cold, args.reps),
            target=5,
        )
    )
    print(
        row(
            "list_tools, 1,000 tools, known context, catalogue recomputed",
            timed(list_uncached, args.reps),
            target=5,
        )
    )
    print(
        row(
            "list_tools, 1,000 tools, cached catalogue",
            timed(lambda: kernel.list_tools(alice, run), args.reps),
            target=5,
        )
    )

    worst, _ = build(distinct_shapes=True)
    n_worst = [0]

    def list_cold_distinct() -> None:
        n_worst[0] += 1
        worst.list_tools(AccessContext(principal=f"w{n_worst[0]}", turn_id="b"), run)

    assert len(worst.list_tools(alice, run)) == N_TOOLS
    print(
        row(
            "list_tools, new context, 1,000 distinct requirement shapes",
            timed(list_cold_distinct, max(20, args.reps // 5)),
            target=5,
        )
    )

    published = [t.published for t in kernel.registry.tools()]
    print(
        row(
            "catalog_hash, 1,000 published tools",
            timed(lambda: catalog_hash(published), args.reps),
            target=20,
        )
    )

    wires = [p.wire() for p in published]

    def hash_from_scratch() -> None:
        # new projections: validation + RFC 8785 encoding of every tool, then the hash
        catalog_hash([PublishedToolDefinition.model_validate(w) for w in wires])

    print(
        row(
            "catalog_hash, 1,000 tools incl. projection + JCS (first time)",
            timed(hash_from_scratch, 20),
        )
    )

    with tempfile.TemporaryDirectory() as tmp:
        off = RuntimeHost(kernel, NoEvidence())
        on = RuntimeHost(kernel, SqliteEvidenceStore(Path(tmp) / "normal.db"))
        full = RuntimeHost(kernel, SqliteEvidenceStore(Path(tmp) / "full.db", synchronous="FULL"))
        # interleave warm-up, then measure each; repeat off once more to expose drift
        for host in (off, on, full):
            anyio.run(invoke_samples, host, run, 200)
        s_off = anyio.run(invoke_samples, off, run, args.calls)
        s_on = anyio.run(invoke_samples, on, run, args.calls)
        s_full = anyio.run(invoke_samples, full, run, min(args.calls, 1000))
        s_off2 = anyio.run(invoke_samples, off, run, args.calls)
        # CPU, not wall time: what the evidence costs the host per call whatever the load
        cpu_off = [anyio.run(invoke_cpu, off, run, args.calls) for _ in range(3)]
        cpu_on = [anyio.run(invoke_cpu, on, run, args.calls) for _ in range(3)]
    s_off_all = s_off + s_off2
    print(row("invoke_tool, trivial handler, evidence off", s_off_all, unit="us"))
    print(row("invoke_tool, trivial handler, SQLite WAL synchronous=NORMAL", s_on, unit="us"))
    print(row("invoke_tool, trivial handler, SQLite WAL synchronous=FULL", s_full, unit="us"))
    overhead = (pct(s_on, 0.5) - pct(s_off_all, 0.5)) * 1e6
    overhead_full = (pct(s_full, 0.5) - pct(s_off_all, 0.5)) * 1e6
    print(
        f"{'evidence-on overhead at p50 (NORMAL, the default)':<58} {overhead:9.1f} us"
        f"   target <= 100 us: {'MET' if overhead <= 100 else 'MISSED'}"
    )
    print(f"{'evidence-on overhead at p50 (FULL, fsync per call)':<58} {overhead_full:9.1f} us")
    print(
        f"(mean off {statistics.fmean(s_off_all) * 1e6:.1f} us, mean on {statistics.fmean(s_on) * 1e6:.1f} us)"
    )
    # the lowest of three runs: CPU time is inflated, never deflated, by other work
    print(
        f"{'evidence CPU per call (NORMAL; process CPU on - off, min of 3)':<58} "
        f"{(min(cpu_on) - min(cpu_off)) * 1e6:9.1f} us   "
        f"(on {min(cpu_on) * 1e6:.1f} us, off {min(cpu_off) * 1e6:.1f} us per call)"
    )


if __name__ == "__main__":
    main()
