"""A small real MCP server (the official SDK's low-level ``Server``) for the upstream tests.

The reference servers cannot be made to crash, stall, change their tools or
report what they received on demand; this one can, and it is a real MCP server
speaking both protocol eras over stdio or streamable HTTP:

- ``--tools FILE``: a JSON list of tool definitions, re-read at every
  ``tools/list`` (edit the file to make the tools drift); without it a fixed
  set is served (``echo``, ``slow``, ``gate``, ``crash``, ``progress``, ``whoami``,
  ``fail``, ``big``, ...).
- ``--many N``: N more tools ``t00000`` ... (``many_tools(N)``: each with its own
  description and a small object schema, answered like an unknown name), for
  catalogue-scale tests and benchmarks; built once, not re-read.
- ``--page-size N``: ``tools/list`` answers N tools per page with a ``nextCursor``
  (the offset, as a string), as a large real server would; without it, one page.
- ``--log FILE``: every request and notification received is appended as one
  JSON line (``{"method", "params"}``) -- the upstream's own account of what
  reached it.
- ``--http PORT``: serve streamable HTTP on 127.0.0.1:PORT instead of stdio.
  ``--require-header NAME=VALUE``: refuse HTTP requests without it (401).
- ``--header NAME:VALUE`` (repeatable): a header it would send on, taken as
  mcp-remote takes it: a ``${VAR}`` in VALUE is expanded from the server's own
  environment (so the value never sits on its command line); ``whoami`` then
  also says each header's length (never its value).

It exits by itself when its stdin closes (stdio) or after ``--max-life``
seconds (HTTP).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server

DEFAULT_TOOLS: list[dict[str, Any]] = [
    {
        "name": "echo",
        "description": "Echo the message back (text and structured content).",
        "inputSchema": {
            "type": "object",
            "properties": {"message": {"type": "string"}, "path": {"type": "string"}},
            "required": ["message"],
        },
    },
    {
        "name": "slow",
        "description": "Sleep for 'seconds', then answer; logs a cancellation it receives.",
        "inputSchema": {
            "type": "object",
            "properties": {"seconds": {"type": "number"}, "path": {"type": "string"}},
            "required": ["seconds"],
        },
    },
    {
        "name": "crash",
        "description": "Exit the server process abruptly in the middle of the call.",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {
        "name": "progress",
        "description": "Report 'steps' progress notifications, then answer.",
        "inputSchema": {
            "type": "object",
            "properties": {"steps": {"type": "integer"}, "path": {"type": "string"}},
            "required": ["steps"],
        },
    },
    {
        "name": "whoami",
        "description": "Answer with the credential environment variable the server was started with.",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {
        "name": "fail",
        "description": "Answer with the tool's own isError result.",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {
        "name": "protocol_error",
        "description": "Answer with a JSON-RPC error instead of a result.",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {
        "name": "leak",
        "description": "Try to leak the credential it was started with ('how': text, error, stderr, crash).",
        "inputSchema": {
            "type": "object",
            "properties": {"how": {"type": "string"}, "path": {"type": "string"}},
            "required": ["how"],
        },
    },
    {
        "name": "gate",
        "description": "Wait until the file 'until' exists (at most 'seconds'), then answer.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "until": {"type": "string"},
                "seconds": {"type": "number"},
                "path": {"type": "string"},
            },
            "required": ["until"],
        },
    },
    {
        "name": "big",
        "description": "Answer with 'size' bytes of text.",
        "inputSchema": {
            "type": "object",
            "properties": {"size": {"type": "integer"}, "path": {"type": "string"}},
            "required": ["size"],
        },
    },
]


def many_tools(n: int) -> list[dict[str, Any]]:
    """``n`` generated tools ``t00000`` ...: distinct descriptions, one small object schema each."""
    return [
        {
            "name": f"t{i:05d}",
            "description": f"Generated tool number {i} of {n}: answers with its own name.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "message": {"type": "string"},
                    f"option_{i % 7}": {"type": "integer", "minimum": 0},
                },
                "required": ["path"],
            },
        }
        for i in range(n)
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=Path)
    parser.add_argument("--log", type=Path)
    parser.add_argument("--http", type=int)
    parser.add_argument("--require-header", default=None)
    parser.add_argument("--max-life", type=float, default=120.0)
    parser.add_argument("--name", default="sharedos-fixture-upstream")
    parser.add_argument("--many", type=int, default=0)
    parser.add_argument("--page-size", type=int, default=0)
    parser.add_argument("--header", action="append", default=[])
    opts = parser.parse_args()
    generated = [types.Tool.model_validate(t) for t in many_tools(opts.many)]

    def log(method: str, params: Any) -> None:
        if opts.log is None:
            return
        line = json.dumps({"method": method, "params": params, "pid": os.getpid()}, default=str)
        with opts.log.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def tool_defs() -> list[dict[str, Any]]:
        if opts.tools is None:
            return DEFAULT_TOOLS
        return list(json.loads(opts.tools.read_text(encoding="utf-8")))

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        cursor = getattr(params, "cursor", None)
        log("tools/list", {"cursor": cursor} if cursor else None)
        listed_mtime[0] = tools_mtime()
        tools = [types.Tool.model_validate(t) for t in tool_defs()] + generated
        if opts.page_size <= 0:
            return types.ListToolsResult(tools=tools)
        start = int(cursor or 0)
        end = start + opts.page_size
        return types.ListToolsResult(
            tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None
        )

    def text(value: str) -> list[types.TextContent]:
        return [types.TextContent(type="text", text=value)]

    listed_mtime: list[int] = [0]

    def tools_mtime() -> int:
        try:
            return opts.tools.stat().st_mtime_ns if opts.tools is not None else 0
        except OSError:
            return 0

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = dict(params.arguments or {})
        log("tools/call", {"name": params.name, "arguments": args})
        if opts.tools is not None and tools_mtime() != listed_mtime[0]:
            # the tools drifted since the last listing: announce it, as a real server would
            log("notify", {"method": "notifications/tools/list_changed"})
            try:
                await ctx.session.send_tool_list_changed()
            except Exception as exc:  # the 2026-07-28 era has no such notification
                log("notify-failed", {"error": type(exc).__name__})
        name = params.name
        if name == "echo":
            return types.CallToolResult(
                content=text(str(args.get("message"))),
                structured_content={"echo": args.get("message"), "pid": os.getpid()},
            )
        if name == "slow":
            try:
                await anyio.sleep(float(args.get("seconds", 1)))
            except anyio.get_cancelled_exc_class():
                log("cancelled-in-handler", {"name": name})
                raise
            return types.CallToolResult(content=text("slept"))
        if name == "gate":
            gate, end = (
                Path(str(args.get("until"))),
                time.monotonic() + float(args.get("seconds", 60)),
            )
            while not gate.exists() and time.monotonic() < end:
                await anyio.sleep(0.05)
            return types.CallToolResult(content=text(f"gate open: {gate.exists()}"))
        if name == "crash":
            sys.stdout.flush()
            os._exit(3)
        if name == "progress":
            steps = int(args.get("steps", 3))
            for i in range(1, steps + 1):
                await ctx.session.report_progress(float(i), float(steps), f"step {i}/{steps}")
                await anyio.sleep(0.01)
            return types.CallToolResult(content=text(f"{steps} steps done"))
        if name == "whoami":
            value = os.environ.get("FIXTURE_TOKEN", "")
            # says whether it was given a credential and how long it is, never the value
            said: dict[str, Any] = {"tokenPresent": bool(value), "tokenLength": len(value)}
            if opts.header:
                said["headerLengths"] = {
                    name: len(os.path.expandvars(raw))
                    for name, _, raw in (h.partition(":") for h in opts.header)
                }
            return types.CallToolResult(
                content=text(f"token present: {bool(value)}, length {len(value)}"),
                structured_content=said,
            )
        if name == "fail":
            return types.CallToolResult(
                content=text("the fixture tool failed on purpose"),
                structured_content={"why": "on purpose"},
                is_error=True,
            )
        if name == "protocol_error":
            from mcp.shared.exceptions import MCPError

            raise MCPError(code=-32602, message="fixture protocol error")
        if name == "leak":
            # a hostile or careless upstream: SharedOS must keep all of this away from the caller
            token = os.environ.get("FIXTURE_TOKEN", "")
            how = args.get("how")
            if how == "log":  # a server that logs each request it gets, arguments and all
                print(f"request: leak {json.dumps(args)}", file=sys.stderr, flush=True)
                return types.CallToolResult(content=text("logged"))
            if how == "stderr" or how == "crash":
                print(f"debug: using token {token}", file=sys.stderr, flush=True)
                if how == "crash":
                    os._exit(4)
                return types.CallToolResult(content=text("ok"))
            if how == "error":
                from mcp.shared.exceptions import MCPError

                raise MCPError(code=-32602, message=f"bad token {token}")
            if how == "encoded":
                import base64
                import re
                from urllib.parse import quote, quote_plus

                raw = token.encode()
                forms = {
                    "base64": base64.b64encode(raw).decode(),
                    "base64url": base64.urlsafe_b64encode(raw).decode().rstrip("="),
                    "base64-inside": base64.b64encode(b"xy" + raw + b"z").decode(),
                    "base64url-inside": base64.urlsafe_b64encode(b"q" + raw).decode(),
                    "hex": raw.hex(),
                    "HEX": raw.hex().upper(),
                    "percent": quote(token, safe=""),
                    "percent-plus": quote_plus(token, safe=""),
                    "percent-lower": re.sub(
                        r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(token, safe="")
                    ),
                    # as upstreams in other languages write it: JavaScript's
                    # encodeURIComponent, PHP's JSON ("\/"), Go's HTML-safe JSON ("\u0026")
                    "percent-js": quote(token, safe="!'()*~"),
                    "json-php": json.dumps(token).replace("/", "\\/"),
                    "json-go": json.dumps(token)
                    .replace("<", "\\u003c")
                    .replace(">", "\\u003e")
                    .replace("&", "\\u0026"),
                }
                return types.CallToolResult(
                    content=text(" ".join(f"{k}={v}" for k, v in forms.items())),
                    structured_content=forms,
                )
            return types.CallToolResult(
                content=text(f"the token is {token} (json: {json.dumps(token)})"),
                structured_content={"token": token, "nested": [{token: token}]},
            )
        if name == "big":
            return types.CallToolResult(content=text("x" * int(args.get("size", 0))))
        return types.CallToolResult(
            content=text(f"{name} called"), structured_content={"name": name}
        )

    server = Server(
        opts.name, version="1.0.0", on_list_tools=on_list_tools, on_call_tool=on_call_tool
    )

    if opts.http is None:
        from mcp.server.stdio import stdio_server

        async def run_stdio() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(run_stdio)
        return

    import uvicorn

    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    required = opts.require_header.split("=", 1) if opts.require_header else None

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and required is not None:
            headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
            if headers.get(required[0].lower()) != required[1]:
                log("rejected", {"path": scope.get("path")})
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    config = uvicorn.Config(
        guarded, host="127.0.0.1", port=opts.http, log_level="warning", lifespan="on"
    )
    uv = uvicorn.Server(config)

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(uv.serve)
            await anyio.sleep(opts.max_life)
            uv.should_exit = True

    started = time.monotonic()
    anyio.run(serve)
    _ = started


if __name__ == "__main__":
    main()
