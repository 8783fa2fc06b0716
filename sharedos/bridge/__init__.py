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
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the real types for mypy and editors; at run time, resolved lazily below
    from sharedos.bridge.diagnostics import harness_aliases as harness_aliases
    from sharedos.bridge.host import BridgeHost as BridgeHost
    from sharedos.bridge.limits import TransportLimits as TransportLimits
    from sharedos.bridge.limits import TransportStats as TransportStats
    from sharedos.bridge.server import TurnEndpoint as TurnEndpoint
    from sharedos.bridge.turn import Turn as Turn
    from sharedos.bridge.turn import open_turn as open_turn
    from sharedos.bridge.turnfile import StdioLaunch as StdioLaunch
    from sharedos.bridge.turnfile import TurnFile as TurnFile
    from sharedos.bridge.turnfile import harness_command as harness_command
    from sharedos.bridge.turnfile import harness_mcp_config as harness_mcp_config
    from sharedos.bridge.turnfile import read_turn_file as read_turn_file
    from sharedos.bridge.turnfile import write_turn_file as write_turn_file

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
    "TransportLimits": "sharedos.bridge.limits",
    "TransportStats": "sharedos.bridge.limits",
}

__all__ = [
    "BridgeHost",
    "StdioLaunch",
    "TransportLimits",
    "TransportStats",
    "Turn",
    "TurnEndpoint",
    "TurnFile",
    "harness_aliases",
    "harness_command",
    "harness_mcp_config",
    "open_turn",
    "read_turn_file",
    "write_turn_file",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sharedos.bridge' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
