"""Does the one-line parser fast path (``sharedos.policy.fastpath``) serve users? A number.

Run: .venv/bin/python -m benchmarks.bench_fastpath [--rules N] [--reps N]

Prints, for the shipped rules and for a generated policy of N one-line rules
(the shape most large policies have), the parse time with the fast path and
with Lark alone (in-process, warm, median of ``--reps``), the same for a whole
``compile_source``, and the wall time of a fresh interpreter importing SharedOS
and compiling the generated policy both ways (the script flips the parser's
module flag, as the tests that compare the two paths do; it is no user
setting). Nothing is asserted; the figures decide.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sharedos.policy import parser
from sharedos.resources import shipped_dir


def generated(n: int) -> str:
    """A policy of ``n`` one-line rules over 20 namespaces (requirements included)."""
    lines: list[str] = []
    for ns in range(20):
        lines.append(f"namespace ns{ns}")
        lines.append(f"requirement ns{ns}.read {{ action read; resource path(args.path) }}")
        for i in range(n // 20):
            cond = f' when context.principal == "user{i}"' if i % 3 == 0 else ""
            lines.append(f'permit read on "/ns{ns}/area{i}/**"{cond}')
    return "\n".join(lines) + "\n"


def parse_time(text: str, fast: bool, reps: int) -> float:
    """Median seconds of one ``parse_source(text)`` with the fast path on or off."""
    parser._FAST_ENABLED = fast  # the module flag the tests flip too
    try:
        parser.parse_source(text, "bench.sos")  # warm (Lark tables, caches)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            parser.parse_source(text, "bench.sos")
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    finally:
        parser._FAST_ENABLED = True


_CHILD = (
    "import sys, time; t0 = time.perf_counter()\n"
    "from sharedos.policy import parser\n"
    "parser._FAST_ENABLED = sys.argv[2] == '1'\n"
    "from sharedos.policy import compile_source\n"
    "compile_source(open(sys.argv[1]).read(), sys.argv[1])\n"
    "print(time.perf_counter() - t0)\n"
)


def cold_compile(path: Path, fast: bool, reps: int) -> float:
    """Median wall seconds of a fresh interpreter importing and compiling ``path``."""
    times = []
    for _ in range(reps):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path), "1" if fast else "0"],
            capture_output=True,
            text=True,
            check=True,
        )
        times.append(float(out.stdout.strip()))
    return statistics.median(times)


def main() -> None:
    """Print the figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rules", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    shipped = "\n".join(p.read_text() for p in sorted(Path(shipped_dir("rules")).glob("*.sos")))
    big = generated(args.rules)
    for label, text in (("shipped rules", shipped), (f"{args.rules} one-line rules", big)):
        on = parse_time(text, True, args.reps)
        off = parse_time(text, False, args.reps)
        print(
            f"parse, {label:24} fast path {on * 1000:8.1f} ms   Lark only {off * 1000:8.1f} ms"
            f"   ({off / on:4.1f}x)"
        )
    from sharedos.policy import compile_source

    for fast in (True, False):
        parser._FAST_ENABLED = fast
        try:
            compile_source(big, "bench.sos")
            times = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                compile_source(big, "bench.sos")
                times.append(time.perf_counter() - t0)
        finally:
            parser._FAST_ENABLED = True
        label = "fast path" if fast else "Lark only"
        print(
            f"compile_source, {args.rules} one-line rules, {label}: {statistics.median(times):.2f} s"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.sos"
        path.write_text(big)
        on = cold_compile(path, True, max(1, args.reps // 2))
        off = cold_compile(path, False, max(1, args.reps // 2))
        print(
            f"cold process: import + compile {args.rules} rules   fast path {on:6.2f} s"
            f"   Lark only {off:6.2f} s   ({off / on:4.1f}x)"
        )


if __name__ == "__main__":
    main()
