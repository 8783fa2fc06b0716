"""The mcp column: installed harness CLIs (Claude Code, Codex, Pi, Pi + pi-mcp-adapter)
running natively against the permission-filtered catalogue through a turn bridge.

The work is done by ``sharedos.harness.columns``; this module is the column
interface ``sharedos conformance run --column mcp`` dispatches to.
"""

from __future__ import annotations

from sharedos.conformance.columns.base import ColumnOptions, ColumnRun


async def run(options: ColumnOptions) -> list[ColumnRun]:
    """One ``ColumnRun`` per harness × transport; a harness that cannot run is kept, unavailable."""
    from sharedos.harness.columns import run_mcp_columns

    return await run_mcp_columns(options)
