"""A turn whose tools declare strict output schemas: built-in and brokered (server-filesystem).

``strict_world`` yields a kernel with a built-in tool ``strict.stat`` (its
``outputSchema`` admits exactly ``{"size": int}``) and the real
``@modelcontextprotocol/server-filesystem`` brokered as ``fs`` (11 of its tools
declare ``{"content": string}``), plus the calls every client makes against it:
allowed, denied and failed, brokered and built-in.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sharedos.catalog import ToolDefinition
from sharedos.catalog.definition import ToolMetadata
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from tests.upstream.conftest import Brokered, brokered, node, npm_server, stdio_upstream

STRICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"size": {"type": "integer"}},
    "required": ["size"],
    "additionalProperties": False,
}


async def _stat(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    if hctx.resource.endswith("/fail"):
        return HandlerResult.error("the stat backend is down")
    size = len(hctx.resource)
    return HandlerResult.text(json.dumps({"size": size}), structured={"size": size})


def strict_tool() -> ToolDefinition:
    """``strict.stat``: a built-in tool whose outputSchema a refusal payload cannot satisfy."""
    return ToolDefinition(
        name="strict.stat",
        description="The size of a path's name (a tool with a strict outputSchema).",
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
        output_schema=STRICT_SCHEMA,
        metadata=ToolMetadata(namespace="strict", source="tests"),
        handler=_stat,
    )


def _req(tool: str, action: str) -> str:
    return "requirement " + tool + " { action " + action + "; resource path(args.path) }\n"


@dataclass
class StrictWorld:
    """The running kernel and broker, the share, and the calls to make."""

    env: Brokered
    share: Path

    def calls(self) -> list[dict[str, Any]]:
        """(name, arguments, expected outcome) for every kind of answer, in order."""
        share = self.share
        return [
            {"name": "strict.stat", "arguments": {"path": "/public/a"}, "outcome": "succeeded"},
            {"name": "strict.stat", "arguments": {"path": "/private/a"}, "outcome": "denied"},
            {"name": "strict.stat", "arguments": {"path": "/public/fail"}, "outcome": "failed"},
            {
                "name": "fs.read_text_file",
                "arguments": {"path": f"{share}/public/a.txt"},
                "outcome": "succeeded",
            },
            {
                "name": "fs.read_text_file",
                "arguments": {"path": f"{share}/private/secret.txt"},
                "outcome": "denied",
            },
            {
                "name": "fs.read_text_file",
                "arguments": {"path": f"{share}/public/missing.txt"},
                "outcome": "failed",
            },
            {"name": "fs.read_text_file", "arguments": {"path": 42}, "outcome": "failed"},
            {
                "name": "fs.get_file_info",
                "arguments": {"path": f"{share}/private"},
                "outcome": "denied",
            },
        ]


@contextlib.asynccontextmanager
async def strict_world(tmp: Path) -> AsyncIterator[StrictWorld]:
    """Start server-filesystem behind the broker beside ``strict.stat``; yield the world."""
    share = tmp / "share"
    (share / "public").mkdir(parents=True)
    (share / "private").mkdir()
    (share / "public" / "a.txt").write_text("public words\n", encoding="utf-8")
    (share / "private" / "secret.txt").write_text("top secret\n", encoding="utf-8")
    toml = stdio_upstream("fs", node(), [str(npm_server("server-filesystem")), str(share)])
    rules = (
        "namespace fs\n"
        + _req("fs.read_text_file", "read")
        + _req("fs.get_file_info", "read")
        + f'permit read on "{share}/public/**"\n'
        + f'forbid * on "{share}/private/**"\n'
        + "namespace strict\n"
        + _req("strict.stat", "read")
        + 'permit read on "/public/**"\n'
        + 'forbid * on "/private/**"\n'
        + "toolpolicy run {\n  mode open\n  managed fs.*, strict.*\n}\n"
    )
    async with brokered(tmp, toml, rules) as env:
        env.registry.register(strict_tool())
        yield StrictWorld(env, share)
