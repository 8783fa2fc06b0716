"""Built-in managed tools (``files.*`` over a sandbox root)."""

from sharedos.tools.files import FILES_TOOL_NAMES, files_tools, register_files_tools

__all__ = ["FILES_TOOL_NAMES", "files_tools", "register_files_tools"]
