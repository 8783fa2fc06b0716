"""One open turn of a harness runtime with no tools of SharedOS's own (for tests that look
at what the harness CLI did with its prompt, its files or its model, not at tool calls)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sharedos.catalog import ToolRegistry
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.kernel import Kernel, RuntimeHost
from sharedos.kernel.context import AccessContext
from sharedos.policy import compile_source


async def run_open_turn(
    runtime: Any, tmp_path: Path, *, workdir: Path, timeout_s: float, **kwargs: Any
) -> Any:
    """``runtime.run_turn`` for alice under an open run policy over HTTP, with an empty
    plan and a SQLite store in ``tmp_path``; its result. ``kwargs`` go to ``run_turn``."""
    policy = compile_source("toolpolicy run {\n  mode open\n}\n", "run.sos")
    store = SqliteEvidenceStore(tmp_path / "evidence.sqlite")
    try:
        host = RuntimeHost(Kernel(policy, ToolRegistry()), store)
        return await runtime.run_turn(
            host,
            AccessContext(principal="alice"),
            policy.tool_policies["run"],
            plan=[],
            workdir=workdir,
            transport="http",
            timeout_s=timeout_s,
            **kwargs,
        )
    finally:
        store.close()
