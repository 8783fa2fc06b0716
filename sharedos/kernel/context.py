"""Re-export of the shared vocabulary ``AccessContext`` / ``ToolCall`` (``sharedos.context``).

They sit at the top of the package so that layers below the kernel (the
catalog) can name them without importing the kernel.
"""

from sharedos.context import AccessContext, ToolCall, new_call_id

__all__ = ["AccessContext", "ToolCall", "new_call_id"]
