"""The live column: each installed CLI with its own local tools and no SharedOS catalogue.

It exists to show, from the evidence, what a harness without the catalogue
exercises in the kernel: nothing. The work is done by ``sharedos.harness.columns``.
"""

from __future__ import annotations

from sharedos.conformance.columns.base import ColumnOptions, ColumnRun


async def run(options: ColumnOptions) -> list[ColumnRun]:
    """One ``ColumnRun`` per CLI; every row is graded not exercised, and the notes say why."""
    from sharedos.harness.columns import run_live_columns

    return await run_live_columns(options)
