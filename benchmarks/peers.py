"""Peer benchmark: SharedOS vs Cedar, Casbin, Rego and an indexed pure-Python reference.

For each workload (``benchmarks/workload.py``), each size N and each engine,
a fresh subprocess generates the seeded workload, translates it into the
engine's native policy, and measures:

- ``load_ms``: parse + compile of the native policy text (for SharedOS
  ``compile_source``, after its parser was built once in the process: that
  once-per-process cost is ``benchmarks.sharedos_probes``'s cold load; the
  reference builds its index from the abstract rules);
- ``first_p50_us`` / ``first_p99_us``: each request decided once, straight
  after the load, before anything is warm (no ``prepare()``);
- ``prepare_ms``: SharedOS's ``PolicySet.prepare()`` (others have none);
- ``p50_us`` / ``p99_us``: steady state, after one warm-up pass, over as many
  passes as fit in the time budget;
- ``decisions_per_s``: one untimed-per-call pass, requests / elapsed;
- ``rss_mb``: resident memory after load + first pass + prepare + one warm
  pass, minus before the load (the native request objects are subtracted;
  the timing arrays are allocated after the measurement);
- every answer, so the parent can check that **every engine gives the same
  decision on every request**. Any disagreement is printed (the request and
  each engine's answer) and the run fails.

Repetitions rotate the engine order, so machine noise does not always land
on the same engine. Engines slower than ``--slow-ms`` per decision get
``--slow-reps`` repetitions at N >= 1,000 (their ratio to SharedOS is in the
thousands; more repetitions would add minutes and no information).

Usage::

    python -m benchmarks.peers [--quick] [--sizes 10,100,1000,10000]
        [--engines sharedos,reference,cedar,casbin,rego] [--workloads acl,interp,random]
        [--reps 3] [--random-seed S] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # `python benchmarks/peers.py` as well as `-m`
    sys.path.insert(0, str(REPO_ROOT))

SIZES = (10, 100, 1000, 10000)


def requests_for(n_rules: int) -> int:
    """How many requests a size gets (every engine decides every one, within ``cap_s``).

    1,000 at every size: the first-pass p99 must not hinge on how few
    requests there are (with 400, four first contacts are already 1%).
    """
    return 1000


# ------------------------------------------------------------------ helpers


def rss_bytes() -> int:
    """Resident set size of this process, in bytes (Linux /proc; psutil elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux
        import psutil

        return int(psutil.Process().memory_info().rss)


def pct(sorted_ns: Sequence[int], q: float) -> float:
    """The q-quantile of sorted nanosecond samples, in microseconds (nearest rank)."""
    if not sorted_ns:
        return float("nan")
    idx = min(len(sorted_ns) - 1, max(0, math.ceil(q * len(sorted_ns)) - 1))
    return sorted_ns[idx] / 1000.0


# ------------------------------------------------------------------- worker


def worker(
    engine_name: str,
    workload: str,
    n_rules: int,
    n_requests: int,
    seed: int,
    budget_s: float,
    cap_s: float,
) -> dict[str, Any]:
    """Measure one (engine, workload, N) in this (fresh) process."""
    from benchmarks.engines.base import available
    from benchmarks.workload import build

    factories = available()
    if engine_name not in factories:
        raise SystemExit(f"engine {engine_name!r} is not importable here (pip install '.[bench]')")
    from benchmarks.engines.base import Unsupported

    wl = build(workload, n_rules, n_requests, seed)
    engine = factories[engine_name]()
    warm_up = getattr(engine, "warm_up", None)
    if warm_up is not None:  # once-per-process costs are the cold probe's, not load_ms
        warm_up()
    try:
        files = engine.native(wl)
    except Unsupported as exc:
        return {
            "engine": engine_name,
            "version": engine.version,
            "workload": workload,
            "rules": wl.n_rules,
            "unsupported": str(exc),
        }
    perf = time.perf_counter_ns
    gc.collect()
    rss0 = rss_bytes()
    c0 = time.process_time()
    t0 = perf()
    engine.load(files, wl)
    load_ns = perf() - t0
    load_cpu = time.process_time() - c0
    gc.collect()
    rss1 = rss_bytes()
    native = [engine.translate(r) for r in wl.requests]
    gc.collect()
    rss_requests = rss_bytes() - rss1
    call = engine.call
    allowed = engine.allowed

    # First pass: straight after the load, nothing warm. An engine so slow that
    # the pass would exceed ``cap_s`` decides a prefix of the (shuffled, so
    # still balanced) requests instead, at least 30; the report says how many.
    first: list[int] = []
    answers = []
    spent = 0
    for args, kwargs in native:
        t = perf()
        out = call(*args, **kwargs)
        dt = perf() - t
        first.append(dt)
        spent += dt
        answers.append(allowed(out))
        if spent > cap_s * 1e9 and len(answers) >= 30:
            break
    decided = native[: len(answers)]
    first_total_s = spent / 1e9

    t0 = perf()
    prepared = engine.prepare()
    prepare_ns = perf() - t0 if prepared else None

    steady: list[int] = []
    slow = first_total_s > budget_s
    if not slow:
        # one warm-up pass, then as many timed passes as fit in the budget
        for args, kwargs in decided:
            call(*args, **kwargs)
        gc.collect()
        rss2 = rss_bytes()  # compiled + prepared + warm, before the timing arrays grow
        deadline = time.perf_counter() + budget_s
        passes = 0
        while passes < 200 and time.perf_counter() < deadline:
            for args, kwargs in decided:
                t = perf()
                call(*args, **kwargs)
                steady.append(perf() - t)
            passes += 1
        # throughput: calls back to back, no per-call timer
        t0 = perf()
        for args, kwargs in decided:
            call(*args, **kwargs)
        rate = len(decided) / ((perf() - t0) / 1e9)
    else:
        # nothing warms up in such an engine: time a second pass within the budget
        gc.collect()
        rss2 = rss_bytes()
        deadline = time.perf_counter() + budget_s
        for args, kwargs in decided:
            t = perf()
            call(*args, **kwargs)
            steady.append(perf() - t)
            if time.perf_counter() > deadline and len(steady) >= 5:
                break
        rate = 1e9 / statistics.fmean(steady)
    # Re-check the answers after warm-up: an engine whose answers change with its
    # caches is as wrong as one that disagrees with the others.
    again = [allowed(call(*a, **k)) for a, k in (decided if not slow else decided[:5])]
    unstable = [i for i, (x, y) in enumerate(zip(answers, again, strict=False)) if x != y]

    def noop(*a: Any, **k: Any) -> None:
        return None

    overhead = []
    for args, kwargs in native[:200]:
        t = perf()
        noop(*args, **kwargs)
        overhead.append(perf() - t)
    overhead.sort()
    first.sort()
    steady.sort()
    return {
        "engine": engine_name,
        "version": engine.version,
        "workload": workload,
        "seed": seed,
        "rules": wl.n_rules,
        "requests": len(wl.requests),
        "decided": len(answers),
        "features": wl.features,
        "load_ms": load_ns / 1e6,
        "load_cpu_ms": load_cpu * 1000,
        "prepare_ms": prepare_ns / 1e6 if prepare_ns is not None else None,
        "first_p50_us": pct(first, 0.50),
        "first_p99_us": pct(first, 0.99),
        "first_max_us": first[-1] / 1000.0,
        "p50_us": pct(steady, 0.50),
        "p99_us": pct(steady, 0.99),
        "mean_us": statistics.fmean(steady) / 1000.0,
        "samples": len(steady),
        "decisions_per_s": rate,
        "rss_mb": (rss2 - rss0 - rss_requests) / 2**20,
        "rss_after_load_mb": (rss1 - rss0) / 2**20,
        "timer_overhead_us": pct(overhead, 0.50),
        "answers": "".join("1" if a else "0" for a in answers),
        "unstable": unstable,
        "slow": slow,
    }


# ------------------------------------------------------------------- parent


def run_worker(
    engine: str, workload: str, n: int, seed: int, budget_s: float, cap_s: float, timeout_s: float
) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter and return its figures."""
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.peers",
        "--worker",
        engine,
        workload,
        str(n),
        str(requests_for(n)),
        str(seed),
        str(budget_s),
        str(cap_s),
    ]
    env = dict(os.environ, PYTHONHASHSEED="0")
    proc = subprocess.run(
        cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s, env=env
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"worker {engine}/{workload}/{n} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def run_matrix(
    engines: Sequence[str],
    workloads: Sequence[str],
    sizes: Sequence[int],
    reps: int,
    slow_reps: int,
    seed: int,
    budget_s: float,
    slow_ms: float,
    cap_s: float = 180.0,
    log: Any = print,
    not_run: list[dict[str, Any]] | None = None,
    random_seed: int | None = None,
) -> list[dict[str, Any]]:
    """Every (workload, N, engine) ``reps`` times, rotating the engine order per repetition.

    An engine whose language cannot express a workload is not run on it: the
    runs that said so are appended to ``not_run`` (when given) and logged.
    The ``random`` workload is drawn from ``random_seed`` when given (else ``seed``)."""
    runs: list[dict[str, Any]] = []
    unsupported: list[dict[str, Any]] = []
    if not_run is not None:
        unsupported = not_run
    slow_engines: set[tuple[str, str]] = set()
    for workload in workloads:
        wseed = random_seed if workload == "random" and random_seed is not None else seed
        for n in sizes:
            for rep in range(reps):
                k = (rep + sizes.index(n)) % len(engines)
                order = list(engines[k:]) + list(engines[:k])
                for engine in order:
                    if rep >= slow_reps and n >= 1000 and (engine, workload) in slow_engines:
                        continue
                    t0 = time.perf_counter()
                    res = run_worker(engine, workload, n, wseed, budget_s, cap_s, timeout_s=3600)
                    res["rep"] = rep
                    if "unsupported" in res:
                        unsupported.append(res)
                        log(
                            f"  {workload:<6} N={n:<6} rep {rep + 1}/{reps} {engine:<9} "
                            f"cannot express this workload: {res['unsupported']}"
                        )
                        continue
                    runs.append(res)
                    if res["first_p50_us"] > slow_ms * 1000:
                        slow_engines.add((engine, workload))
                    log(
                        f"  {workload:<6} N={n:<6} rep {rep + 1}/{reps} {engine:<9} "
                        f"load {res['load_ms']:9.1f} ms  p50 {res['p50_us']:10.2f} us  "
                        f"first p99 {res['first_p99_us']:10.2f} us  ({time.perf_counter() - t0:5.1f} s)"
                    )
    return runs


def disagreements(runs: Sequence[dict[str, Any]], seed: int) -> list[str]:
    """Every request on which two engines (or two repetitions) answered differently, as text."""
    from benchmarks.workload import build

    problems: list[str] = []
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["workload"], r["rules"]), []).append(r)
        if r["unstable"]:
            problems.append(
                f"{r['engine']} {r['workload']} N={r['rules']}: answers changed after warm-up "
                f"on requests {r['unstable'][:10]}"
            )
    for (workload, n), group in sorted(groups.items()):
        answers = {(r["engine"], r["rep"]): r["answers"] for r in group}
        if len(set(answers.values())) <= 1:
            continue
        wl = build(
            workload, n, group[0].get("requests", requests_for(n)), group[0].get("seed", seed)
        )
        length = min(len(a) for a in answers.values())
        for i in range(length):
            seen = {key: a[i] for key, a in answers.items()}
            if len(set(seen.values())) > 1:
                req = wl.requests[i]
                per_engine = ", ".join(
                    f"{e}#{rep + 1}={'allow' if v == '1' else 'deny'}"
                    for (e, rep), v in sorted(seen.items())
                )
                problems.append(
                    f"DISAGREEMENT {workload} N={n} request {i} ({req.shape}): "
                    f"tool={req.tool} args={json.dumps(req.args)} "
                    f"principal={req.context['principal']} tenant={req.context['tenant']} "
                    f"roles={req.context['roles']}: {per_engine}"
                )
    return problems


def _median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def summarize(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (workload, N, engine): medians over repetitions, ratio to SharedOS."""
    keys = (
        "load_ms",
        "prepare_ms",
        "first_p50_us",
        "first_p99_us",
        "p50_us",
        "p99_us",
        "mean_us",
        "decisions_per_s",
        "rss_mb",
        "timer_overhead_us",
    )
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["workload"], r["rules"], r["engine"]), []).append(r)
    rows = []
    for (workload, n, engine), group in groups.items():
        row: dict[str, Any] = {
            "workload": workload,
            "rules": n,
            "engine": engine,
            "version": group[0]["version"],
            "reps": len(group),
            "requests": group[0]["requests"],
            "decided": min(g["decided"] for g in group),
            "features": group[0]["features"],
        }
        for k in keys:
            row[k] = _median([g[k] for g in group])
        rows.append(row)
    by = {(r["workload"], r["rules"], r["engine"]): r for r in rows}
    for row in rows:
        base = by.get((row["workload"], row["rules"], "sharedos"))
        row["p50_vs_sharedos"] = row["p50_us"] / base["p50_us"] if base and base["p50_us"] else None
    order = {e: i for i, e in enumerate(("sharedos", "reference", "cedar", "casbin", "rego"))}
    rows.sort(key=lambda r: (r["workload"], r["rules"], order.get(r["engine"], 99)))
    return rows


def fresh_seed() -> int:
    """A seed for the random workload that differs from run to run (printed, so a run repeats)."""
    return int.from_bytes(os.urandom(4), "big") % 1_000_000


def not_run_lines(not_run: Sequence[dict[str, Any]]) -> list[str]:
    """One line per (engine, workload) an engine's language could not express."""
    seen: dict[tuple[str, str], str] = {}
    for r in not_run:
        seen.setdefault((r["engine"], r["workload"]), r["unsupported"])
    return [
        f"not run: {engine} on {workload}: cannot express it ({why})"
        for (engine, workload), why in sorted(seen.items())
    ]


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The peer table as text."""
    head = (
        f"{'workload':<8} {'rules':>6} {'engine':<10} {'load ms':>9} {'prep ms':>8} "
        f"{'p50 us':>9} {'p99 us':>9} {'1st p99 us':>10} {'decisions/s':>11} "
        f"{'RSS MB':>7} {'p50/SOS':>8} {'reps':>4} {'decided':>9}"
    )
    out = [head, "-" * len(head)]
    last = None
    for r in rows:
        if last is not None and (r["workload"], r["rules"]) != last:
            out.append("")
        last = (r["workload"], r["rules"])
        out.append(
            f"{r['workload']:<8} {r['rules']:>6} {r['engine']:<10} {_fmt(r['load_ms'], '9.1f')} "
            f"{_fmt(r['prepare_ms'], '8.1f')} {_fmt(r['p50_us'], '9.2f')} {_fmt(r['p99_us'], '9.2f')} "
            f"{_fmt(r['first_p99_us'], '10.1f')} {_fmt(r['decisions_per_s'], '11,.0f')} "
            f"{_fmt(r['rss_mb'], '7.1f')} {_fmt(r['p50_vs_sharedos'], '8.2f')} {r['reps']:>4} "
            f"{str(r['decided']) + '/' + str(r['requests']):>9}"
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the peer matrix, print the table, fail on any disagreement."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--worker":
        engine, workload, n, n_req, seed, budget, cap = argv[1:8]
        res = worker(engine, workload, int(n), int(n_req), int(seed), float(budget), float(cap))
        print(json.dumps(res))
        return 0
    from benchmarks.engines.base import ALL_ENGINES, available
    from benchmarks.workload import WORKLOADS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="N=10,100,1000; 1 repetition; short budgets"
    )
    ap.add_argument("--sizes", default=None)
    ap.add_argument("--engines", default=",".join(ALL_ENGINES))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--slow-reps", type=int, default=1)
    ap.add_argument("--slow-ms", type=float, default=5.0)
    ap.add_argument(
        "--budget", type=float, default=None, help="seconds of steady-state timing per run"
    )
    ap.add_argument(
        "--cap", type=float, default=None, help="seconds an engine may spend on its first pass"
    )
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument(
        "--random-seed",
        type=int,
        default=None,
        help="seed of the random workload (default: a fresh one per run, printed)",
    )
    ap.add_argument("--json", type=Path, default=None)
    opts = ap.parse_args(argv)
    quick = opts.quick or os.environ.get("BENCH_QUICK") == "1"
    sizes = (
        [int(s) for s in opts.sizes.split(",")]
        if opts.sizes
        else list(SIZES[:3] if quick else SIZES)
    )
    reps = opts.reps if opts.reps is not None else (1 if quick else 3)
    budget = opts.budget if opts.budget is not None else (0.5 if quick else 2.0)
    engines = [e for e in opts.engines.split(",") if e]
    present = available()
    missing = [e for e in engines if e not in present]
    if missing:
        print(
            f"error: engines not importable: {', '.join(missing)} (pip install -e '.[bench]')",
            file=sys.stderr,
        )
        return 2
    cap = opts.cap if opts.cap is not None else (20.0 if quick else 180.0)
    workloads = opts.workloads.split(",")
    random_seed = opts.random_seed if opts.random_seed is not None else fresh_seed()
    if "random" in workloads:
        print(f"random workload seed: {random_seed} (--random-seed {random_seed} repeats it)")
    not_run: list[dict[str, Any]] = []
    runs = run_matrix(
        engines,
        workloads,
        sizes,
        reps,
        opts.slow_reps,
        opts.seed,
        budget,
        opts.slow_ms,
        cap,
        not_run=not_run,
        random_seed=random_seed,
    )
    rows = summarize(runs)
    print(table(rows))
    for line in not_run_lines(not_run):
        print(line)
    problems = disagreements(runs, opts.seed)
    if opts.json:
        opts.json.parent.mkdir(parents=True, exist_ok=True)
        opts.json.write_text(
            json.dumps(
                {
                    "rows": rows,
                    "runs": runs,
                    "disagreements": problems,
                    "not_run": not_run,
                    "random_seed": random_seed,
                },
                indent=1,
            )
        )
    if problems:
        print("\n".join(problems), file=sys.stderr)
        print(f"FAILED: {len(problems)} disagreement(s) between engines", file=sys.stderr)
        return 1
    print(f"agreement: every engine gave the same decision on every request ({len(runs)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
