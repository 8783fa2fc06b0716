"""SharedOS beside the gateways users would otherwise put in front of an MCP server.

One upstream (the project's fixture server, official SDK, ``echo``), one client
(the official SDK ``Client`` over streamable HTTP), every server in its own
process on 127.0.0.1, measured in one run with interleaved rounds:

- **direct**: the client runs the upstream itself over stdio, as a harness does
  without a gateway (the baseline of "added latency": every gateway below also
  talks stdio to the upstream); and, for reference, the upstream served over
  streamable HTTP by its own SDK server;
- **FastMCP proxy**: ``fastmcp`` 4.2.3 ``create_proxy`` over the upstream (stdio),
  and the same with a deny-by-name middleware (``benchmarks/gateways/fastmcp_proxy.py``);
- **mcp-proxy**: ``mcp-proxy`` 0.13.0 (PyPI), a stdio-to-HTTP transport bridge. It
  needs ``mcp<2`` and cannot share the project's venv (``mcp`` 2.3): this script
  makes it a venv of its own under ``.venv/peers/`` on first use (``pip``);
- **SharedOS**: broker + kernel (re-authorization against a compiled policy) +
  write-ahead evidence in SQLite (on) + the turn's HTTP bridge
  (``benchmarks/gateways/sharedos_gateway.py``); and, to show what the evidence
  costs, the same with a store that keeps nothing (not graded).

The graded era is 2025-11-25 (the handshake era every peer speaks; mcp-proxy's
SDK knows no later one); a second pass lets each server negotiate its latest.
"Added latency" is a server's p50 minus direct's (stdio) p50 in the same run. Target
(issue 27): SharedOS's added latency <= 1.2 x mcp-proxy's, evidence on.
CPU per call is the server process's own (``psutil``; the upstream child excluded).

``python benchmarks/bench_gateways.py [--calls N] [--quick] [--json PATH]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psutil
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "data" / "upstream" / "fixture_server.py"
PY = sys.executable
MCP_PROXY_VERSION = "0.13.0"
PEERS_DIR = REPO / ".venv" / "peers"
ARGS = {"message": "benchmark", "path": "/public/a"}
UPSTREAM = [PY, str(FIXTURE)]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_mcp_proxy() -> tuple[Path | None, str]:
    """``mcp-proxy`` in its own venv (made on first use); (None, why) when it cannot be had."""
    venv = PEERS_DIR / f"mcp-proxy-{MCP_PROXY_VERSION}"
    exe = venv / "bin" / "mcp-proxy"
    if exe.exists():
        return exe, f"mcp-proxy {MCP_PROXY_VERSION} (own venv: {venv.relative_to(REPO)})"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "--quiet", f"mcp-proxy=={MCP_PROXY_VERSION}"],
            check=True,
            capture_output=True,
            timeout=600,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        return None, f"mcp-proxy could not be installed in its own venv ({type(exc).__name__})"
    return exe, f"mcp-proxy {MCP_PROXY_VERSION} (own venv, made now: {venv.relative_to(REPO)})"


@dataclass
class Server:
    """One server process under test."""

    name: str
    label: str
    proc: subprocess.Popen[str] | None  # None: the upstream over the client's stdio
    url: str | None
    tool: str = "echo"
    token: str | None = None
    samples: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    version: dict[str, str] = field(default_factory=dict)

    pid: int | None = None

    def cpu_seconds(self) -> float:
        """User + system CPU of the server process itself (not its children)."""
        pid = self.proc.pid if self.proc is not None else self.pid
        if pid is None:
            return 0.0
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)

    def headers(self) -> dict[str, str]:
        """The bearer token header (SharedOS's turn), else none."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


def _spawn(argv: list[str], *, announces: bool = False, **kw: Any) -> subprocess.Popen[str]:
    # Only a server that announces itself on stdout (SharedOS's turn: one line) gets a
    # pipe; nobody reads a peer's stdout, and a peer that logs there (mcp-proxy's uvicorn
    # writes an access-log line per request) would fill an unread pipe after ~1,000
    # calls and block mid-run (the run then died of a client ReadTimeout).
    return subprocess.Popen(
        argv,
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE if announces else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        **kw,
    )


@contextlib.contextmanager
def servers(tmp: Path, quick: bool) -> Iterator[tuple[list[Server], list[str]]]:
    """Start every server; stop them all when the block ends, whatever happens."""
    started = [Server("direct", "upstream direct (stdio, the client runs it)", None, None)]
    notes: list[str] = []
    try:
        port = free_port()
        proc = _spawn([*UPSTREAM, "--http", str(port), "--max-life", "7200"])
        url = f"http://127.0.0.1:{port}/mcp"
        started.append(Server("direct_http", "upstream direct (its own HTTP server)", proc, url))
        for name, label, extra in (
            ("fastmcp", "FastMCP proxy (fastmcp 4.2.3)", []),
            ("fastmcp_deny", "FastMCP proxy + deny-by-name middleware", ["--deny", "crash"]),
        ):
            port = free_port()
            argv = [PY, "-m", "benchmarks.gateways.fastmcp_proxy", "--port", str(port), *extra]
            started.append(
                Server(
                    name, label, _spawn([*argv, "--", *UPSTREAM]), f"http://127.0.0.1:{port}/mcp"
                )
            )
        exe, why = ensure_mcp_proxy()
        notes.append(why)
        if exe is not None:
            port = free_port()
            argv = [str(exe), "--port", str(port), "--host", "127.0.0.1", "--", *UPSTREAM]
            started.append(
                Server(
                    "mcp_proxy",
                    f"mcp-proxy {MCP_PROXY_VERSION}",
                    _spawn(argv),
                    f"http://127.0.0.1:{port}/mcp",
                )
            )
        for name, label, evidence in (
            ("sharedos", "SharedOS (broker + kernel + evidence on)", str(tmp / "gateway.sqlite")),
            ("sharedos_noev", "SharedOS, a store that keeps nothing", "off"),
        ):
            argv = [PY, "-m", "benchmarks.gateways.sharedos_gateway", "--evidence", evidence]
            proc = _spawn([*argv, "--", *UPSTREAM], announces=True)
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("the SharedOS gateway did not start")
            hello = json.loads(line)
            started.append(
                Server(name, label, proc, hello["url"], tool=hello["tool"], token=hello["token"])
            )
        yield started, notes
    finally:
        for s in started:
            if s.proc is None:
                continue
            with contextlib.suppress(Exception):
                if s.proc.stdin is not None:
                    s.proc.stdin.close()
            with contextlib.suppress(Exception):
                s.proc.terminate()
                s.proc.wait(timeout=10)
            with contextlib.suppress(Exception):
                s.proc.kill()


@contextlib.asynccontextmanager
async def connect(server: Server, mode: str) -> AsyncIterator[Client]:
    """An SDK client session with ``server``, retried while the server starts."""
    if server.url is None:  # the upstream over stdio, spawned by the client
        before = {p.pid for p in psutil.Process().children()}
        params = StdioServerParameters(command=UPSTREAM[0], args=UPSTREAM[1:])
        async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
            await client.list_tools()
            spawned = [p for p in psutil.Process().children() if p.pid not in before]
            server.pid = spawned[0].pid if spawned else None
            yield client
        return
    deadline = time.monotonic() + 60
    while True:
        try:
            async with (
                httpx2.AsyncClient(headers=server.headers(), timeout=30) as http,
                Client(streamable_http_client(server.url, http_client=http), mode=mode) as client,  # type: ignore[arg-type]
            ):
                await client.list_tools()
                yield client
                return
        except Exception:
            if time.monotonic() > deadline or (server.proc and server.proc.poll() is not None):
                raise
            await anyio.sleep(0.3)


def pct(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) of xs, nearest rank."""
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(all_servers: list[Server], mode: str, calls: int, rounds: int) -> None:
    """Interleaved rounds of ``calls`` tools/call per server, order rotating each round."""
    per = max(1, calls // rounds)
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for s in all_servers:
            clients[s.name] = await stack.enter_async_context(connect(s, mode))
            s.version[mode] = str(clients[s.name].protocol_version)
            s.samples[mode] = []
            s.cpu[mode] = 0.0
            for _ in range(50):  # warm-up
                r = await clients[s.name].call_tool(s.tool, ARGS)
                assert not r.is_error, (s.name, r)
        for i in range(rounds):
            k = i % len(all_servers)
            for s in all_servers[k:] + all_servers[:k]:
                client = clients[s.name]
                c0 = s.cpu_seconds()
                try:
                    for _ in range(per):
                        t0 = time.perf_counter()
                        r = await client.call_tool(s.tool, ARGS)
                        s.samples[mode].append(time.perf_counter() - t0)
                        if r.is_error:
                            raise RuntimeError(f"{s.name}: {r.content}")
                except BaseException:
                    # a stuck server surfaces as a client timeout in a task group
                    # that names no server: say whose call was in flight
                    print(
                        f"  the run failed during a call to {s.label} ({mode}, round {i + 1})",
                        file=sys.stderr,
                        flush=True,
                    )
                    raise
                s.cpu[mode] += s.cpu_seconds() - c0


def report(all_servers: list[Server], mode: str) -> dict[str, Any]:
    """Print the table of one era and return its figures."""
    direct = next(s for s in all_servers if s.name == "direct")
    d50 = statistics.median(direct.samples[mode])
    out: dict[str, Any] = {"servers": {}}
    print(f"\ntools/call, client mode {mode!r}, {len(direct.samples[mode])} calls per server:")
    print(
        f"  {'server':<44} {'era':<11} {'p50 ms':>8} {'p99 ms':>8} {'added p50':>10} {'server CPU/call':>16}"
    )
    for s in all_servers:
        xs = s.samples[mode]
        p50, p99 = statistics.median(xs), pct(xs, 0.99)
        cpu = s.cpu[mode] / len(xs)
        added = p50 - d50
        out["servers"][s.name] = {
            "label": s.label,
            "version": s.version[mode],
            "p50_ms": p50 * 1000,
            "p99_ms": p99 * 1000,
            "added_p50_ms": added * 1000,
            "cpu_ms_per_call": cpu * 1000,
        }
        shown = "" if s is direct else f"{added * 1000:+9.3f}"
        print(
            f"  {s.label:<44} {s.version[mode]:<11} {p50 * 1000:8.3f} {p99 * 1000:8.3f} "
            f"{shown:>10} {cpu * 1000:13.3f} ms"
        )
    sos, peer = out["servers"].get("sharedos"), out["servers"].get("mcp_proxy")
    if sos and peer and peer["added_p50_ms"] > 0:
        ratio = sos["added_p50_ms"] / peer["added_p50_ms"]
        out["ratio_added_vs_mcp_proxy"] = ratio
        print(
            f"  SharedOS added {sos['added_p50_ms']:.3f} ms vs mcp-proxy added "
            f"{peer['added_p50_ms']:.3f} ms over direct: {ratio:.2f}x (target <= 1.2x)"
        )
        noev = out["servers"].get("sharedos_noev")
        if noev:
            out["ratio_added_noev_vs_mcp_proxy"] = noev["added_p50_ms"] / peer["added_p50_ms"]
            print(
                f"  with a store that keeps nothing: added {noev['added_p50_ms']:.3f} ms, "
                f"{out['ratio_added_noev_vs_mcp_proxy']:.2f}x; the evidence's share of SharedOS's "
                f"CPU per call: {sos['cpu_ms_per_call'] - noev['cpu_ms_per_call']:.3f} ms"
            )
    fm = out["servers"].get("fastmcp")
    if sos and fm:
        out["ratio_fastmcp_vs_sharedos_p50"] = fm["p50_ms"] / sos["p50_ms"]
    return out


async def run(calls: int, quick: bool) -> dict[str, Any]:
    """Every server, both passes; the figures."""
    result: dict[str, Any] = {"calls": calls, "eras": {}}
    with tempfile.TemporaryDirectory() as d, servers(Path(d), quick) as (started, notes):
        result["notes"] = notes
        for note in notes:
            print(f"  {note}")
        for mode in ("legacy", "auto"):
            await measure(started, mode, calls, rounds=10 if quick else 40)
            result["eras"][mode] = report(started, mode)
    return result


def main() -> None:
    """Run and print; ``--json`` writes the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per server per pass")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    quick = args.quick or os.environ.get("BENCH_QUICK") == "1"
    calls = min(args.calls, 400) if quick else args.calls
    load = os.getloadavg()[0]
    print(f"# bench_gateways: {os.cpu_count()} cores, load average {load:.2f} at start")
    result = anyio.run(run, calls, quick)
    result["load_end"] = os.getloadavg()[0]
    print(f"load average {result['load_end']:.2f} at the end")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
