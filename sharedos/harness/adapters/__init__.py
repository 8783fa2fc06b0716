"""One adapter per harness CLI, and the registry the rest of SharedOS asks.

``ADAPTERS`` maps a host-configuration ``kind`` to its ``HarnessAdapter``
(``base.py``): ``claude-code``, ``codex``, ``pi`` (Pi's built-in MCP client),
``pi-adapter`` (Pi + pi-mcp-adapter) and ``dsh``. Adding a harness is adding a
module here and a line below.
"""

from __future__ import annotations

from sharedos.harness.adapters.base import HarnessAdapter, HarnessUnavailable
from sharedos.harness.adapters.claude_code import ClaudeCodeAdapter
from sharedos.harness.adapters.codex import CodexAdapter
from sharedos.harness.adapters.dsh import DshAdapter
from sharedos.harness.adapters.pi import PiAdapter, PiMcpAdapter

ADAPTERS: dict[str, HarnessAdapter] = {
    a.kind: a
    for a in (ClaudeCodeAdapter(), CodexAdapter(), PiAdapter(), PiMcpAdapter(), DshAdapter())
}

#: Harness kinds a host configuration may name.
HARNESS_KINDS: tuple[str, ...] = tuple(ADAPTERS)


def get_adapter(kind: str) -> HarnessAdapter:
    """The adapter for ``kind``; ``HarnessUnavailable`` naming the known kinds otherwise."""
    try:
        return ADAPTERS[kind]
    except KeyError:
        raise HarnessUnavailable(
            f"unknown harness kind {kind!r} (known: {', '.join(HARNESS_KINDS)})"
        ) from None


def correlation_keys() -> tuple[str, ...]:
    """Every harness's own correlation-id key, as found in a ``tools/call``'s ``_meta``."""
    return tuple(k for a in ADAPTERS.values() for k in a.correlation_keys)


__all__ = [
    "ADAPTERS",
    "HARNESS_KINDS",
    "HarnessAdapter",
    "HarnessUnavailable",
    "correlation_keys",
    "get_adapter",
]
