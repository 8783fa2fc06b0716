"""dsh ``tool/call`` / ``tool/result``: DeepSeek Harness 0.2.1-rc.2's own session events.

Measured on dsh 0.2.1-rc.2 (its session log, ``sessions/…/session.v4.jsonl.zstd``,
for real turns against SharedOS's turn bridge; a recorded pair is kept in
``tests/data/harness/dsh/``) and read in its source (``packages/mcp/mcp-client``
and the session packages of the public forks). A session is a log of events
``{type, seq, time, data, …}``; ``seq`` numbers the log, ``time`` is epoch
milliseconds. A tool call is::

    {"type": "tool/call", "seq": 16, "time": …,
     "data": {"turn": 1, "step": 1, "callId": "toolu_…", "name": "…",
              "arguments": "{\\"path\\":\\"/public/a.txt\\"}"}}

with ``arguments`` the model's JSON *text* (dsh parses it when it runs the
tool), and it is answered by::

    {"type": "tool/result", "seq": 19, "time": …,
     "data": {"turn": 1, "step": 1,
              "message": {"role": "tool", "source": {"kind": "tool", "callId": "toolu_…"},
                          "toolCallId": "toolu_…", "content": [{"type": "text", "text": …}],
                          "isError": false, "id": "<uuid>"},
              "error"?: {…}, "meta"?: …},
     "sourceEventSeqs": [16], "surfaceOp": "append"}

A refusal is a result with ``isError: true`` (an MCP ``isError`` result reaches
dsh's model as ``is_error: true`` and the text ``Error: <message>``). Both
events are modelled with ``extra="forbid"`` below, so a field dsh adds or drops
shows up as a ``ShapeError``, both ways.

What this shape does *not* reproduce, on purpose: dsh's model-facing wire is
Anthropic Messages (``POST /v1/messages``), which the ``anthropic`` shape
already speaks, and dsh names an MCP tool ``mcp__<server>__<raw>`` normalized
to ``[A-Za-z0-9_-]{1,64}`` plus an identity hash (its registry maps the name
back; a name it did not register is refused client-side, measured in the mcp
column). The scripted column must carry malformed and unpublished names to the
kernel unchanged, so here ``name`` is the injective wire escape of the raw name
(``sharedos.harness.shapes.wirenames``), as for the other shapes; the real
names are checked in the mcp column (``mcp/dsh/http|stdio``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from sharedos.harness.shapes.neutral import (
    Call,
    Result,
    ShapeError,
    ToolSpec,
    Turn,
    specs_from_wire,
    validated,
)
from sharedos.harness.shapes.wirenames import name_for_kernel, raw_from_wire, wire_name

#: The dsh release whose session events this module reproduces.
DSH_VERSION = "0.2.1-rc.2"
#: The session log format version dsh 0.2.1-rc.2 writes (``{"type": "session", "version": 4}``).
SESSION_VERSION = 4


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolDefinition(_Strict):
    """A tool as dsh registers it (``ctx.tools.register``): name, description, parameters."""

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any]


class ToolCallData(_Strict):
    """``data`` of a ``tool/call`` event."""

    turn: int
    step: int
    callId: str = Field(min_length=1)
    name: str = Field(min_length=1)
    #: the model's arguments as JSON text
    arguments: str


class ToolCallEvent(_Strict):
    """A ``tool/call`` session event."""

    type: Literal["tool/call"]
    seq: int = Field(ge=0)
    time: int = Field(ge=0)
    data: ToolCallData


class ToolSource(_Strict):
    """``message.source`` of a tool result: which call it answers."""

    kind: Literal["tool"]
    callId: str


class ToolMessage(_Strict):
    """``data.message`` of a ``tool/result`` event."""

    role: Literal["tool"]
    source: ToolSource
    toolCallId: str
    content: list[dict[str, Any]]
    isError: bool
    id: str


class ToolResultData(BaseModel):
    """``data`` of a ``tool/result`` event (``error`` and ``meta`` only when present)."""

    model_config = ConfigDict(extra="forbid")

    turn: int
    step: int
    message: ToolMessage
    error: dict[str, str] | None = None
    meta: Any = None


class ToolResultEvent(_Strict):
    """A ``tool/result`` session event."""

    type: Literal["tool/result"]
    seq: int = Field(ge=0)
    time: int = Field(ge=0)
    data: ToolResultData
    sourceEventSeqs: list[int]
    surfaceOp: Literal["append"]


class TextMessage(BaseModel):
    """An ``assistant/message`` or ``user/message`` (only the fields this shape reads)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["assistant/message", "user/message"]
    seq: int = Field(ge=0)
    time: int = Field(ge=0)
    data: dict[str, Any]


class ModelStep(_Strict):
    """One model step: its ``tool/call`` events, or the assistant's final message."""

    events: list[ToolCallEvent] | TextMessage


def _now_ms() -> int:
    return int(time.time() * 1000)


def _message_text(data: Mapping[str, Any]) -> str:
    message = data.get("message", data)
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, list):
        return ""
    return "".join(
        str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"
    )


def _arguments(text: str, call_id: str) -> dict[str, Any]:
    """The arguments JSON text of one call, which must hold a JSON object."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ShapeError(f"tool/call {call_id}: arguments is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ShapeError(f"tool/call {call_id}: arguments must be a JSON object")
    return value


class DshShape:
    """dsh 0.2.1-rc.2 session events: ``tool/call`` answered by ``tool/result``."""

    name: ClassVar[str] = "dsh"
    label: ClassVar[str] = "dsh tool/call"
    api: ClassVar[str] = f"dsh-session-v{SESSION_VERSION}-{DSH_VERSION}"
    carries_error_flag: ClassVar[bool] = True

    def __init__(self) -> None:
        # Harness side only (the driver, playing dsh): the calls it has appended to its
        # session, so each result names its call's seq, as dsh's ``sourceEventSeqs`` do.
        self._call_seqs: dict[str, tuple[int, int, int]] = {}

    def wire_tool_name(self, raw: str) -> str:
        """The injective escape of the raw name (see the module doc for why not dsh's hash)."""
        return wire_name(raw)

    def tools_wire(self, tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
        """Tool definitions as dsh registers them."""
        return [
            ToolDefinition(
                name=wire_name(t.name), description=t.description, parameters=t.input_schema
            ).model_dump(mode="json")
            for t in tools
        ]

    def tools_from_wire(self, wire: Any) -> list[ToolSpec]:
        """Canonical specs; a name that is not a SharedOS wire name is a ``ShapeError``."""

        def spec(tool: ToolDefinition, i: int) -> ToolSpec:
            raw = raw_from_wire(tool.name)
            if raw is None:
                raise ShapeError(f"tools[{i}].name {tool.name!r} is not a SharedOS wire name")
            return ToolSpec(raw, tool.description, dict(tool.parameters))

        return specs_from_wire(wire, ToolDefinition, spec)

    def turn_wire(self, turn: Turn, *, model: str, seq: int) -> dict[str, Any]:
        """Step ``seq``: one ``tool/call`` event per call, or the final assistant message."""
        now = _now_ms()
        base = seq * 1000
        events: Any
        if turn.calls:
            events = [
                {
                    "type": "tool/call",
                    "seq": base + i,
                    "time": now,
                    "data": {
                        "turn": 1,
                        "step": seq,
                        "callId": c.call_id,
                        "name": wire_name(c.name),
                        "arguments": json.dumps(
                            c.arguments, ensure_ascii=False, separators=(",", ":")
                        ),
                    },
                }
                for i, c in enumerate(turn.calls)
            ]
        else:
            events = {
                "type": "assistant/message",
                "seq": base,
                "time": now,
                "data": {
                    "turn": 1,
                    "step": seq,
                    "message": {
                        "role": "assistant",
                        "content": [{"type": "text", "text": turn.text}],
                        "source": {"kind": "model", "model": model},
                        "id": str(uuid.uuid4()),
                    },
                },
            }
        validated(ModelStep, {"events": events}, "model step")
        return {"events": events}

    def turn_from_wire(self, wire: Any) -> Turn:
        """The calls (raw names decoded, arguments parsed) or the final text of one step."""
        parsed: ModelStep = validated(ModelStep, wire, "model step")
        if isinstance(parsed.events, TextMessage):
            return Turn((), _message_text(parsed.events.data))
        calls = []
        for event in parsed.events:
            d = event.data
            self._call_seqs[d.callId] = (d.turn, d.step, event.seq)
            calls.append(Call(d.callId, name_for_kernel(d.name), _arguments(d.arguments, d.callId)))
        return Turn(tuple(calls))

    def result_event(self, result: Result, *, seq: int, now: int) -> dict[str, Any]:
        """The ``tool/result`` event answering one call (``isError`` set on refusals)."""
        turn, step, call_seq = self._call_seqs.get(result.call_id, (1, 0, 0))
        event = {
            "type": "tool/result",
            "seq": seq,
            "time": now,
            "data": {
                "turn": turn,
                "step": step,
                "message": {
                    "role": "tool",
                    "source": {"kind": "tool", "callId": result.call_id},
                    "toolCallId": result.call_id,
                    "content": [dict(b) for b in result.content],
                    "isError": bool(result.is_error),
                    "id": str(uuid.uuid4()),
                },
            },
            "sourceEventSeqs": [call_seq],
            "surfaceOp": "append",
        }
        validated(ToolResultEvent, event, "tool/result")
        return event

    def results_wire(
        self, results: Sequence[Result], names: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """One ``tool/result`` event per call, numbered after the calls they answer."""
        now = _now_ms()
        last = max((s for _, _, s in self._call_seqs.values()), default=0)
        return [self.result_event(r, seq=last + 1 + i, now=now) for i, r in enumerate(results)]

    def results_from_wire(self, wire: Any) -> list[Result]:
        """The trailing run of ``tool/result`` events of the session log."""
        if not isinstance(wire, list):
            return []
        trailing: list[Result] = []
        for item in reversed(wire):
            if not (isinstance(item, dict) and item.get("type") == "tool/result"):
                break
            event: ToolResultEvent = validated(ToolResultEvent, item, "tool/result")
            msg = event.data.message
            trailing.append(Result(msg.toolCallId, tuple(msg.content), msg.isError))
        return list(reversed(trailing))

    def request_wire(
        self, *, model: str, tools: list[dict[str, Any]], history: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The model's input: dsh's registered tools and its session log so far."""
        return {"model": model, "tools": tools, "events": history}

    def request_from_wire(self, wire: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(tool definitions, session events)."""
        if not isinstance(wire, dict) or not isinstance(wire.get("events"), list):
            raise ShapeError("dsh request: expected {'tools': [...], 'events': [...]}")
        tools = wire.get("tools", [])
        if not isinstance(tools, list):
            raise ShapeError("dsh request: tools must be a list")
        return list(tools), list(wire["events"])

    def history_from_response(self, wire: Any) -> list[dict[str, Any]]:
        """The step's events join the session log."""
        parsed: ModelStep = validated(ModelStep, wire, "model step")
        events = wire["events"]
        return list(events) if isinstance(parsed.events, list) else [dict(events)]

    def opening(self, text: str) -> list[dict[str, Any]]:
        """The session log a turn starts with: the user's message, as dsh records it."""
        return [
            {
                "type": "user/message",
                "seq": 0,
                "time": _now_ms(),
                "data": {
                    "content": [{"type": "text", "text": text}],
                    "source": {"kind": "user"},
                    "role": "user",
                    "id": str(uuid.uuid4()),
                },
                "surfaceOp": "append",
            }
        ]
