"""Messages on the stdio relay larger than its line cap (64 MiB) once ASCII-escaped.

Finding: the relay caps every line at ``MAX_MESSAGE_BYTES`` (64 MiB), both
ways. A call's result is written to the channel as ASCII JSON, where a
control character or a non-ASCII one takes six bytes (``\\u00e9``): a result
of 12 MB of text could be a 70 MB line. The bridge process then dropped the
channel ("the delimiter was not found"): the harness got ``failed`` /
``evidence_unavailable`` for a call the evidence records as succeeded, and
every later call of the turn was refused unrecorded as if the host had gone.
The same held the other way for a turn whose ``max_frame_bytes`` let a frame
through that is more than 64 MiB on the channel: the host dropped the
bridge process. The host is the trusted side: the bridge reads what it sends
without a cap; the host reads a bridge's messages up to what a frame the
bridge accepted can become (``bridge_message_bytes``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.limits import TransportLimits
from sharedos.bridge.relay_wire import MAX_MESSAGE_BYTES, encode
from sharedos.bridge.turnfile import StdioLaunch
from sharedos.catalog.definition import ToolDefinition, ToolMetadata
from sharedos.kernel.context import AccessContext
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.kernel.kernel import Kernel
from sharedos.kernel.runtime import RuntimeHost
from sharedos.policy import compile_paths
from sharedos.toolpolicy import ToolPolicy
from tests.bridge.conftest import DATA, Runtime
from tests.bridge.rawwire import StdioBridge, call, frame

pytestmark = pytest.mark.anyio

#: a result text whose relay line is past the cap: "\x01" is six bytes there ("\u0001")
_BIG = MAX_MESSAGE_BYTES // 6 + 1024 * 1024

_RULES = """namespace big
requirement big.text { action call; resource "/big/text" }
requirement big.echo { action call; resource "/big/echo" }
permit call on "/big/**"
"""

_POLICY = ToolPolicy(name="relay-large", mode="open", managed=("files.*", "big.*"))


async def _big_text(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult.text("\x01" * _BIG)


async def _echo_size(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult.text(str(len(str(args.get("text", "")))))


def _tool(name: str, handler: Any) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=f"{name}: a large message on the relay",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
        metadata=ToolMetadata(namespace="big", source="tests"),
        handler=handler,
    )


def _host(runtime: Runtime, tmp: Path) -> RuntimeHost:
    registry = runtime.host.kernel.registry
    registry.register(_tool("big.text", _big_text))
    registry.register(_tool("big.echo", _echo_size))
    rules = tmp / "big.sos"
    rules.write_text(_RULES)
    policy = compile_paths([DATA / "files.sos", rules])
    return RuntimeHost(Kernel(policy, registry), runtime.evidence)


def _answer(bridge: StdioBridge, reply: dict[str, Any]) -> dict[str, Any]:
    assert "result" in reply, (reply, bridge.stderr)
    result: dict[str, Any] = reply["result"]
    return result


async def test_a_result_past_the_relay_cap_reaches_the_harness_and_the_turn_goes_on(
    runtime: Runtime, alice: AccessContext, tmp_path: Path
) -> None:
    host = _host(runtime, tmp_path)
    result = {"content": [{"type": "text", "text": "\x01" * _BIG}], "isError": False}
    assert len(encode(result)) > MAX_MESSAGE_BYTES  # the premise: past the old cap
    async with open_turn(host, alice, _POLICY, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.send_line(frame(call(1, "big.text", {}, modern=True)))
            big = _answer(bridge, await bridge.wait_reply(1, timeout=120))
            await bridge.send_line(
                frame(call(2, "files.read", {"path": "/public/a.txt"}, modern=True))
            )
            after = _answer(bridge, await bridge.wait_reply(2))
        finally:
            await bridge.process.aclose()
    assert big["isError"] is False, str(big)[:500]
    assert big["content"][0]["text"] == "\x01" * _BIG
    assert after["isError"] is False, after
    records = runtime.evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.outcome)) for r in records] == [
        ("big.text", "succeeded"),
        ("files.read", "succeeded"),
    ]


async def test_a_frame_the_turn_accepts_is_not_too_large_for_the_relay(
    runtime: Runtime, alice: AccessContext, tmp_path: Path
) -> None:
    host = _host(runtime, tmp_path)
    text = "é" * (MAX_MESSAGE_BYTES // 6 + 1024 * 1024)  # 2 bytes in the frame, 6 on the relay
    line = frame(call(1, "big.echo", {"text": text}, modern=True))
    limits = TransportLimits(max_frame_bytes=len(line) + 1024)
    launch = StdioLaunch(limits=limits)
    async with open_turn(host, alice, _POLICY, transport="stdio", stdio=launch) as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.send_line(line)
            echoed = _answer(bridge, await bridge.wait_reply(1, timeout=120))
            await bridge.send_line(
                frame(call(2, "files.read", {"path": "/public/a.txt"}, modern=True))
            )
            after = _answer(bridge, await bridge.wait_reply(2))
        finally:
            await bridge.process.aclose()
    assert echoed["isError"] is False, echoed
    assert json.loads(json.dumps(echoed["content"][0]["text"])) == str(len(text))
    assert after["isError"] is False, after
