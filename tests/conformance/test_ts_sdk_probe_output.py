"""The TypeScript SDK probe's answer reaches the client column whole, however large.

``ts_sdk_client.mjs`` prints one JSON document with every call's result of a
turn. It called ``process.exit()`` right after ``process.stdout.write()``; Node
writes a pipe asynchronously, so a document over the pipe's buffer was cut at
128 KiB (exit code 0), no line parsed, and the column answered "the TS SDK
client gave no answer" for every call of the turn — a file read of a few
hundred KiB failed every cell beside it. Measured with the pinned SDK over HTTP.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from sharedos.bridge import open_turn
from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.catalog.definition import ToolMetadata
from sharedos.conformance.columns.client import TS_CLIENT, _ts_sdk
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.harness.paths import node22, tools_dir
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
            (answer,) = await _ts_sdk(turn, calls, tmp_path, 300.0)
    finally:
        store.close()
    assert answer["ok"], answer
    (block,) = answer["result"]["content"]
    assert block["text"] == "B" * SIZE + "/public/a"


async def _slow(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    await anyio.sleep(3.0)
    return HandlerResult.text("late " + hctx.resource)


async def test_each_request_waits_as_long_as_the_client_is_told(tmp_path: Path) -> None:
    """Under load (nice 19 beside two CPU hogs) a stdio bridge's start and a call's answer
    took longer than the SDK's own 60 s request limit: the client gave up (``Request timed
    out``), and the column graded the rows not exercised, though the kernel had recorded
    the call. The probe now takes each request's limit from its spec (``timeoutMs``): shown
    with a limit shorter than a 3 s answer, which the SDK's 60 s default waited for."""
    if not node22().is_file():
        pytest.skip(".tools lacks the pinned Node (run `make tools`)")
    policy = compile_source(
        "namespace slow\n"
        "requirement slow.read { action read; resource path(args.path) }\n"
        'permit read on "/public/**"\n'
        "toolpolicy run {\n  mode open\n  managed slow.*\n}\n",
        "slow.sos",
    )
    registry = ToolRegistry()
    registry.register(
        ToolDefinition(
            name="slow.read",
            description="Answers after 3 s.",
            input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
            metadata=ToolMetadata(namespace="slow", source="tests"),
            handler=_slow,
        )
    )
    store = SqliteEvidenceStore(tmp_path / "evidence.sqlite")
    env = {**os.environ, "SHAREDOS_NODE_MODULES": str(tools_dir())}
    try:
        host = RuntimeHost(Kernel(policy, registry), store)
        ctx = AccessContext(principal="alice")
        async with open_turn(host, ctx, policy.tool_policies["run"]) as turn:
            spec = {
                "transport": "http",
                "url": turn.url,
                "headers": turn.headers(),
                "timeoutMs": 500,
                "calls": [{"name": "slow.read", "arguments": {"path": "/public/a"}}],
            }
            proc = await anyio.run_process(
                [str(node22()), str(TS_CLIENT)],
                input=json.dumps(spec).encode(),
                check=False,
                env=env,
            )
    finally:
        store.close()
    out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    # the client gave up at its limit: on the call, or already at the connect on a busy
    # machine (a limit of 0.5 s); with the SDK's default it got the answer after 3 s
    gave_up = out.get("fatal") or " ".join(r["error"]["message"] for r in out["results"])
    assert "timed out" in gave_up.lower(), out


async def test_the_column_gives_the_client_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The TS SDK probe's requests, and the Inspector's connect, get the column's deadline
    (``--timeout``), not a limit of their own; so does each client process."""
    from sharedos.conformance.columns import client

    seen: list[tuple[list[str], dict[str, Any] | None]] = []

    async def run_process(argv: list[str], **kwargs: Any) -> Any:
        data = kwargs.get("input")
        seen.append((argv, json.loads(data) if data else None))
        return subprocess.CompletedProcess(argv, 0, b'{"result": {}, "results": []}', b"")

    monkeypatch.setattr(client.anyio, "run_process", run_process)
    turn = SimpleNamespace(transport="stdio", command=["sharedos", "bridge", "--stdio"])
    call = {"name": "files.read", "arguments": {"path": "/public/a.txt"}}
    await client._ts_sdk(turn, [call], tmp_path, 900.0)
    await client._inspector(turn, call, tmp_path, 900.0)
    (_, spec), (argv, _) = seen
    assert spec is not None and spec["timeoutMs"] == 900_000
    assert argv[argv.index("--connect-timeout") + 1] == "900000"
