"""How long ``sharedos-policy diff`` takes on large policies, by kind of change.

``python -m benchmarks.bench_diff [N ...]`` (default 1,000 and 10,000 rules):
the ``bench_policy`` ACL policy of N rules against itself with one change,
for four changes from narrow to wide, printing the time of ``diff_policies``
(median of 3), the requests it decided and what it found. The cost follows
the change (how many rules can meet a changed rule), not the policy's size.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from benchmarks.bench_policy import generate
from sharedos.policy import compile_source
from sharedos.policy.analysis.diff import diff_policies

CHANGES: dict[str, Callable[[str], str]] = {
    "one permit added": lambda t: t + 'permit write on "/projects/proj3/docs/**"\n',
    "a forbid's condition widened": lambda t: t.replace(
        'unless "admin" in context.roles',
        'unless "admin" in context.roles or "ops" in context.roles',
    ),
    "the home rule narrowed": lambda t: t.replace(
        'permit read, write, list, delete on "/home/{context.principal}/**"',
        'permit read, list on "/home/{context.principal}/**"',
    ),
    "a forbid over every project": lambda t: (
        t + 'forbid delete on "/projects/**" unless "admin" in context.roles\n'
    ),
}


def main() -> None:
    """Print one row per (size, change)."""
    sizes = [int(a) for a in sys.argv[1:]] or [1000, 10000]
    print(f"{'rules':>6}  {'change':<30} {'median s':>9} {'requests':>9}  found")
    for n in sizes:
        text, _ = generate(n)
        old = compile_source(text, "p.sos")
        for name, change in CHANGES.items():
            new = compile_source(change(text), "p.sos")
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                report = diff_policies(old, new)
                times.append(time.perf_counter() - t0)
            found = (
                f"{report.verdict}: {sum(g.count for g in report.groups)} requests differ "
                f"in {len(report.groups)} groups, {len(report.gaps)} gaps"
            )
            print(
                f"{n:>6}  {name:<30} {statistics.median(times):>9.2f} {report.requests:>9}  {found}",
                flush=True,
            )


if __name__ == "__main__":
    main()
