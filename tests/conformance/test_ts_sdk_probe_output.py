"""The TypeScript SDK probe's answer reaches the client column whole, however large.

``ts_sdk_client.mjs`` prints one JSON document with every call's result of a
turn. It called ``process.exit()`` right after ``process.stdout.write()``; Node
writes a pipe asynchronously, so a document over the pipe's buffer was cut at
128 KiB (exit code 0), no line parsed, and the column answered "the TS SDK
client gave no answer" for every call of the turn — a file read of a few
hundred KiB failed every cell beside it. Measured with the pinned SDK over HTTP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sharedos.bridge import open_turn
from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.catalog.definition import ToolMetadata
from sharedos.conformance.columns.client import _ts_sdk
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.harness.paths import node22
from sharedos.kernel import Kernel, RuntimeHost
from sharedos.kernel.context import AccessContext
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.policy import compile_source

pytestmark = pytest.mark.anyio

SIZE = 400_000


async def _big(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult.text("B" * SIZE + hctx.resource)


async def test_a_large_answer_reaches_the_column_whole(tmp_path: Path) -> None:
    if not node22().is_file():
        pytest.skip(".tools lacks the pinned Node (run `make tools`)")
    policy = compile_source(
        "namespace big\n"
        "requirement big.read { action read; resource path(args.path) }\n"
        'permit read on "/public/**"\n'
        "toolpolicy run {\n  mode open\n  managed big.*\n}\n",
        "big.sos",
    )
    registry = ToolRegistry()
    registry.register(
        ToolDefinition(
            name="big.read",
            description="Answers 400,000 bytes and the path.",
            input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
            metadata=ToolMetadata(namespace="big", source="tests"),
            handler=_big,
        )
    )
    store = SqliteEvidenceStore(tmp_path / "evidence.sqlite")
    try:
        host = RuntimeHost(Kernel(policy, registry), store)
        ctx = AccessContext(principal="alice")
        calls = [{"name": "big.read", "arguments": {"path": "/public/a"}}]
        async with open_turn(host, ctx, policy.tool_policies["run"]) as turn:
            (answer,) = await _ts_sdk(turn, calls, tmp_path)
    finally:
        store.close()
    assert answer["ok"], answer
    (block,) = answer["result"]["content"]
    assert block["text"] == "B" * SIZE + "/public/a"
