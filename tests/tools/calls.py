"""Call a files tool's handler the way ``RuntimeHost`` does (shared by the tools tests)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from sharedos.catalog import ToolDefinition
from sharedos.kernel.context import AccessContext, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.outcomes import Effect, ReasonCode
from sharedos.policy.decision import Decision
from sharedos.tools import files_tools


def tools(root: Path) -> dict[str, ToolDefinition]:
    """The five files tools over ``root``, by name."""
    return {t.name: t for t in files_tools(root)}


def call(
    tool: ToolDefinition, resource: str, *, within_s: float = 10.0, **args: Any
) -> HandlerResult:
    """Run the handler with an allow decision for ``resource``; fail if it hangs or raises.

    A handler that raises is a failure of the test: the files tools promise to
    turn every host failure into a ``HandlerResult.error`` that names the
    canonical path (an escaped ``OSError`` carries the host path with it).
    """
    decision = Decision(
        Effect.ALLOW, ReasonCode.ALLOWED, tool.name, "files", "x", resource, (), "ok"
    )
    hctx = HandlerContext(
        call=ToolCall(tool=tool.name, arguments=args),
        context=AccessContext(principal="alice"),
        decision=decision,
    )
    handler = tool.handler
    assert handler is not None
    box: list[Any] = []

    def work() -> None:
        try:
            box.append(handler(args, hctx))
        except BaseException as exc:  # reported below, in the test's thread
            box.append(exc)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(within_s)
    assert not worker.is_alive(), f"{tool.name} on {resource} hung"
    (result,) = box
    if isinstance(result, BaseException):
        raise AssertionError(f"{tool.name} on {resource} raised {result!r}") from result
    assert isinstance(result, HandlerResult)
    return result


def text(result: HandlerResult) -> str:
    """The text blocks of a result, joined."""
    return " ".join(str(b.get("text", "")) for b in result.content)
