"""Pi (pi-ai) message-format tool-call shape.

Follows ``@earendil-works/pi-ai`` 1.6.0 (``dist/types.d.ts``): a ``Context``
``{systemPrompt?, messages, tools?}`` with tools ``{name, description,
parameters}``; an ``AssistantMessage`` whose ``content`` holds ``toolCall``
items ``{"type": "toolCall", "id", "name", "arguments"}`` and whose
``stopReason`` is ``"toolUse"``; and one ``ToolResultMessage`` per call
``{"role": "toolResult", "toolCallId", "toolName", "content": [{"type":
"text", "text"}], "isError", "timestamp"}``.

pi-ai tool names are plain strings (each provider adapter maps them for its
own API), so names travel unchanged, dots and all.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from sharedos.harness.shapes.neutral import (
    Call,
    Result,
    ToolSpec,
    Turn,
    dumps,
    specs_from_wire,
    validated,
)

PI_AI_VERSION = "1.6.0"


class PiTool(BaseModel):
    """``Tool``: name, description, parameters (a JSON schema)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str
    parameters: dict[str, Any]


class TextContent(BaseModel):
    """``TextContent``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str
    textSignature: str | None = None


class ImageContent(BaseModel):
    """``ImageContent``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["image"]
    data: str
    mimeType: str


class ThinkingContent(BaseModel):
    """``ThinkingContent``."""

    model_config = ConfigDict(extra="allow")

    type: Literal["thinking"]
    thinking: str


class ToolCall(BaseModel):
    """``ToolCall`` content item of an assistant message."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["toolCall"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: dict[str, Any]
    thoughtSignature: str | None = None
    namespace: str | None = None
    argumentsError: str | None = None


class PiUsage(BaseModel):
    """``Usage`` (a scripted model reports zeros)."""

    model_config = ConfigDict(extra="allow")

    input: int
    output: int
    cacheRead: int
    cacheWrite: int
    totalTokens: int
    cost: dict[str, Any]


class UserMessage(BaseModel):
    """``UserMessage``."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user"]
    content: str | list[TextContent | ImageContent]
    timestamp: int


class AssistantMessage(BaseModel):
    """``AssistantMessage``."""

    model_config = ConfigDict(extra="allow")

    role: Literal["assistant"]
    content: list[TextContent | ThinkingContent | ToolCall]
    api: str
    provider: str
    model: str
    usage: PiUsage
    stopReason: Literal["pending", "stop", "length", "toolUse", "error", "aborted", "deferred"]
    timestamp: int


class ToolResultMessage(BaseModel):
    """``ToolResultMessage``."""

    model_config = ConfigDict(extra="allow")

    role: Literal["toolResult"]
    toolCallId: str
    toolName: str
    content: list[TextContent | ImageContent]
    isError: bool
    timestamp: int


PiMessage = UserMessage | AssistantMessage | ToolResultMessage


class PiContext(BaseModel):
    """``Context``: what a Pi agent hands the model provider each step."""

    model_config = ConfigDict(extra="allow")

    systemPrompt: str | None = None
    messages: list[PiMessage]
    tools: list[PiTool] = Field(default_factory=list)


_ZERO_USAGE: dict[str, Any] = {
    "input": 0,
    "output": 0,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 0,
    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _to_pi_content(content: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in content:
        if block.get("type") == "text":
            out.append({"type": "text", "text": str(block.get("text", ""))})
        elif block.get("type") == "image":
            out.append(
                {
                    "type": "image",
                    "data": str(block.get("data", "")),
                    "mimeType": str(block.get("mimeType", "")),
                }
            )
        else:
            out.append({"type": "text", "text": dumps(block)})
    return out


class PiShape:
    """pi-ai messages: ``toolCall`` content items and ``toolResult`` messages."""

    name: ClassVar[str] = "pi"
    label: ClassVar[str] = "Pi (pi-ai)"
    api: ClassVar[str] = f"pi-ai-{PI_AI_VERSION}"
    carries_error_flag: ClassVar[bool] = True

    def wire_tool_name(self, raw: str) -> str:
        """Unchanged: pi-ai names are plain strings."""
        return raw

    def tools_wire(self, tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
        """``Tool`` objects with canonical names."""
        return [
            PiTool(name=t.name, description=t.description, parameters=t.input_schema).model_dump(
                mode="json"
            )
            for t in tools
        ]

    def tools_from_wire(self, wire: Any) -> list[ToolSpec]:
        """Canonical specs."""
        return specs_from_wire(
            wire, PiTool, lambda t, _i: ToolSpec(t.name, t.description, dict(t.parameters))
        )

    def turn_wire(self, turn: Turn, *, model: str, seq: int) -> dict[str, Any]:
        """An ``AssistantMessage``: toolCall items with ``stopReason: toolUse``, or text with ``stop``."""
        content: list[dict[str, Any]] = [
            {"type": "toolCall", "id": c.call_id, "name": c.name, "arguments": c.arguments}
            for c in turn.calls
        ]
        if not turn.calls:
            content.append({"type": "text", "text": turn.text})
        message = {
            "role": "assistant",
            "content": content,
            "api": "sharedos-scripted",
            "provider": "sharedos",
            "model": model,
            "responseId": f"pi_{seq:04d}",
            "usage": _ZERO_USAGE,
            "stopReason": "toolUse" if turn.calls else "stop",
            "timestamp": _now_ms(),
        }
        validated(AssistantMessage, message, "assistant message")
        return message

    def turn_from_wire(self, wire: Any) -> Turn:
        """toolCall items, names exactly as given."""
        msg: AssistantMessage = validated(AssistantMessage, wire, "assistant message")
        calls = tuple(
            Call(c.id, c.name, dict(c.arguments)) for c in msg.content if isinstance(c, ToolCall)
        )
        text = "".join(c.text for c in msg.content if isinstance(c, TextContent))
        return Turn(calls, text)

    def results_wire(
        self, results: Sequence[Result], names: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """One ``toolResult`` message per call."""
        out = []
        for r in results:
            message = {
                "role": "toolResult",
                "toolCallId": r.call_id,
                "toolName": names.get(r.call_id, ""),
                "content": _to_pi_content(r.content),
                "isError": bool(r.is_error),
                "timestamp": _now_ms(),
            }
            validated(ToolResultMessage, message, "toolResult message")
            out.append(message)
        return out

    def results_from_wire(self, wire: Any) -> list[Result]:
        """The trailing run of ``toolResult`` messages."""
        if not isinstance(wire, list):
            return []
        trailing: list[Result] = []
        for item in reversed(wire):
            if not (isinstance(item, dict) and item.get("role") == "toolResult"):
                break
            msg: ToolResultMessage = validated(ToolResultMessage, item, "toolResult message")
            content = tuple(c.model_dump(mode="json", exclude_none=True) for c in msg.content)
            trailing.append(Result(msg.toolCallId, content, msg.isError))
        return list(reversed(trailing))

    def result_names(self, wire: Any) -> dict[str, str]:
        """call id -> ``toolName`` of the trailing toolResult messages (Pi carries the name back)."""
        names: dict[str, str] = {}
        for item in reversed(wire if isinstance(wire, list) else []):
            if not (isinstance(item, dict) and item.get("role") == "toolResult"):
                break
            names[str(item.get("toolCallId"))] = str(item.get("toolName"))
        return names

    def request_wire(
        self, *, model: str, tools: list[dict[str, Any]], history: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """A pi-ai ``Context`` (the declared model travels beside it, as in ``stream(model, context)``)."""
        ctx = {"messages": history, "tools": tools}
        validated(PiContext, ctx, "context")
        return ctx

    def request_from_wire(self, wire: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(tools, messages) of a validated Context."""
        validated(PiContext, wire, "context")
        return list(wire.get("tools", [])), list(wire["messages"])

    def history_from_response(self, wire: Any) -> list[dict[str, Any]]:
        """The assistant message itself joins the conversation."""
        validated(AssistantMessage, wire, "assistant message")
        return [dict(wire)]

    def opening(self, text: str) -> list[dict[str, Any]]:
        """One ``UserMessage``."""
        return [{"role": "user", "content": text, "timestamp": _now_ms()}]
