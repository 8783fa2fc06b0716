"""Brokered upstream MCP servers (issue 12; ADR 0014's "brokered GitHub").

SharedOS connects to operator-configured MCP servers as a client (the
official ``mcp`` SDK), publishes their tools under a namespace
(``git.git_status``), authorizes every call with the same kernel as the
built-in tools, and forwards allowed calls with credentials only SharedOS
holds. The parts:

- ``config``: the ``[upstream.ID]`` tables of the host configuration (no MCP imports);
- ``secrets``: resolving credential references and scrubbing their values;
- ``definitions``: an upstream ``Tool`` -> a namespaced ``ToolDefinition``;
- ``pins``: the pin file, drift (quarantine / new / removed) and readable diffs;
- ``connection`` / ``pool``: one SDK client session, and sessions pooled by
  upstream + credential set;
- ``forward``: the handler that forwards an authorized call;
- ``broker``: ``UpstreamBroker`` -- the ``ContextToolProvider`` whose per-turn
  snapshot fixes each turn's brokered tools.

Exports resolve lazily so that loading a host configuration does not import
the MCP client.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "UpstreamConfig": "sharedos.upstream.config",
    "CredentialRef": "sharedos.upstream.config",
    "parse_upstreams": "sharedos.upstream.config",
    "UpstreamBroker": "sharedos.upstream.broker",
    "TurnUpstreams": "sharedos.upstream.broker",
    "UpstreamStatus": "sharedos.upstream.broker",
    "PinFile": "sharedos.upstream.pins",
    "pin_path_for": "sharedos.upstream.pins",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sharedos.upstream' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
