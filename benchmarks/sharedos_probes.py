"""SharedOS-only start-up probes of issue 14, each in a fresh interpreter.

- ``cold``: a 10-rule policy in a fresh process: ``import sharedos.policy``
  plus ``compile_source`` (the import includes whatever the parser builds at
  import time), and the same with a compiled bundle (``load_bundle`` + first
  ``decide``). The interpreter's own start-up is printed beside it
  (``python -c pass``), not included.
- ``bundle``: for each N, a fresh process loads the bundle (timed), makes
  its first decision (timed), then decides every other request once (the
  p99 of that first pass, no ``prepare()``); a second fresh process times
  ``prepare()`` on the loaded bundle.
- ``annotations``: compile time of 10,000 rules with ``@id(...)`` on every
  rule, and with ``@id(...)`` + ``@description(...)`` when the language
  accepts ``@description`` (guarded: reported "unsupported" otherwise).

Usage: ``python -m benchmarks.sharedos_probes [--quick] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# Child programs: as few imports as possible before the clock starts.
COLD_COMPILE = """
import time, sys
t0 = time.perf_counter()
import sharedos.policy as sp
t1 = time.perf_counter()
text = open(sys.argv[1]).read()
t2 = time.perf_counter()
policy = sp.compile_source(text, "cold.sos")
t3 = time.perf_counter()
print(f'{{"import_ms": {(t1 - t0) * 1e3}, "compile_ms": {(t3 - t2) * 1e3}}}')
"""

COLD_BUNDLE = """
import time, sys, json
t0 = time.perf_counter()
import sharedos.policy as sp
t1 = time.perf_counter()
policy = sp.load_bundle(sys.argv[1])
t2 = time.perf_counter()
req = json.loads(open(sys.argv[2]).read())[0]
t3 = time.perf_counter()
d = policy.decide(req[0], req[1], req[2], context_key=req[3])
t4 = time.perf_counter()
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "load_ms": (t2 - t1) * 1e3, "first_decision_ms": (t4 - t3) * 1e3}))
"""

STDLIB_FLOOR = """
import time
t0 = time.perf_counter()
import json, hashlib
t1 = time.perf_counter()
print(f'{{"import_ms": {(t1 - t0) * 1e3}}}')
"""

BUNDLE_FIRST = """
import time, sys, json, gc
import sharedos.policy as sp
reqs = json.loads(open(sys.argv[2]).read())
gc.collect()
t0 = time.perf_counter_ns()
policy = sp.load_bundle(sys.argv[1])
t1 = time.perf_counter_ns()
first = None
rest = []
for tool, args, ctx, key in reqs:
    a = time.perf_counter_ns()
    policy.decide(tool, args, ctx, context_key=key)
    b = time.perf_counter_ns()
    if first is None:
        first = b - a
    else:
        rest.append(b - a)
rest.sort()
p99 = rest[min(len(rest) - 1, int(0.99 * len(rest)))] if rest else None
print(json.dumps({"load_ms": (t1 - t0) / 1e6, "first_decision_ms": first / 1e6,
                  "first_pass_p50_us": rest[len(rest) // 2] / 1e3, "first_pass_p99_us": p99 / 1e3}))
"""

BUNDLE_PREPARE = """
import time, sys, json
import sharedos.policy as sp
policy = sp.load_bundle(sys.argv[1])
t0 = time.perf_counter()
prepared = getattr(policy, "prepare", None)
if prepared is not None:
    prepared()
t1 = time.perf_counter()
print(json.dumps({"prepare_ms": (t1 - t0) * 1e3 if prepared is not None else None}))
"""

COMPILE_FILE = """
import time, sys, json, gc
import sharedos.policy as sp
text = open(sys.argv[1]).read()
sp.compile_source("namespace warm\\n", "warm.sos")  # parser built: time the compile only
gc.collect()
c0 = time.process_time()
t0 = time.perf_counter()
try:
    sp.compile_source(text, "annotated.sos")
    ok = True
except sp.PolicyError as exc:
    ok = False
    err = str(exc).splitlines()[0]
t1 = time.perf_counter()
c1 = time.process_time()
out = {"ok": ok, "compile_ms": (t1 - t0) * 1e3, "compile_cpu_ms": (c1 - c0) * 1e3}
if not ok:
    out["error"] = err
print(json.dumps(out))
"""


def _child(code: str, *args: str, timeout: float = 600) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"probe failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _median_dicts(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in items[0]:
        vals = [i[key] for i in items]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            out[key] = statistics.median(vals)
        else:
            out[key] = vals[0]
    out["samples"] = len(items)
    return out


def _requests_file(tmp: Path, wl: Any) -> Path:
    path = tmp / f"{wl.name}-{wl.n_rules}.requests.json"
    path.write_text(json.dumps([[r.tool, r.args, r.context, r.context_key] for r in wl.requests]))
    return path


def description_supported() -> bool:
    """Does this branch's language accept ``@description("...")`` on a rule?"""
    from sharedos.policy import PolicyError, compile_source

    probe = (
        "namespace probe\n"
        "requirement probe.r { action r; resource path(args.path) }\n"
        '@id("a")\n@description("what this rule is for")\npermit r on "/a/**"\n'
    )
    try:
        compile_source(probe, "probe.sos")
    except PolicyError:
        return False
    return True


def run(quick: bool, sizes: Sequence[int], log: Any = print) -> dict[str, Any]:
    """All probes; returns their figures (medians over repetitions)."""
    from benchmarks.engines.sharedos_engine import policy_text
    from benchmarks.peers import requests_for
    from benchmarks.workload import build
    from sharedos.policy import compile_source

    reps = 1 if quick else 5
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        # -- cold load, 10 rules
        wl10 = build("acl", 10, 100)
        src = tmp / "cold.sos"
        src.write_text(policy_text(wl10))
        bundle10 = tmp / "cold.bundle.json"
        compile_source(src.read_text(), "cold.sos").save_bundle(bundle10)
        reqs10 = _requests_file(tmp, wl10)
        # An installed package has its bytecode compiled (pip does it); without
        # this, a shell with PYTHONDONTWRITEBYTECODE=1 recompiles every edited
        # module in every child and the figures measure the compiler.
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(REPO_ROOT / "sharedos")],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        # The floor under any JSON bundle loader in CPython: the standard library
        # modules a load cannot do without (json imports re; hashlib checks the hash).
        floor = [_child(STDLIB_FLOOR) for _ in range(reps)]
        python = []
        for _ in range(reps):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            python.append((time.perf_counter() - t0) * 1e3)
        compile_runs = [_child(COLD_COMPILE, str(src)) for _ in range(reps)]
        bundle_runs = [_child(COLD_BUNDLE, str(bundle10), str(reqs10)) for _ in range(reps)]
        cold_c = _median_dicts(compile_runs)
        cold_b = _median_dicts(bundle_runs)
        out["cold"] = {
            "python_startup_ms": statistics.median(python),
            "stdlib_floor_ms": statistics.median(f["import_ms"] for f in floor),
            "source": {**cold_c, "total_ms": cold_c["import_ms"] + cold_c["compile_ms"]},
            "bundle": {
                **cold_b,
                "total_ms": cold_b["import_ms"] + cold_b["load_ms"] + cold_b["first_decision_ms"],
            },
        }
        log(
            f"  cold 10-rule policy: import {cold_c['import_ms']:.1f} ms + compile "
            f"{cold_c['compile_ms']:.1f} ms; bundle: import {cold_b['import_ms']:.1f} + load "
            f"{cold_b['load_ms']:.1f} + first decision {cold_b['first_decision_ms']:.2f} ms "
            f"(stdlib floor: import json, hashlib {out['cold']['stdlib_floor_ms']:.1f} ms)"
        )
        # -- first decision after a bundle load, per size
        out["bundle"] = {}
        for n in sizes:
            wl = build("acl", n, requests_for(n))
            bpath = tmp / f"acl-{n}.bundle.json"
            compile_source(policy_text(wl), f"acl-{n}.sos").save_bundle(bpath)
            rpath = _requests_file(tmp, wl)
            firsts = [_child(BUNDLE_FIRST, str(bpath), str(rpath)) for _ in range(reps)]
            preps = [_child(BUNDLE_PREPARE, str(bpath)) for _ in range(max(1, reps // 2))]
            row = _median_dicts(firsts)
            prep = [p["prepare_ms"] for p in preps if p["prepare_ms"] is not None]
            row["prepare_ms"] = statistics.median(prep) if prep else None
            row["bundle_kb"] = bpath.stat().st_size / 1024
            out["bundle"][str(n)] = row
            log(
                f"  bundle N={n}: load {row['load_ms']:.1f} ms, first decision "
                f"{row['first_decision_ms']:.3f} ms, first-pass p99 {row['first_pass_p99_us']:.1f} us, "
                f"prepare {row['prepare_ms'] or 0:.0f} ms"
            )
        # -- annotations at 10,000 rules
        n = max(sizes)
        wl = build("acl", n, 10)
        ann: dict[str, Any] = {"rules": n, "description_supported": description_supported()}
        for label, annotations in (
            ("plain", ()),
            ("id", ("id",)),
            ("id+description", ("id", "description")),
        ):
            if label == "id+description" and not ann["description_supported"]:
                ann[label] = {
                    "ok": False,
                    "error": "@description is not in the language yet (SOS211)",
                }
                log(f"  compile {n} rules with {label}: unsupported on this branch")
                continue
            path = tmp / f"ann-{label}.sos"
            path.write_text(policy_text(wl, annotations))
            runs = [_child(COMPILE_FILE, str(path)) for _ in range(max(1, reps - 2))]
            ann[label] = _median_dicts(runs)
            log(
                f"  compile {n} rules ({label}): {ann[label]['compile_ms']:.0f} ms "
                f"(cpu {ann[label]['compile_cpu_ms']:.0f} ms){'' if ann[label]['ok'] else ' FAILED: ' + ann[label].get('error', '')}"
            )
        out["annotations"] = ann
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the probes and print their figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", default=None)
    ap.add_argument("--json", type=Path, default=None)
    opts = ap.parse_args(argv)
    quick = opts.quick or os.environ.get("BENCH_QUICK") == "1"
    sizes = (
        [int(s) for s in opts.sizes.split(",")]
        if opts.sizes
        else ([10, 1000] if quick else [10, 100, 1000, 10000])
    )
    res = run(quick, sizes)
    if opts.json:
        opts.json.parent.mkdir(parents=True, exist_ok=True)
        opts.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
