"""FastMCP's proxy in front of the fixture upstream (stdio), served over streamable HTTP.

``python -m benchmarks.gateways.fastmcp_proxy --port P [--deny NAME ...] -- COMMAND ARGS...``

FastMCP's documented way to put a gateway in front of a server
(``create_proxy(target)``), with and without a middleware that refuses the
named tools (``on_call_tool`` raises a ``ToolError``, ``on_list_tools``
hides them): the least a user who wants "deny by name" writes.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from fastmcp.client.transports import StdioTransport
from fastmcp.exceptions import ToolError
from fastmcp.server import create_proxy
from fastmcp.server.middleware import Middleware, MiddlewareContext


class DenyByName(Middleware):
    """Refuse calls to (and hide) the tools named at start-up."""

    def __init__(self, denied: Sequence[str]) -> None:
        self.denied = frozenset(denied)

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        """Refuse a denied name before it reaches the upstream."""
        if context.message.name in self.denied:
            raise ToolError(f"tool {context.message.name!r} is denied by this gateway")
        return await call_next(context)

    async def on_list_tools(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        """List the upstream's tools without the denied ones."""
        tools = await call_next(context)
        return [t for t in tools if t.name not in self.denied]


def main() -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--deny", action="append", default=[])
    parser.add_argument("command", nargs="+")
    opts = parser.parse_args()
    logging.getLogger("fastmcp").setLevel(logging.WARNING)
    proxy = create_proxy(
        StdioTransport(opts.command[0], opts.command[1:], keep_alive=True), name="fastmcp-proxy"
    )
    if opts.deny:
        proxy.add_middleware(DenyByName(opts.deny))
    asyncio.run(
        proxy.run_http_async(
            show_banner=False, host="127.0.0.1", port=opts.port, path="/mcp", log_level="warning"
        )
    )


if __name__ == "__main__":
    main()
