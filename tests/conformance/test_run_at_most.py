"""Columns of one kind run at most ``jobs`` at a time, and the report keeps their order."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from sharedos.conformance.columns.base import ColumnJob, ColumnRun, run_at_most
from sharedos.identity import ColumnKind


def _column(cid: str) -> ColumnRun:
    return ColumnRun(column_id=cid, kind=ColumnKind.MCP, label=cid)


class _Gauge:
    """Counts the columns running at once (the most seen) and the order they finished in."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.finished: list[str] = []

    def job(self, cid: str, delay: float) -> Callable[[], Awaitable[ColumnRun]]:
        async def start() -> ColumnRun:
            self.running += 1
            self.most = max(self.most, self.running)
            await asyncio.sleep(delay)
            self.running -= 1
            self.finished.append(cid)
            return _column(cid)

        return start


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_columns_keep_their_order_whatever_order_they_finish_in(jobs: int) -> None:
    gauge = _Gauge()
    # the first column is the slowest: with more than one job it finishes last
    columns: list[ColumnJob] = [
        gauge.job("mcp/a/http", 0.06),
        _column("mcp/b/http"),  # settled: a column that could not run here
        gauge.job("mcp/c/http", 0.01),
        gauge.job("mcp/d/http", 0.02),
        gauge.job("mcp/e/http", 0.01),
    ]
    runs = asyncio.run(run_at_most(jobs, columns))
    assert [r.column_id for r in runs] == [f"mcp/{x}/http" for x in "abcde"]
    assert gauge.most == jobs
    if jobs > 1:
        assert gauge.finished[0] != "mcp/a/http"


def test_a_column_that_raises_stops_the_others_and_the_error_reaches_the_caller() -> None:
    gauge = _Gauge()
    cancelled: list[str] = []

    async def slow() -> ColumnRun:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append("slow")
            raise
        return _column("never")

    async def broken() -> ColumnRun:
        await asyncio.sleep(0.01)
        raise RuntimeError("the column's environment could not be built")

    with pytest.raises(RuntimeError, match="could not be built"):
        asyncio.run(run_at_most(2, [slow, broken, gauge.job("mcp/x/http", 0.01)]))
    assert cancelled == ["slow"]
    assert gauge.finished == []  # the third never started: its slot was still taken


def test_zero_or_negative_jobs_still_run_one_at_a_time() -> None:
    gauge = _Gauge()
    runs = asyncio.run(run_at_most(0, [gauge.job("a", 0.01), gauge.job("b", 0.01)]))
    assert [r.column_id for r in runs] == ["a", "b"] and gauge.most == 1
