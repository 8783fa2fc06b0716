"""``BridgeHost``: the host-side handle that opens turns (``host.open_turn(context, tool_policy)``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from sharedos.bridge.turn import Transport, Turn, open_turn
from sharedos.bridge.turnfile import StdioLaunch
from sharedos.kernel import RuntimeHost
from sharedos.kernel.context import AccessContext
from sharedos.toolpolicy import ToolPolicy


class BridgeHost:
    """Binds a ``RuntimeHost`` (and, for stdio, where the bridge process finds its inputs)."""

    def __init__(
        self,
        runtime_host: RuntimeHost,
        *,
        stdio: StdioLaunch | None = None,
        server_name: str = "sharedos",
    ) -> None:
        self.runtime_host = runtime_host
        self.stdio = stdio
        self.server_name = server_name

    @asynccontextmanager
    async def open_turn(
        self,
        context: AccessContext,
        tool_policy: ToolPolicy,
        *,
        transport: Transport = "http",
        portable_names: bool = False,
        identity: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[Turn]:
        """Open one turn's bridge (see ``sharedos.bridge.turn.open_turn``)."""
        async with open_turn(
            self.runtime_host,
            context,
            tool_policy,
            transport=transport,
            server_name=self.server_name,
            portable_names=portable_names,
            identity=identity,
            stdio=self.stdio,
        ) as turn:
            yield turn
