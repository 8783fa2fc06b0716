"""``make bench``: every benchmark, one report, one JSON file.

Runs, in order: the peer matrix (``benchmarks.peers``: SharedOS vs the
indexed reference, Cedar, Casbin, Rego; fails on any disagreement), the
SharedOS start-up probes (``benchmarks.sharedos_probes``), the kernel
benchmark, the bridge benchmark, the brokered-upstream benchmark with its
catalogue-scale sweeps, and SharedOS beside the other gateways; samples the load average every 2 s
throughout; prints the machine (CPU model, cores), the load average during the
run, the tables and the issue-14 targets met or missed; and writes everything
as JSON to ``reports/bench/bench-<UTC time>.json`` (and ``latest.json``).
The issue-27 targets (catalogue scale, gateways) are graded in the same run.

Quick mode (``--quick`` or ``BENCH_QUICK=1``): N = 10, 100, 1,000, one
repetition, short budgets — a few minutes. The full run (N up to 10,000,
3 repetitions, Rego and Casbin once at N >= 1,000) takes about 35-45 minutes
on the 2-core dev machine, most of it Rego and Casbin at 10,000 rules.

Figures from a shared machine are noisy: read them with the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

REPORT_DIR = REPO_ROOT / "reports" / "bench"


def machine() -> dict[str, Any]:
    """CPU model, cores, memory, Python, OS and the commit measured."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gb = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gb = int(line.split()[1]) / 2**20
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
    ).stdout.strip()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "python": platform.python_version(),
        "os": platform.platform(),
        "commit": commit or None,
    }


class LoadSampler:
    """Samples the 1-minute load average every ``every`` seconds in a daemon thread."""

    def __init__(self, every: float = 2.0) -> None:
        self.every = every
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(self.every)

    @contextlib.contextmanager
    def running(self) -> Iterator[LoadSampler]:
        """Sample while the block runs."""
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()

    def summary(self) -> dict[str, float]:
        """min / mean / max of the 1-minute load average over the run."""
        s = self.samples or [os.getloadavg()[0]]
        return {"min": min(s), "mean": statistics.fmean(s), "max": max(s), "samples": len(s)}


def _script(name: str, quick: bool, json_path: Path) -> tuple[str, dict[str, Any] | None]:
    env = dict(os.environ, BENCH_QUICK="1" if quick else "0")
    cmd = [sys.executable, str(REPO_ROOT / "benchmarks" / name)]
    if name in ("bench_bridge.py", "bench_upstream.py", "bench_gateways.py"):
        cmd += ["--json", str(json_path)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=3600)
    text = proc.stdout + (
        f"\n[exit {proc.returncode}]\n{proc.stderr[-3000:]}" if proc.returncode else ""
    )
    data = json.loads(json_path.read_text()) if json_path.exists() else None
    return text, data


def _row(rows: list[dict[str, Any]], workload: str, n: int, engine: str) -> dict[str, Any] | None:
    for r in rows:
        if r["workload"] == workload and r["rules"] == n and r["engine"] == engine:
            return r
    return None


def targets(
    rows: list[dict[str, Any]],
    probes: dict[str, Any],
    bridge: dict[str, Any] | None,
    upstream: dict[str, Any] | None = None,
    gateways: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Issues 14's and 27's targets, each with the measured figure and met / missed."""
    out: list[dict[str, Any]] = []

    def add(
        what: str, measured: float | None, target: float, unit: str, le: bool = True, note: str = ""
    ) -> None:
        met = None if measured is None else (measured <= target if le else measured >= target)
        out.append(
            {
                "what": what,
                "measured": measured,
                "target": target,
                "unit": unit,
                "le": le,
                "met": met,
                "note": note,
            }
        )

    # every workload: acl and interp (the shapes tuned on) and random (issue 27's third)
    workloads = sorted({r["workload"] for r in rows})
    sizes = sorted({r["rules"] for r in rows if r["workload"] == "acl"})
    for wl in workloads:
        for n in sizes:
            s, ref = _row(rows, wl, n, "sharedos"), _row(rows, wl, n, "reference")
            if s and ref:
                add(
                    f"decide p50 / reference p50, {wl}, N={n}",
                    s["p50_us"] / ref["p50_us"],
                    1.1,
                    "x",
                    note=f"{s['p50_us']:.2f} vs {ref['p50_us']:.2f} us",
                )
    big = max(sizes) if sizes else None
    if big:
        for wl in workloads:
            s, ref = _row(rows, wl, big, "sharedos"), _row(rows, wl, big, "reference")
            if s:
                add(
                    f"first-pass p99 after load, {wl}, N={big}",
                    s["first_p99_us"],
                    20,
                    "us",
                    note=f"reference {ref['first_p99_us']:.1f} us" if ref else "",
                )
        s = _row(rows, "acl", big, "sharedos")
        if s:
            add(f"resident memory compiled + prepared, N={big}", s["rss_mb"], 40, "MB")
    ann = probes.get("annotations", {})
    if ann.get("id", {}).get("ok"):
        add(
            f"compile {ann['rules']} rules with @id on every rule",
            ann["id"]["compile_ms"],
            500,
            "ms",
        )
    if ann.get("id+description", {}).get("ok"):
        add(
            f"compile {ann['rules']} rules with @id + @description",
            ann["id+description"]["compile_ms"],
            500,
            "ms",
        )
    cold = probes.get("cold", {}).get("source")
    if cold:
        add(
            "cold load of a 10-rule policy (first compile_source in a fresh process)",
            cold["compile_ms"],
            5,
            "ms",
            note=f"+ import sharedos.policy {cold['import_ms']:.0f} ms",
        )
    cold_bundle = probes.get("cold", {}).get("bundle")
    if cold_bundle:
        floor = probes["cold"].get("stdlib_floor_ms")
        add(
            "cold load of a 10-rule bundle (import + load_bundle + first decision)",
            cold_bundle["total_ms"],
            5,
            "ms",
            note=f"import json, hashlib alone: {floor:.1f} ms" if floor is not None else "",
        )
    bundles = probes.get("bundle", {})
    if bundles:
        nb = max(bundles, key=int)
        add(
            f"first decision after a bundle load, N={nb}", bundles[nb]["first_decision_ms"], 1, "ms"
        )
        add(
            f"first-pass p99 after a bundle load (no prepare), N={nb}",
            bundles[nb]["first_pass_p99_us"],
            20,
            "us",
        )
    for wl, n, want in (("acl", 10, 15), ("interp", 10, 15), ("acl", 10000, 5000)):
        s = _row(rows, wl, n, "sharedos")
        for peer in ("cedar", "casbin", "rego"):
            p = _row(rows, wl, n, peer)
            if s and p:
                add(
                    f"{peer} p50 / SharedOS p50, {wl}, N={n}",
                    p["p50_us"] / s["p50_us"],
                    want,
                    "x",
                    le=False,
                )
    if bridge:
        for era, res in bridge.get("tools_call", {}).items():
            add(
                f"bridge tools/call p50 / tuned bare server, {era}",
                res["ratio_p50_vs_bare_lookup"],
                1.10,
                "x",
                note=f"{res['bridge']['p50_ms']:.3f} vs {res['bare2']['p50_ms']:.3f} ms",
            )
        oc = bridge.get("open_close")
        if oc:
            add("turn open + close p50", oc["p50_ms"], 2, "ms")
    sizes_ = (upstream or {}).get("tools", {}).get("sizes", {})
    small, big = sizes_.get("10") or sizes_.get(10), sizes_.get("10000") or sizes_.get(10000)
    if small and big:
        add(
            "brokered call CPU, 10,000 vs 10 tools from one upstream (client + bridge + kernel)",
            big["bridged_cpu_ms"] / small["bridged_cpu_ms"],
            1.1,
            "x",
            note=f"{big['bridged_cpu_ms']:.3f} vs {small['bridged_cpu_ms']:.3f} ms",
        )
    for n, want in (("1000", 50), ("10000", 250)):
        s_ = sizes_.get(n) or sizes_.get(int(n))
        if s_:
            add(
                f"turn open, one upstream of {int(n):,} tools (listing reused + catalogue + bridge)",
                s_["cached"]["open_ms"],
                want,
                "ms",
                note=f"with a fresh tools/list {s_['fresh']['open_ms']:.0f} ms; "
                f"catalogue + bridge {s_['fresh']['bridge_ms']:.1f} ms",
            )
    if big:
        lg = big.get("legacy", {})
        add(
            "2025-11-25 SDK client against a 10,000-tool turn (lists every page, calls)",
            1.0 if lg.get("works") else 0.0,
            1.0,
            "works",
            le=False,
            note=f"{lg.get('pages')} pages" if lg.get("works") else str(lg.get("error", "")),
        )
    legacy = (gateways or {}).get("eras", {}).get("legacy", {})
    if "ratio_added_vs_mcp_proxy" in legacy:
        sv = legacy["servers"]
        add(
            "SharedOS added latency / mcp-proxy's, over the direct upstream (evidence on)",
            legacy["ratio_added_vs_mcp_proxy"],
            1.2,
            "x",
            note=f"{sv['sharedos']['added_p50_ms']:.3f} vs {sv['mcp_proxy']['added_p50_ms']:.3f} ms",
        )
    return out


def targets_table(items: list[dict[str, Any]]) -> str:
    """The targets as text."""
    lines = [f"{'target (issues 14 and 27)':<72} {'measured':>12} {'target':>10}  verdict"]
    for t in items:
        m = "-" if t["measured"] is None else f"{t['measured']:.3g} {t['unit']}"
        tgt = f"{'<=' if t['le'] else '>='} {t['target']:g} {t['unit']}"
        verdict = "n/a" if t["met"] is None else ("MET" if t["met"] else "MISSED")
        note = f"  ({t['note']})" if t["note"] else ""
        lines.append(f"{t['what']:<72} {m:>12} {tgt:>10}  {verdict}{note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run everything, print one report, write the JSON; exit 1 on any disagreement."""
    from benchmarks import peers, sharedos_probes
    from benchmarks.engines.base import ALL_ENGINES, available

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--skip", default="", help="comma list of: peers,probes,kernel,bridge,upstream,gateways"
    )
    opts = ap.parse_args(argv)
    quick = opts.quick or os.environ.get("BENCH_QUICK") == "1"
    skip = set(filter(None, opts.skip.split(",")))
    missing = [e for e in ALL_ENGINES if e not in available()]
    if missing and "peers" not in skip:
        print(
            f"error: engines not importable: {', '.join(missing)}; run `make bench` (installs '.[bench]')",
            file=sys.stderr,
        )
        return 2
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    info = machine()
    started = time.time()
    sampler = LoadSampler()
    report: dict[str, Any] = {"machine": info, "started_utc": stamp, "quick": quick}
    sizes = list(peers.SIZES[:3] if quick else peers.SIZES)
    print(
        f"# SharedOS benchmarks ({'quick' if quick else 'full'}), {info['cpu']}, {info['cores']} cores, "
        f"Python {info['python']}, commit {info['commit']}; load average at start {os.getloadavg()[0]:.2f}"
    )
    problems: list[str] = []
    with sampler.running():
        rows: list[dict[str, Any]] = []
        if "peers" not in skip:
            print("## peers (each engine x N in a fresh process)")
            random_seed = peers.fresh_seed()
            print(f"random workload seed: {random_seed}")
            not_run: list[dict[str, Any]] = []
            runs = peers.run_matrix(
                list(ALL_ENGINES),
                ["acl", "interp", "random"],
                sizes,
                reps=1 if quick else 3,
                slow_reps=1,
                seed=14,
                budget_s=0.5 if quick else 2.0,
                slow_ms=5.0,
                cap_s=20.0 if quick else 180.0,
                not_run=not_run,
                random_seed=random_seed,
            )
            rows = peers.summarize(runs)
            for line in peers.not_run_lines(not_run):
                print(line)
            problems = peers.disagreements(runs, 14)
            report["peers"] = {
                "rows": rows,
                "runs": runs,
                "disagreements": problems,
                "random_seed": random_seed,
            }
        probes: dict[str, Any] = {}
        if "probes" not in skip:
            print("## SharedOS start-up probes (fresh processes)")
            probes = sharedos_probes.run(quick, sizes)
            report["probes"] = probes
        kernel_text = ""
        if "kernel" not in skip:
            print("## kernel")
            kernel_text, _ = _script("bench_kernel.py", quick, REPORT_DIR / f".kernel-{stamp}.json")
            report["kernel_text"] = kernel_text
        bridge: dict[str, Any] | None = None
        bridge_text = ""
        if "bridge" not in skip:
            print("## bridge")
            bpath = REPORT_DIR / f".bridge-{stamp}.json"
            bridge_text, bridge = _script("bench_bridge.py", quick, bpath)
            with contextlib.suppress(OSError):
                bpath.unlink()
            report["bridge"] = bridge
            report["bridge_text"] = bridge_text
        upstream: dict[str, Any] | None = None
        upstream_text = ""
        if "upstream" not in skip:
            print("## upstream (brokered calls, catalogue scale)")
            upath = REPORT_DIR / f".upstream-{stamp}.json"
            upstream_text, upstream = _script("bench_upstream.py", quick, upath)
            with contextlib.suppress(OSError):
                upath.unlink()
            report["upstream"] = upstream
            report["upstream_text"] = upstream_text
        gateways: dict[str, Any] | None = None
        gateways_text = ""
        if "gateways" not in skip:
            print("## gateways (direct, FastMCP proxy, mcp-proxy, SharedOS)")
            gpath = REPORT_DIR / f".gateways-{stamp}.json"
            gateways_text, gateways = _script("bench_gateways.py", quick, gpath)
            with contextlib.suppress(OSError):
                gpath.unlink()
            report["gateways"] = gateways
            report["gateways_text"] = gateways_text
    load = sampler.summary()
    elapsed = time.time() - started
    report["load_average"] = load
    report["elapsed_s"] = elapsed
    tg = targets(rows, probes, bridge, upstream, gateways)
    report["targets"] = tg

    print()
    print("=" * 100)
    print(
        f"SharedOS benchmark report {stamp} ({'quick' if quick else 'full'} run, {elapsed / 60:.1f} min)\n"
        f"machine: {info['cpu']}, {info['cores']} cores, {info['memory_gb'] or 0:.0f} GB, "
        f"Python {info['python']}, commit {info['commit']}\n"
        f"load average (1 min) during the run: min {load['min']:.2f}, mean {load['mean']:.2f}, "
        f"max {load['max']:.2f} on {info['cores']} cores (shared machine: figures are noisy)"
    )
    if rows:
        features = next((r["features"] for r in rows if r["workload"] == "interp"), {})
        print(
            "\npeers — decide from a fresh load; paths canonical (raw-prefix engines disagree with SharedOS "
            "on non-canonical paths, and SharedOS is right); half allow / half deny;\n"
            f"interp workload ordering operators: {'on' if features.get('ordering') else 'off (not in the language on this branch)'}; "
            "p50/SOS = engine p50 / SharedOS p50; RSS = compile + prepare + warm\n"
        )
        print(peers.table(rows))
        if problems:
            print("\n".join(problems))
        else:
            print("agreement: every engine gave the same decision on every request it decided")
    if probes:
        cold = probes["cold"]
        print(
            f"\ncold 10-rule policy, fresh process: import sharedos.policy {cold['source']['import_ms']:.1f} ms, "
            f"first compile_source {cold['source']['compile_ms']:.1f} ms; from a bundle: load "
            f"{cold['bundle']['load_ms']:.2f} ms + first decision {cold['bundle']['first_decision_ms']:.3f} ms "
            f"(python -c pass: {cold['python_startup_ms']:.0f} ms)"
        )
        print(
            f"{'bundle N':>9} {'KB':>8} {'load ms':>8} {'1st decision ms':>15} {'1st-pass p50 us':>15} {'1st-pass p99 us':>15} {'prepare ms':>10}"
        )
        for n, b in probes["bundle"].items():
            print(
                f"{n:>9} {b['bundle_kb']:>8.0f} {b['load_ms']:>8.2f} {b['first_decision_ms']:>15.3f} "
                f"{b['first_pass_p50_us']:>15.2f} {b['first_pass_p99_us']:>15.1f} {b['prepare_ms'] or 0:>10.0f}"
            )
        ann = probes["annotations"]
        for label in ("plain", "id", "id+description"):
            a = ann.get(label, {})
            shown = (
                f"{a['compile_ms']:.0f} ms (cpu {a['compile_cpu_ms']:.0f} ms)"
                if a.get("ok")
                else f"not run: {a.get('error', '?')}"
            )
            print(f"compile {ann['rules']} rules, annotations {label:<15} {shown}")
    if kernel_text:
        print("\nkernel\n" + kernel_text.rstrip())
    if bridge_text:
        print("\nbridge\n" + bridge_text.rstrip())
    if upstream_text:
        print("\nupstream\n" + upstream_text.rstrip())
    if gateways_text:
        print("\ngateways\n" + gateways_text.rstrip())
    print()
    print(targets_table(tg))
    out = REPORT_DIR / f"bench-{stamp}.json"
    out.write_text(json.dumps(report, indent=1))
    (REPORT_DIR / "latest.json").write_text(json.dumps(report, indent=1))
    print(f"\nJSON: {out.relative_to(REPO_ROOT)}")
    if problems:
        print(f"FAILED: {len(problems)} disagreement(s) between engines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
