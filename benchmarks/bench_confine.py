"""Confinement benchmark: what the sandbox adds to a turn's open and to a call (issue 22).

Prints, beside today's unconfined figures:

- **harness launch** (the sandbox's share of a turn's open): a trivial program
  started and waited for through ``run_process`` as the runtime does —
  plainly (how harnesses were launched before), under SharedOS's supervisor
  (unconfined runs now), and in the harness sandbox (view planned and checked
  against managed roots, ``bwrap``, the in-sandbox ``init`` binding two
  loopback ports and handing them out, the host serving them, ``exec``); the
  view planning on its own;
- **harness → bridge call**: an MCP SDK client making ``tools/call`` against
  a real turn bridge, from the host's loopback and from inside a sandbox
  (its own loopback, the listener handed out and served by the same uvicorn);
- **brokered call**: ``tools/call`` to the fixture upstream through a pooled
  session, the upstream started plainly, supervised, and in its own sandbox;
  and the session's start (spawn + handshake) for each.

Targets: turn open <= +50 ms, per call <= +0.1 ms p50.
``python benchmarks/bench_confine.py [calls] [launches]``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sharedos.bridge import open_turn  # noqa: E402
from sharedos.catalog import ToolRegistry  # noqa: E402
from sharedos.confine import HarnessSandbox, find_bubblewrap, supervised  # noqa: E402
from sharedos.context import AccessContext  # noqa: E402
from sharedos.evidence import SqliteEvidenceStore  # noqa: E402
from sharedos.harness.hostconfig import parse_host_config  # noqa: E402
from sharedos.harness.process import run_process  # noqa: E402
from sharedos.kernel import Kernel, RuntimeHost  # noqa: E402
from sharedos.policy import compile_source  # noqa: E402
from sharedos.tools import register_files_tools  # noqa: E402
from sharedos.upstream.connection import UpstreamConnection  # noqa: E402
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide  # noqa: E402
from sharedos.upstream.secrets import resolve_credentials  # noqa: E402

FIXTURE = REPO / "tests" / "data" / "upstream" / "fixture_server.py"
PY = sys.executable
TRUE = "/bin/true"
RULES = """
namespace files
requirement files.read { action read; resource path(args.path) }
permit read on "/public/**"
toolpolicy run { mode strict
 managed files.*
 harness_local "shell" }
"""
#: the in-sandbox client: N tools/call on the bridge, latencies (s) as JSON on stdout
CLIENT = r"""
import asyncio, json, sys, time
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
async def main(url, token, n):
    out = []
    async with httpx2.AsyncClient(headers={"Authorization": "Bearer " + token}) as http:
        async with Client(streamable_http_client(url, http_client=http)) as c:
            for _ in range(20):
                await c.call_tool("files.read", {"path": "/public/a.txt"})
            for _ in range(n):
                t = time.perf_counter()
                r = await c.call_tool("files.read", {"path": "/public/a.txt"})
                out.append(time.perf_counter() - t)
                assert not r.is_error
    print(json.dumps(out))
asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:7.2f} ms, p95 {pct(values, 0.95) * 1000:7.2f} ms"


def _venv_paths() -> list[str]:
    """The project's venv and base Python: what the in-sandbox SDK client runs on."""
    return [str(Path(PY).parent.parent), os.path.realpath(sys.base_prefix)]


async def bench_launch(n: int, tmp: Path) -> tuple[float, float, float]:
    mechanism = find_bubblewrap()
    turn = tmp / "turn"
    turn.mkdir()
    managed = [tmp / "managed", tmp / "evidence.sqlite"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(turn)}
    plain: list[float] = []
    sup: list[float] = []
    confined: list[float] = []
    planning: list[float] = []
    listeners = []
    for _ in range(2):
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        listeners.append(s)
    ports = [s.getsockname()[1] for s in listeners]

    async def serve(sock: object) -> None:
        return None

    for _ in range(n):
        t = time.perf_counter()
        r = await run_process([TRUE], env=env, cwd=turn, timeout_s=30)
        plain.append(time.perf_counter() - t)
        assert r.returncode == 0
        t = time.perf_counter()
        r = await run_process(supervised([TRUE]), env=env, cwd=turn, timeout_s=30)
        sup.append(time.perf_counter() - t)
        assert r.returncode == 0, r.stderr
        t = time.perf_counter()
        sandbox = HarnessSandbox.plan(
            mechanism,
            readonly=[],
            writable=[turn],
            managed=managed,
            network="loopback",
            ports=ports,
            placeholders={str(turn): "{turn}"},
        )
        planning.append(time.perf_counter() - t)
        argv = sandbox.argv([TRUE], cwd=turn)
        serving = asyncio.ensure_future(sandbox.serve(dict.fromkeys(ports, serve)))
        r = await run_process(
            argv,
            env=env,
            cwd=turn,
            timeout_s=30,
            pass_fds=sandbox.pass_fds,
            on_spawn=sandbox.spawned,
        )
        await serving
        await sandbox.close()
        confined.append(time.perf_counter() - t)
        assert r.returncode == 0, r.stderr
    for s in listeners:
        s.close()
    print(f"harness launch (start + wait for {TRUE}), {n} launches each:")
    print(f"  plain (before: no supervisor, no sandbox)             {ms(plain)}")
    print(f"  supervised (unconfined runs: subreaper + pdeathsig)   {ms(sup)}")
    print(f"  confined (plan + bwrap + init + 2 ports handed out)   {ms(confined)}")
    print(f"    of which planning the view + managed-root checks    {ms(planning)}")
    added = statistics.median(confined) - statistics.median(plain)
    print(f"  the sandbox adds {added * 1000:.1f} ms p50 to a turn's open (target <= 50 ms)")
    return statistics.median(plain), statistics.median(sup), statistics.median(confined)


async def bench_bridge_call(n: int, rounds: int, tmp: Path) -> float:
    mechanism = find_bubblewrap()
    root = tmp / "root"
    (root / "public").mkdir(parents=True)
    (root / "public" / "a.txt").write_text("hello\n")
    policy = compile_source(RULES)
    registry = ToolRegistry()
    register_files_tools(registry, root)
    store = SqliteEvidenceStore(tmp / "evidence-bridge.sqlite")
    host = RuntimeHost(Kernel(policy, registry), store)
    script = tmp / "work" / "client.py"
    script.parent.mkdir()
    script.write_text(CLIENT)
    per = max(1, n // rounds)
    outside: list[float] = []
    inside: list[float] = []
    ctx = AccessContext(principal="bench")
    async with open_turn(host, ctx, policy.tool_policies["run"]) as turn:
        assert turn.url is not None and turn.token is not None and turn.serve_socket is not None
        port = turn.port
        assert port is not None
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp / "work")}
        for _ in range(rounds):
            r = await run_process(
                [PY, str(script), turn.url, turn.token, str(per)],
                env=env,
                cwd=script.parent,
                timeout_s=300,
                secrets=(turn.token,),
            )
            outside.extend(json.loads(r.stdout))
            sandbox = HarnessSandbox.plan(
                mechanism,
                readonly=_venv_paths(),
                writable=[script.parent],
                managed=[root, tmp / "evidence-bridge.sqlite"],
                network="loopback",
                ports=[port],
            )
            argv = sandbox.argv(
                [PY, str(script), turn.url, turn.token, str(per)], cwd=script.parent
            )
            serving = asyncio.ensure_future(sandbox.serve({port: turn.serve_socket}))
            r = await run_process(
                argv,
                env=env,
                cwd=script.parent,
                timeout_s=300,
                secrets=(turn.token,),
                pass_fds=sandbox.pass_fds,
                on_spawn=sandbox.spawned,
            )
            await serving
            await sandbox.close()
            assert r.returncode == 0, r.stderr[-2000:]
            inside.extend(json.loads(r.stdout))
    store.close()
    print(f"harness -> bridge tools/call (MCP SDK client, files.read), {len(outside)} calls each:")
    print(f"  from the host's loopback (unconfined)                 {ms(outside)}")
    print(f"  from inside the sandbox (its own loopback)            {ms(inside)}")
    added = statistics.median(inside) - statistics.median(outside)
    print(f"  the sandbox adds {added * 1000:+.3f} ms p50 per call (target <= +0.1 ms)")
    return added


async def bench_brokered(n: int, rounds: int, tmp: Path) -> float:
    share = tmp / "share"
    share.mkdir()
    base = f'[upstream.fx]\ncommand = "{PY}"\nargs = ["{FIXTURE}"]\npinning = "off"\n'
    plain_cfg = parse_host_config(base, "b").upstream["fx"]
    boxed_cfg = parse_host_config(
        base + f'roots = [{{ path = "{share}", mode = "rw" }}]\n', "b"
    ).upstream["fx"]
    variants = {
        "plain (before)": (plain_cfg, None),
        "supervised (unconfined now)": (
            plain_cfg,
            decide(plain_cfg, UpstreamConfinementPolicy()).wrap,
        ),
        "confined (own sandbox)": (
            boxed_cfg,
            decide(boxed_cfg, UpstreamConfinementPolicy(required=True)).wrap,
        ),
    }
    args = {"message": "benchmark", "path": "/public/a"}
    calls: dict[str, list[float]] = {k: [] for k in variants}
    starts: dict[str, float] = {}
    per = max(1, n // rounds)
    async with anyio.create_task_group() as tg:
        conns = {}
        for name, (cfg, wrap) in variants.items():
            conn = UpstreamConnection(
                cfg, resolve_credentials(cfg, {}), stderr=io.StringIO(), wrap=wrap
            )
            t = time.perf_counter()
            await conn.start(tg)
            starts[name] = time.perf_counter() - t
            conns[name] = conn
            for _ in range(20):
                await conn.call_tool("echo", args)
        for _ in range(rounds):
            for name, conn in conns.items():
                for _ in range(per):
                    t = time.perf_counter()
                    await conn.call_tool("echo", args)
                    calls[name].append(time.perf_counter() - t)
        for conn in conns.values():
            await conn.close()
    print(f"brokered upstream tools/call (fixture server, stdio), {per * rounds} calls each:")
    for name in variants:
        print(f"  {name:<30} call {ms(calls[name])}; session start {starts[name] * 1000:.0f} ms")
    added = statistics.median(calls["confined (own sandbox)"]) - statistics.median(
        calls["plain (before)"]
    )
    print(f"  the upstream's sandbox adds {added * 1000:+.3f} ms p50 per call (target <= +0.1 ms)")
    return added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calls", nargs="?", type=int, default=2000, help="calls per path")
    parser.add_argument("launches", nargs="?", type=int, default=60, help="launches per path")
    args = parser.parse_args()
    if os.environ.get("BENCH_QUICK") == "1":
        args.calls, args.launches = min(args.calls, 400), min(args.launches, 20)
    load = os.getloadavg()[0]
    bwrap = find_bubblewrap()
    print(
        f"bench_confine: {os.cpu_count()} cores, load average {load:.2f} at start; "
        f"{bwrap.name} {bwrap.version}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(bench_launch, args.launches, Path(tmp))
        anyio.run(bench_bridge_call, args.calls, 20, Path(tmp))
        anyio.run(bench_brokered, args.calls, 20, Path(tmp))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
