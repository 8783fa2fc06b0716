"""A handler's progress and log notifications reach the client, whatever text they hold.

Finding (fixed): a handler's progress message or log data holding a lone
surrogate (a file name decoded with ``surrogateescape``: text no JSON encoder
can carry) made the SDK fail to serialize the notification. Over HTTP the
call's stream broke ("Error in SSE writer" with a traceback in the host log on
2025-11-25, a message the client could not parse on 2026-07-28) and the answer
of a call recorded ``succeeded`` never arrived; over stdio the whole bridge
exited 2 ("unhandled errors in a TaskGroup"), every later call refused at the
pipe. Tool results were already guarded (``sharedos.bridge.results``); the
notifications now carry such text backslash-escaped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.hooks import carriable
from sharedos.catalog.definition import ToolDefinition, ToolMetadata
from sharedos.catalog.registry import ToolRegistry
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.kernel.context import AccessContext
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.kernel.kernel import Kernel
from sharedos.kernel.runtime import RuntimeHost
from sharedos.toolpolicy import ToolPolicy
from tests.bridge.conftest import compile_rules, http_client, make_sandbox
from tests.bridge.rawwire import MODERN_META, StdioBridge, call, frame

pytestmark = pytest.mark.anyio

POLICY = ToolPolicy(name="bridge-hooks", mode="open", managed=("files.*", "slow.*"))
#: what a handler might say of a file whose name is not UTF-8 (os.fsdecode of b"\xff.txt")
UNDECODED = "scanning \udcff.txt"
SHOWN = "scanning \\udcff.txt"


async def _scan(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    if hctx.progress is not None:
        await hctx.progress(0.5, 1.0, UNDECODED)
    if hctx.log is not None:
        await hctx.log("info", {"file": UNDECODED, UNDECODED: [UNDECODED]})
    return HandlerResult.text("done")


def _host(tmp: Path) -> tuple[RuntimeHost, SqliteEvidenceStore]:
    from sharedos.tools.files import register_files_tools

    registry = ToolRegistry()
    register_files_tools(registry, make_sandbox(tmp / "sandbox"))
    registry.register(
        ToolDefinition(
            name="slow.wait",  # the name slow.sos permits
            description="Scan the files, reporting progress and logging as it goes.",
            input_schema={"type": "object"},
            metadata=ToolMetadata(namespace="slow", source="tests"),
            handler=_scan,
        )
    )
    evidence = SqliteEvidenceStore(tmp / "evidence.db")
    return RuntimeHost(Kernel(compile_rules("files.sos", "slow.sos"), registry), evidence), evidence


def test_carriable_escapes_only_what_utf8_cannot_encode() -> None:
    assert carriable("plain") == "plain"
    assert carriable("café") == "café"
    assert carriable(UNDECODED) == SHOWN
    assert carriable({UNDECODED: [1, UNDECODED, None]}) == {SHOWN: [1, SHOWN, None]}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_progress_and_logs_with_undecodable_text_keep_the_call(
    tmp_path: Path, mode: str
) -> None:
    host, evidence = _host(tmp_path)
    alice = AccessContext(principal="alice")
    progress: list[str | None] = []
    logs: list[Any] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    async def on_log(params: Any) -> None:
        logs.append(params.data)

    async with open_turn(host, alice, POLICY) as turn:
        assert turn.url is not None
        with anyio.fail_after(20):
            async with http_client(
                turn.url, turn.token, mode=mode, logging_callback=on_log
            ) as client:
                result = await client.call_tool("slow.wait", {}, progress_callback=on_progress)
                after = await client.call_tool("files.read", {"path": "/public/a.txt"})
    assert not result.is_error and result.content[0].text == "done"  # type: ignore[union-attr]
    assert not after.is_error
    assert progress == [SHOWN]
    if mode == "legacy":  # 2026-07-28 sends a handler's logs only to a request that opts in
        assert logs == [{"file": SHOWN, SHOWN: [SHOWN]}]
    records = evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.outcome)) for r in records] == [
        ("slow.wait", "succeeded"),
        ("files.read", "succeeded"),
    ]


async def test_stdio_progress_with_undecodable_text_keeps_the_bridge(tmp_path: Path) -> None:
    host, evidence = _host(tmp_path)
    alice = AccessContext(principal="alice")
    async with open_turn(host, alice, POLICY, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            meta = {**MODERN_META, "progressToken": "p1"}
            scan = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "slow.wait", "arguments": {}, "_meta": meta},
            }
            await bridge.send_line(frame(scan))
            answer = await bridge.wait_reply(1, timeout=15)
            await bridge.send_line(
                frame(call(2, "files.read", {"path": "/public/a.txt"}, modern=True))
            )
            after = await bridge.wait_reply(2, timeout=15)
        finally:
            await bridge.kill()
    assert answer["result"]["content"] == [{"type": "text", "text": "done"}], answer
    assert after["result"]["isError"] is False
    notes = [m for m in bridge.replies if m.get("method") == "notifications/progress"]
    assert [n["params"]["message"] for n in notes] == [SHOWN]
    assert bridge.unparsed == []
    records = evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.outcome)) for r in records] == [
        ("slow.wait", "succeeded"),
        ("files.read", "succeeded"),
    ]
