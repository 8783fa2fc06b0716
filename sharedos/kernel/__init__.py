"""The kernel: trusted context, calls, decisions and the RuntimeHost that re-authorizes every call."""

from sharedos.kernel.context import AccessContext, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.kernel.kernel import Kernel, TurnCatalog
from sharedos.kernel.runtime import RuntimeHost, ToolResult

__all__ = [
    "AccessContext",
    "HandlerContext",
    "HandlerResult",
    "Kernel",
    "RuntimeHost",
    "ToolCall",
    "ToolResult",
    "TurnCatalog",
]
