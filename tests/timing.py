"""Test support: time bounds that scale with how busy the machine is, measured in the same run.

A test in the default selection never asserts a fixed wall-clock time: on a
busy machine (8 jobs on 2 cores) everything takes longer and such a test
measures the load, not the behaviour. Where a test must bound a wait (a
timeout fired instead of waiting for the handler, a closed turn did not wait
out its grace), it asserts ``elapsed < bound(seconds)``: ``seconds`` is the
bound on an idle machine, multiplied by ``slowdown()`` — how much slower a
fixed piece of pure-Python work runs right now than on an idle development
machine (never below 1) — and by ``SHAREDOS_TIME_SCALE`` when set (a CI
runner known to be slow). Lower bounds (a timeout did not fire too early) need
no scaling: load only makes things later. A bound on *work* (an input must not
make the policy compiler backtrack) is better put on CPU time: ``cpu_bound``
scales it by the processor's measured speed only, since waiting for a core
does not count.

Speed itself (how fast, not whether in time) lives in ``benchmarks/``, which
print figures and assert nothing.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import AsyncIterator, Callable

import anyio

__all__ = ["bound", "cpu_bound", "cpu_slowdown", "loop_gaps", "slowdown"]

#: what one probe takes on an idle development machine (seconds; measured, rounded down)
REFERENCE_S = 0.008
_PROBE_ITERATIONS = 300_000


def _probe(clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds (by ``clock``) of one fixed piece of pure-Python work (CPU-bound)."""
    t0 = clock()
    total = 0
    for i in range(_PROBE_ITERATIONS):
        total += i & 7
    elapsed = clock() - t0
    assert total >= 0  # keep the loop's result alive
    return elapsed


def slowdown() -> float:
    """How many times slower this machine runs right now than an idle one (at least 1):
    the median of five probes against ``REFERENCE_S``, times ``SHAREDOS_TIME_SCALE``."""
    measured = statistics.median(_probe() for _ in range(5))
    try:
        extra = float(os.environ.get("SHAREDOS_TIME_SCALE", "1") or 1)
    except ValueError:
        extra = 1.0
    return max(1.0, measured / REFERENCE_S) * max(1.0, extra)


def bound(seconds: float) -> float:
    """``seconds`` (an upper bound on an idle machine) scaled by ``slowdown()`` now."""
    return seconds * slowdown()


def cpu_slowdown() -> float:
    """How many times more CPU time the probe takes now than on the idle development
    machine (at least 1): a slower processor, or one whose caches and cores are shared
    with busy neighbours. Waiting for the CPU does not count, as it does in ``slowdown``."""
    measured = statistics.median(_probe(time.process_time) for _ in range(5))
    try:
        extra = float(os.environ.get("SHAREDOS_TIME_SCALE", "1") or 1)
    except ValueError:
        extra = 1.0
    return max(1.0, measured / REFERENCE_S) * max(1.0, extra)


def cpu_bound(seconds: float) -> float:
    """``seconds`` of CPU time (a bound on the work something does) scaled by
    ``cpu_slowdown()``: for a bound on work, not on waiting."""
    return seconds * cpu_slowdown()


@contextlib.asynccontextmanager
async def loop_gaps() -> AsyncIterator[list[float]]:
    """How long the event loop really took for each 10 ms sleep while the block ran.

    A ticker task sleeps 10 ms at a time and records each real gap: a block that
    holds the loop (work done on it, a synchronous fetch) shows as one long gap.
    Assert ``max(gaps) < bound(...)``.
    """
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await anyio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        try:
            yield gaps
        finally:
            tg.cancel_scope.cancel()
