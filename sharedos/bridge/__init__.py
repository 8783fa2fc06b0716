"""The turn-scoped MCP bridge (ADR 0014, "Per turn, not globally").

``open_turn(runtime_host, context, tool_policy, transport="http"|"stdio")`` is
an async context manager: it computes the turn's catalogue once, fixes its
catalogHash, exposes exactly those tools over MCP (streamable HTTP on
127.0.0.1 with a per-turn bearer token, or a stdio command a harness
launches), hands every ``tools/call`` to ``RuntimeHost.invoke_tool`` with the
raw name received, and closes everything when the turn ends.

Exports are resolved lazily so ``sharedos bridge --stdio`` does not import the
HTTP stack.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "open_turn": "sharedos.bridge.turn",
    "Turn": "sharedos.bridge.turn",
    "BridgeHost": "sharedos.bridge.host",
    "TurnEndpoint": "sharedos.bridge.server",
    "StdioLaunch": "sharedos.bridge.turnfile",
    "TurnFile": "sharedos.bridge.turnfile",
    "write_turn_file": "sharedos.bridge.turnfile",
    "read_turn_file": "sharedos.bridge.turnfile",
    "harness_command": "sharedos.bridge.turnfile",
    "harness_mcp_config": "sharedos.bridge.turnfile",
    "harness_aliases": "sharedos.bridge.diagnostics",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sharedos.bridge' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
