"""Catalogue scale for ``bench_upstream.py``: tools per upstream, upstreams, concurrent turns.

Every figure comes from the fixture upstream (``tests/data/upstream/fixture_server.py
--many N``: the fixed set of 10 tools plus N generated ones), brokered by a real
``UpstreamBroker`` into a real kernel with SQLite evidence, served by the real turn
bridge, called with the official SDK client. Three sweeps around one base point
(1 upstream, 1 turn at a time):

- **tools** from one upstream: 10 / 1,000 / 10,000. Turn open (the broker's snapshot
  with a fresh ``tools/list``, the same with the listing reused (``list_cache_s``), and
  the catalogue + bridge); CPU per brokered call, the three sizes alive at once and
  called in interleaved rounds so the 10 vs 10,000 ratio is taken in one run; and a
  2025-11-25 client listing every page of the turn and calling its last tool;
- **upstreams**: 1 / 5 / 20, 100 tools each: turn open, CPU per call;
- **concurrent turns**: 1 / 10 / 100 on one upstream of 1,000 tools: all open at once,
  each calls through its own SDK client.

CPU is this process's (``time.process_time``: the SDK client, the bridge, the kernel,
the evidence writer thread and the broker's client to the upstream; never the upstream
process). Targets (issue 27): CPU per brokered call at 10,000 tools within 1.1x of 10;
turn open <= 50 ms at 1,000 tools and <= 250 ms at 10,000.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sharedos.bridge import open_turn
from sharedos.catalog import ToolRegistry
from sharedos.context import AccessContext, ToolCall
from sharedos.evidence import SqliteEvidenceStore
from sharedos.harness.hostconfig import parse_host_config
from sharedos.kernel import Kernel, RuntimeHost
from sharedos.policy import compile_source
from sharedos.toolpolicy import ToolPolicy
from sharedos.upstream.broker import UpstreamBroker

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "data" / "upstream" / "fixture_server.py"
PY = sys.executable
#: the fixture's own tools, each given a requirement too (so N tools listed = N published)
FIXED_TOOLS = (
    "echo",
    "slow",
    "crash",
    "progress",
    "whoami",
    "fail",
    "protocol_error",
    "leak",
    "gate",
    "big",
)
FIXED = len(FIXED_TOOLS)
ARGS = {"message": "benchmark", "path": "/public/a"}


def rules(namespaces: list[str], generated: int) -> str:
    """Requirements for every fixed and generated tool of each namespace; one run policy."""
    lines: list[str] = []
    for ns in namespaces:
        lines.append(f"namespace {ns}")
        lines += [
            f"requirement {ns}.{t} {{ action read; resource path(args.path) }}" for t in FIXED_TOOLS
        ]
        lines += [
            f"requirement {ns}.t{i:05d} {{ action read; resource path(args.path) }}"
            for i in range(generated)
        ]
        lines.append('permit read on "/public/**"')
    managed = ", ".join(f"{ns}.*" for ns in namespaces)
    lines.append(f'toolpolicy run {{ mode strict\n managed {managed}\n harness_local "shell" }}')
    return "\n".join(lines) + "\n"


@dataclass
class Env:
    """One broker over ``namespaces`` upstreams, a kernel, SQLite evidence."""

    broker: UpstreamBroker
    host: RuntimeHost
    tool_policy: ToolPolicy
    namespaces: list[str]
    tools: int  # listed per upstream


@contextlib.asynccontextmanager
async def environment(
    tmp: Path, name: str, upstreams: int, generated: int, cache_s: float = 0.0
) -> AsyncIterator[Env]:
    """The fixture ``upstreams`` times, ``generated`` tools each beyond its fixed 10."""
    namespaces = [f"u{i:02d}" for i in range(upstreams)]
    toml = "".join(
        f'[upstream.{ns}]\ncommand = "{PY}"\nargs = ["{FIXTURE}", "--many", "{generated}"]\n'
        f'pinning = "off"\nlist_cache_s = {cache_s}\n'
        # the default cap (limits.max_tools = 1,000) would drop the generated tools
        # past it: raised to exactly what the fixture lists
        f"limits = {{ max_tools = {FIXED + generated} }}\n"
        for ns in namespaces
    )
    config = parse_host_config(toml, f"{name}.toml")
    policy = compile_source(rules(namespaces, generated), f"{name}.sos")
    registry = ToolRegistry()
    store = SqliteEvidenceStore(tmp / f"{name}.sqlite")
    host = RuntimeHost(Kernel(policy, registry), store)
    try:
        async with UpstreamBroker(config.upstream, environ={}, stderr=io.StringIO()) as broker:
            broker.attach(registry, policy)
            env = Env(broker, host, policy.tool_policies["run"], namespaces, FIXED + generated)
            async with broker.turn(AccessContext(principal="warm")) as state:  # spawn + first list
                assert all(s.state == "ok" for s in state.statuses), state.report()
                async with open_turn(host, AccessContext(principal="warm"), env.tool_policy):
                    pass
            yield env
    finally:
        store.close()


async def open_turns(env: Env, turns: int) -> dict[str, float]:
    """p50 ms of: the broker snapshot, the catalogue + bridge, both (open and close)."""
    snap: list[float] = []
    bridge: list[float] = []
    total: list[float] = []
    for i in range(turns):
        ctx = AccessContext(principal=f"user{i % 10}")
        t0 = time.perf_counter()
        async with env.broker.turn(ctx):
            t1 = time.perf_counter()
            async with open_turn(env.host, ctx, env.tool_policy) as turn:
                t2 = time.perf_counter()
                assert len(turn.catalog) == env.tools * len(env.namespaces)
        total.append(time.perf_counter() - t0)
        snap.append(t1 - t0)
        bridge.append(t2 - t1)
    return {
        "snapshot_ms": statistics.median(snap) * 1000,
        "bridge_ms": statistics.median(bridge) * 1000,
        "open_ms": statistics.median([s + b for s, b in zip(snap, bridge, strict=True)]) * 1000,
        "open_close_ms": statistics.median(total) * 1000,
    }


@dataclass
class Caller:
    """One open turn of an environment, and an SDK client connected to its bridge."""

    env: Env
    ctx: AccessContext
    catalog: Any
    client: Client
    tool: str
    kernel_cpu: float = 0.0
    bridged_cpu: float = 0.0
    kernel_calls: int = 0
    bridged: list[float] | None = None


@contextlib.asynccontextmanager
async def caller(env: Env, mode: str = "auto") -> AsyncIterator[Caller]:
    """A turn of ``env`` with a connected client (its last namespace's echo is called)."""
    ctx = AccessContext(principal="caller")
    async with (
        env.broker.turn(ctx),
        open_turn(env.host, ctx, env.tool_policy) as turn,
        httpx2.AsyncClient(headers=turn.headers(), timeout=60) as http,
        Client(streamable_http_client(str(turn.url), http_client=http), mode=mode) as client,  # type: ignore[arg-type]
    ):
        # a client lists every page first (as the harnesses do): the SDK client re-lists
        # page 1 on every call of a tool it has not seen listed
        page = await client.list_tools()
        while page.next_cursor is not None:
            page = await client.list_tools(cursor=page.next_cursor)
        yield Caller(env, ctx, turn.catalog, client, f"{env.namespaces[-1]}.echo", bridged=[])


async def call_rounds(callers: list[Caller], calls: int, rounds: int) -> None:
    """Interleaved rounds: per caller, ``calls/rounds`` kernel calls then as many bridged ones."""
    per = max(1, calls // rounds)
    for c in callers:  # warm-up
        for _ in range(30):
            await c.client.call_tool(c.tool, ARGS)
            await c.env.host.invoke_tool(
                ToolCall(tool=c.tool, arguments=ARGS), c.ctx, c.env.tool_policy, catalog=c.catalog
            )
    for i in range(rounds):
        k = i % len(callers)
        for c in callers[k:] + callers[:k]:
            t = time.process_time()
            for _ in range(per):
                r = await c.env.host.invoke_tool(
                    ToolCall(tool=c.tool, arguments=ARGS),
                    c.ctx,
                    c.env.tool_policy,
                    catalog=c.catalog,
                )
                assert not r.is_error, r
            c.kernel_cpu += time.process_time() - t
            c.kernel_calls += per
            t = time.process_time()
            for _ in range(per):
                w = time.perf_counter()
                res = await c.client.call_tool(c.tool, ARGS)
                assert c.bridged is not None
                c.bridged.append(time.perf_counter() - w)
                assert not res.is_error, res
            c.bridged_cpu += time.process_time() - t


async def legacy_client(env: Env) -> dict[str, Any]:
    """A 2025-11-25 SDK client in a turn of ``env``: every page listed, the last tool called."""
    ctx = AccessContext(principal="legacy")
    out: dict[str, Any] = {"works": False}
    try:
        async with (
            env.broker.turn(ctx),
            open_turn(env.host, ctx, env.tool_policy) as turn,
            httpx2.AsyncClient(headers=turn.headers(), timeout=120) as http,
            Client(streamable_http_client(str(turn.url), http_client=http), mode="legacy") as c,
        ):
            t0 = time.perf_counter()
            pages = [await c.list_tools()]
            while pages[-1].next_cursor is not None:
                pages.append(await c.list_tools(cursor=pages[-1].next_cursor))
            listed = time.perf_counter() - t0
            names = [t.name for p in pages for t in p.tools]
            r = await c.call_tool(names[-1], ARGS)
            out = {
                "works": (not r.is_error) and names == sorted(turn.catalog.names),
                "era": c.protocol_version,
                "pages": len(pages),
                "tools": len(names),
                "list_all_ms": listed * 1000,
            }
    except Exception as exc:  # what "unusable" looked like: report it, do not stop the run
        out["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out


async def sweep_tools(tmp: Path, quick: bool) -> dict[str, Any]:
    """Tools per upstream: 10 / 1,000 / 10,000 (see the module docstring)."""
    sizes = (10, 1000, 10000)
    turns = {10: 5 if quick else 30, 1000: 5 if quick else 30, 10000: 3 if quick else 10}
    out: dict[str, Any] = {"sizes": {}}
    async with contextlib.AsyncExitStack() as stack:
        envs: dict[int, Env] = {}
        for n in sizes:
            t0 = time.perf_counter()
            envs[n] = await stack.enter_async_context(environment(tmp, f"tools{n}", 1, n - FIXED))
            cached = await stack.enter_async_context(
                environment(tmp, f"tools{n}c", 1, n - FIXED, cache_s=3600)
            )
            first = time.perf_counter() - t0
            fresh = await open_turns(envs[n], turns[n])
            reused = await open_turns(cached, turns[n])
            out["sizes"][n] = {
                "setup_s": first,
                "fresh": fresh,
                "cached": reused,
                "legacy": await legacy_client(envs[n]),
            }
        callers = [await stack.enter_async_context(caller(envs[n])) for n in sizes]
        await call_rounds(callers, 200 if quick else 1000, 10 if quick else 20)
        for n, c in zip(sizes, callers, strict=True):
            assert c.bridged is not None
            out["sizes"][n]["kernel_cpu_ms"] = c.kernel_cpu / c.kernel_calls * 1000
            out["sizes"][n]["bridged_cpu_ms"] = c.bridged_cpu / len(c.bridged) * 1000
            out["sizes"][n]["bridged_p50_ms"] = statistics.median(c.bridged) * 1000
    small, big = out["sizes"][10], out["sizes"][10000]
    out["ratio_bridged_cpu_10000_vs_10"] = big["bridged_cpu_ms"] / small["bridged_cpu_ms"]
    out["ratio_kernel_cpu_10000_vs_10"] = big["kernel_cpu_ms"] / small["kernel_cpu_ms"]
    return out


async def sweep_upstreams(tmp: Path, quick: bool) -> dict[str, Any]:
    """Upstreams: 1 / 5 / 20, 100 tools each."""
    out: dict[str, Any] = {}
    for u in (1, 5, 20):
        async with environment(tmp, f"ups{u}", u, 100 - FIXED) as env:
            fresh = await open_turns(env, 5 if quick else 20)
            async with caller(env) as c:
                await call_rounds([c], 100 if quick else 400, 4)
                assert c.bridged is not None
                out[u] = {
                    "fresh": fresh,
                    "kernel_cpu_ms": c.kernel_cpu / c.kernel_calls * 1000,
                    "bridged_cpu_ms": c.bridged_cpu / len(c.bridged) * 1000,
                    "bridged_p50_ms": statistics.median(c.bridged) * 1000,
                }
    return out


@dataclass
class Crowd:
    """What ``n`` concurrent turns saw."""

    n: int
    all_open: anyio.Event
    sem: anyio.Semaphore
    opened: list[float]
    call_ms: list[float]
    failures: int = 0
    errors: list[str] = field(default_factory=list)


async def crowd_turn(env: Env, crowd: Crowd, i: int) -> None:
    """One of the concurrent turns: open, wait for all, connect, 3 calls, close."""
    ctx = AccessContext(principal=f"p{i}")
    t0 = time.perf_counter()
    async with env.broker.turn(ctx), open_turn(env.host, ctx, env.tool_policy) as turn:
        crowd.opened.append(time.perf_counter() - t0)
        if len(crowd.opened) == crowd.n:
            crowd.all_open.set()
        await crowd.all_open.wait()
        try:
            async with (
                crowd.sem,
                httpx2.AsyncClient(headers=turn.headers(), timeout=60) as http,
                Client(streamable_http_client(str(turn.url), http_client=http)) as c,
            ):
                page = await c.list_tools()  # every page first, as a harness does
                while page.next_cursor is not None:
                    page = await c.list_tools(cursor=page.next_cursor)
                for k in range(3):
                    t1 = time.perf_counter()
                    r = await c.call_tool("u00.echo", {**ARGS, "message": f"{i}-{k}"})
                    crowd.call_ms.append((time.perf_counter() - t1) * 1000)
                    if r.is_error or f"{i}-{k}" not in str(r.content):
                        crowd.failures += 1
        except Exception as exc:  # counted and shown, never hidden
            crowd.failures += 1
            while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
                exc = exc.exceptions[0]  # type: ignore[assignment]
            crowd.errors.append(f"{type(exc).__name__}: {exc}"[:200])


async def sweep_concurrency(tmp: Path, quick: bool) -> dict[str, Any]:
    """1 / 10 / 100 turns at once on one upstream of 1,000 tools; 3 calls per turn."""
    out: dict[str, Any] = {}
    async with environment(tmp, "conc", 1, 1000 - FIXED) as env:
        for n in (1, 10, 100):
            # at most 25 SDK clients connected at a time (as bench_bridge)
            crowd = Crowd(n, anyio.Event(), anyio.Semaphore(25), [], [])
            cpu0, t0 = time.process_time(), time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(crowd_turn, env, crowd, i)
            wall = time.perf_counter() - t0
            out[n] = {
                "all_open_ms": max(crowd.opened) * 1000,
                "open_p50_ms": statistics.median(crowd.opened) * 1000,
                "wall_ms": wall * 1000,
                "cpu_ms_per_turn": (time.process_time() - cpu0) / n * 1000,
                "call_p50_ms": statistics.median(crowd.call_ms),
                "calls_per_s": len(crowd.call_ms) / wall,
                "failures": crowd.failures,
                "errors": crowd.errors[:5],
            }
    return out


def print_report(res: dict[str, Any]) -> None:
    """The three sweeps as text, with the issue-27 targets."""
    tools = res["tools"]
    print("\ncatalogue scale: one upstream (fixture, stdio), tools per upstream")
    print(
        f"  {'tools':>6} {'snapshot':>9} {'catalogue':>10} {'open':>8} {'snapshot':>9} {'open':>8}"
        f" {'call CPU':>9} {'call CPU':>9} {'call p50':>9}  2025-11-25 client"
    )
    print(
        f"  {'':>6} {'fresh ms':>9} {'+bridge ms':>10} {'fresh ms':>8} {'reused ms':>9} {'reused':>8}"
        f" {'kernel ms':>9} {'bridged':>9} {'bridged':>9}"
    )
    for n, s in tools["sizes"].items():
        lg = s["legacy"]
        legacy = (
            f"works: {lg['pages']} page(s), all listed in {lg['list_all_ms']:.0f} ms"
            if lg.get("works")
            else f"FAILS: {lg.get('error', 'wrong listing')}"
        )
        print(
            f"  {n:>6} {s['fresh']['snapshot_ms']:9.1f} {s['fresh']['bridge_ms']:10.1f} "
            f"{s['fresh']['open_ms']:8.1f} {s['cached']['snapshot_ms']:9.1f} {s['cached']['open_ms']:8.1f}"
            f" {s['kernel_cpu_ms']:9.3f} {s['bridged_cpu_ms']:9.3f} {s['bridged_p50_ms']:9.2f}  {legacy}"
        )
    print(
        f"  CPU per brokered call, 10,000 vs 10 tools: {tools['ratio_bridged_cpu_10000_vs_10']:.3f}x "
        f"through the bridge (target <= 1.1x), {tools['ratio_kernel_cpu_10000_vs_10']:.3f}x kernel + "
        "forwarding alone"
    )
    for n, want in ((1000, 50), (10000, 250)):
        s = tools["sizes"][n]
        print(
            f"  turn open at {n:,} tools: {s['cached']['open_ms']:.1f} ms with the listing reused, "
            f"{s['fresh']['open_ms']:.1f} ms with a fresh tools/list (target <= {want} ms); "
            f"catalogue + bridge {s['fresh']['bridge_ms']:.1f} ms"
        )
    ups = res["upstreams"]
    print("\nupstreams, 100 tools each: turn open (fresh listings) and CPU per call")
    for u, s in ups.items():
        print(
            f"  {u:>3} upstreams: open {s['fresh']['open_ms']:7.1f} ms (snapshot {s['fresh']['snapshot_ms']:6.1f},"
            f" catalogue + bridge {s['fresh']['bridge_ms']:5.1f}); call CPU kernel {s['kernel_cpu_ms']:.3f} ms, "
            f"bridged {s['bridged_cpu_ms']:.3f} ms, p50 {s['bridged_p50_ms']:.2f} ms"
        )
    conc = res["concurrency"]
    print(
        "\nconcurrent turns on one upstream of 1,000 tools (each: its own bridge, client, 3 calls)"
    )
    for n, s in conc.items():
        print(
            f"  {n:>3} turns: all open after {s['all_open_ms']:7.1f} ms (p50 {s['open_p50_ms']:6.1f}); "
            f"{s['calls_per_s']:6.0f} calls/s, call p50 {s['call_p50_ms']:6.2f} ms; "
            f"CPU {s['cpu_ms_per_turn']:6.1f} ms a turn; wrong/failed {s['failures']}"
        )
        for e in s.get("errors", []):
            print(f"      {e}")


async def run(tmp: Path, quick: bool) -> dict[str, Any]:
    """All three sweeps."""
    res = {
        "tools": await sweep_tools(tmp, quick),
        "upstreams": await sweep_upstreams(tmp, quick),
        "concurrency": await sweep_concurrency(tmp, quick),
    }
    print_report(res)
    return res
