"""Where SharedOS's time goes at N rules: a py-spy profile of compile, bundle load and decide.

Runs each phase in its own process under ``py-spy record`` (raw collapsed
stacks), then prints, per phase, the functions with the most samples *on the
stack* (inclusive) and *at the top* (self), restricted to interesting frames.

Usage: python -m benchmarks.profile_sharedos [--rules 10000] [--rate 1000]
(py-spy is in the ``bench`` extra; it needs ptrace rights, e.g. root.)
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

PHASES = {
    # compile_source of the acl workload (parser built first, not counted)
    "compile": """
import sys, sharedos.policy as sp
text = open(sys.argv[1]).read()
sp.compile_source("namespace warm\\n", "w.sos")
for _ in range(3):
    sp.compile_source(text, "p.sos")
""",
    "compile_id": """
import sys, sharedos.policy as sp
text = open(sys.argv[4]).read()
sp.compile_source("namespace warm\\n", "w.sos")
for _ in range(2):
    sp.compile_source(text, "p.sos")
""",
    # load_bundle + the first pass (nothing warm) repeated on fresh loads
    "load_first_pass": """
import sys, json, sharedos.policy as sp
reqs = json.loads(open(sys.argv[3]).read())
for _ in range(8):
    p = sp.load_bundle(sys.argv[2])
    for t, a, c, k in reqs:
        p.decide(t, a, c, context_key=k)
""",
    "prepare": """
import sys, sharedos.policy as sp
for _ in range(4):
    sp.load_bundle(sys.argv[2]).prepare()
""",
    # steady state: prepared, warm, many passes
    "decide_steady": """
import sys, json, time, sharedos.policy as sp
reqs = json.loads(open(sys.argv[3]).read())
p = sp.load_bundle(sys.argv[2]).prepare()
for t, a, c, k in reqs:
    p.decide(t, a, c, context_key=k)
end = time.time() + 6
while time.time() < end:
    for t, a, c, k in reqs:
        p.decide(t, a, c, context_key=k)
""",
}


def summarize(raw: Path, top: int) -> dict[str, list[tuple[str, float]]]:
    """Inclusive and self shares of the samples, by function (file:function)."""
    incl: collections.Counter[str] = collections.Counter()
    self_: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = [
            f.split(" (")[0]
            + " ("
            + f.split(" (")[1].split(":")[0].replace(str(REPO_ROOT) + "/", "")
            + ")"
            if " (" in f
            else f
            for f in stack.split(";")
        ]
        for f in set(frames):
            incl[f] += n
        self_[frames[-1]] += n
    keep = lambda f: "<module>" not in f and "benchmarks" not in f  # noqa: E731
    return {
        "inclusive": [(f, 100 * c / total) for f, c in incl.most_common() if keep(f)][:top],
        "self": [(f, 100 * c / total) for f, c in self_.most_common()][:top],
        "samples": [("total", float(total))],
    }


def main() -> int:
    """Profile each phase and print the summaries."""
    from benchmarks.engines.sharedos_engine import policy_text
    from benchmarks.peers import requests_for
    from benchmarks.workload import build
    from sharedos.policy import compile_source

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", type=int, default=10000)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--phases", default=",".join(PHASES))
    opts = ap.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    wl = build("acl", opts.rules, requests_for(opts.rules))
    result = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        src = tmp / "p.sos"
        src.write_text(policy_text(wl))
        src_id = tmp / "p-id.sos"
        src_id.write_text(policy_text(wl, ("id",)))
        bundle = tmp / "p.bundle.json"
        compile_source(src.read_text(), "p.sos").save_bundle(bundle)
        reqs = tmp / "reqs.json"
        reqs.write_text(
            json.dumps([[r.tool, r.args, r.context, r.context_key] for r in wl.requests])
        )
        for phase in opts.phases.split(","):
            raw = tmp / f"{phase}.txt"
            prog = tmp / f"{phase}.py"
            prog.write_text(PHASES[phase])
            subprocess.run(
                [
                    spy,
                    "record",
                    "-r",
                    str(opts.rate),
                    "--format",
                    "raw",
                    "-o",
                    str(raw),
                    "--",
                    sys.executable,
                    str(prog),
                    str(src),
                    str(bundle),
                    str(reqs),
                    str(src_id),
                ],
                cwd=REPO_ROOT,
                check=True,
                capture_output=True,
            )
            summary = summarize(raw, opts.top)
            result[phase] = summary
            print(f"\n## {phase} ({int(summary['samples'][0][1])} samples at {opts.rate} Hz)")
            print("  inclusive (on the stack):")
            for f, share in summary["inclusive"]:
                print(f"    {share:5.1f}%  {f}")
            print("  self (top of the stack):")
            for f, share in summary["self"]:
                print(f"    {share:5.1f}%  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
