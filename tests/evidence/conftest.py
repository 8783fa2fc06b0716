"""Fixtures for store-fault tests: the suite's small filesystems (tests/mounts.py), and a
host with one tool (``t.read`` on ``path(args.p)``, permitted under ``/public``)."""

from __future__ import annotations

from typing import Any

from sharedos.catalog import ToolRegistry
from sharedos.catalog.definition import ToolDefinition
from sharedos.kernel import Kernel, RuntimeHost
from sharedos.kernel.handlers import HandlerResult
from sharedos.policy import compile_source
from tests.mounts import MountFn, fill, remount_read_only

__all__ = ["MountFn", "fill", "one_tool_host", "remount_read_only"]


async def _ok(args: dict[str, Any], hctx: Any) -> HandlerResult:
    return HandlerResult.text("ok")


def one_tool_host(
    store: Any, *, evidence_timeout_s: float = 2.0, handler: Any = _ok
) -> RuntimeHost:
    """A real runtime on ``store`` with one tool, ``t.read`` (``handler``: by default it
    answers "ok"), permitted under ``/public/**``."""
    tool = ToolDefinition(
        name="t.read",
        description="read",
        input_schema={"type": "object", "properties": {"p": {"type": "string"}}},
        handler=handler,
    )
    policy = compile_source(
        "namespace t\nrequirement t.read { action read; resource path(args.p) }\n"
        'permit read on "/public/**"\n',
        "t.sos",
    )
    return RuntimeHost(
        Kernel(policy, ToolRegistry([tool])), store, evidence_timeout_s=evidence_timeout_s
    )
