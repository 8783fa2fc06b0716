"""A minimal real MCP upstream (stdio, the SDK's low-level ``Server``) that reads the file
named by a *nested* argument, ``opts.path``, the way any file-serving upstream opens the
path it is given: by name, through the host's own path resolution (links and ``..``)."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server

TOOL = {
    "name": "read",
    "description": "Read the text file at opts.path.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "opts": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            }
        },
        "required": ["opts"],
    },
}


def main() -> None:
    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(TOOL)])

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        path = dict(params.arguments or {})["opts"]["path"]
        try:
            with open(path, encoding="utf-8") as fh:
                body = fh.read()
        except OSError as exc:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"error {exc.errno}")], is_error=True
            )
        return types.CallToolResult(content=[types.TextContent(type="text", text=body)])

    server = Server(
        "hunt-reader", version="1.0.0", on_list_tools=on_list_tools, on_call_tool=on_call_tool
    )

    from mcp.server.stdio import stdio_server

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


if __name__ == "__main__":
    main()
