"""Anthropic Messages API tool-call shape.

Requests carry tools ``{"name", "description", "input_schema"}``; an assistant
message carries ``tool_use`` blocks ``{"type", "id", "name", "input"}``; the
next user message carries ``tool_result`` blocks ``{"type", "tool_use_id",
"content", "is_error"}``. Tool definition names must match
``^[a-zA-Z0-9_-]{1,128}$``: names go through ``wirenames.wire_name`` (equal to
``portable_tool_name`` for published names) and back exactly. A published
name whose escaped form exceeds 128 characters cannot be offered on this wire
and is refused with a ``ShapeError`` (never truncated). The 128-character rule
is Anthropic's rule for tool *definitions*; a ``tool_use`` name is model output
and is only held to the character set, so a long malformed name a model guesses
is still carried to the kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from sharedos.harness.shapes.neutral import (
    Call,
    Result,
    ShapeError,
    ToolSpec,
    Turn,
    dumps,
    specs_from_wire,
    validated,
)
from sharedos.harness.shapes.wirenames import name_for_kernel, raw_from_wire, wire_name

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,128}$"
TOOL_USE_ID_PATTERN = r"^[a-zA-Z0-9_-]+$"


class AnthropicTool(BaseModel):
    """A client tool definition."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    input_schema: dict[str, Any]


class TextBlock(BaseModel):
    """A ``text`` content block."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class Base64Source(BaseModel):
    """An image's base64 source."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["base64"]
    media_type: str
    data: str


class ImageBlock(BaseModel):
    """An ``image`` content block."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["image"]
    source: Base64Source


class ToolUseBlock(BaseModel):
    """A ``tool_use`` content block (assistant)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["tool_use"]
    id: str = Field(pattern=TOOL_USE_ID_PATTERN)
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]+$")
    input: dict[str, Any]


class ToolResultBlock(BaseModel):
    """A ``tool_result`` content block (user)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["tool_result"]
    tool_use_id: str = Field(pattern=TOOL_USE_ID_PATTERN)
    content: str | list[TextBlock | ImageBlock] = Field(default_factory=list)
    is_error: bool = False


class Message(BaseModel):
    """One message of ``messages``."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: str | list[TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock]


class MessagesRequest(BaseModel):
    """``POST /v1/messages`` body (the fields a tool-calling harness sends)."""

    model_config = ConfigDict(extra="allow")

    model: str
    max_tokens: int = Field(ge=1)
    messages: list[Message]
    tools: list[AnthropicTool] = Field(default_factory=list)
    system: str | None = None


class Usage(BaseModel):
    """Token usage (a scripted model reports zeros)."""

    model_config = ConfigDict(extra="allow")

    input_tokens: int
    output_tokens: int


class MessageResponse(BaseModel):
    """A ``message`` response (non-streaming)."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[TextBlock | ToolUseBlock]
    stop_reason: Literal[
        "end_turn", "tool_use", "max_tokens", "stop_sequence", "pause_turn", "refusal"
    ]
    stop_sequence: str | None = None
    usage: Usage


def _content_to_blocks(content: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for block in content:
        if block.get("type") == "text":
            blocks.append({"type": "text", "text": str(block.get("text", ""))})
        elif block.get("type") == "image":
            blocks.append(
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": str(block.get("mimeType", "application/octet-stream")),
                        "data": str(block.get("data", "")),
                    },
                }
            )
        else:
            # no Messages block for other MCP content: carried as its JSON text
            blocks.append({"type": "text", "text": dumps(block)})
    return blocks


def _blocks_to_content(content: str | list[TextBlock | ImageBlock]) -> tuple[dict[str, Any], ...]:
    if isinstance(content, str):
        return ({"type": "text", "text": content},)
    out: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextBlock):
            out.append({"type": "text", "text": block.text})
        else:
            out.append(
                {"type": "image", "data": block.source.data, "mimeType": block.source.media_type}
            )
    return tuple(out)


class AnthropicShape:
    """Anthropic Messages API: ``tool_use`` / ``tool_result`` content blocks."""

    name: ClassVar[str] = "anthropic"
    label: ClassVar[str] = "Anthropic Messages"
    api: ClassVar[str] = "anthropic-messages-2023-06-01"
    carries_error_flag: ClassVar[bool] = True

    def wire_tool_name(self, raw: str) -> str:
        """Escaped into ``[A-Za-z0-9_-]+`` (``files.read`` -> ``files_dread``)."""
        return wire_name(raw)

    def tools_wire(self, tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
        """Tool definitions; a name whose escape exceeds 128 characters is a ``ShapeError``."""
        out = []
        for t in tools:
            name = wire_name(t.name)
            if len(name) > 128:
                raise ShapeError(
                    f"tool {t.name!r} cannot be offered on the Anthropic Messages wire: its "
                    f"portable name is {len(name)} characters and the limit is 128"
                )
            out.append(
                AnthropicTool(
                    name=name, description=t.description, input_schema=t.input_schema
                ).model_dump(mode="json")
            )
        return out

    def tools_from_wire(self, wire: Any) -> list[ToolSpec]:
        """Canonical specs; a name that is not a valid escape is a ``ShapeError``."""

        def spec(tool: AnthropicTool, i: int) -> ToolSpec:
            raw = raw_from_wire(tool.name)
            if raw is None:
                raise ShapeError(f"tools[{i}].name {tool.name!r} is not a SharedOS wire name")
            return ToolSpec(raw, tool.description or "", dict(tool.input_schema))

        return specs_from_wire(wire, AnthropicTool, spec)

    def turn_wire(self, turn: Turn, *, model: str, seq: int) -> dict[str, Any]:
        """An assistant ``message`` with tool_use blocks (``stop_reason: tool_use``) or text."""
        content: list[dict[str, Any]] = [
            {"type": "tool_use", "id": c.call_id, "name": wire_name(c.name), "input": c.arguments}
            for c in turn.calls
        ]
        if not turn.calls:
            content.append({"type": "text", "text": turn.text})
        envelope = {
            "id": f"msg_{seq:04d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "tool_use" if turn.calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        validated(MessageResponse, envelope, "message")
        return envelope

    def turn_from_wire(self, wire: Any) -> Turn:
        """tool_use blocks with raw names (decoded escapes, else exactly as received)."""
        msg: MessageResponse = validated(MessageResponse, wire, "message")
        calls = tuple(
            Call(b.id, name_for_kernel(b.name), dict(b.input))
            for b in msg.content
            if isinstance(b, ToolUseBlock)
        )
        text = "".join(b.text for b in msg.content if isinstance(b, TextBlock))
        return Turn(calls, text)

    def results_wire(
        self, results: Sequence[Result], names: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """One user message holding a ``tool_result`` block per call, ``is_error`` set on refusals."""
        blocks = [
            {
                "type": "tool_result",
                "tool_use_id": r.call_id,
                "content": _content_to_blocks(r.content),
                "is_error": bool(r.is_error),
            }
            for r in results
        ]
        message = {"role": "user", "content": blocks}
        validated(Message, message, "message")
        return [message]

    def results_from_wire(self, wire: Any) -> list[Result]:
        """The ``tool_result`` blocks of the trailing user message."""
        if not isinstance(wire, list) or not wire:
            return []
        last: Message = validated(Message, wire[-1], "messages[-1]")
        if last.role != "user" or isinstance(last.content, str):
            return []
        return [
            Result(b.tool_use_id, _blocks_to_content(b.content), b.is_error)
            for b in last.content
            if isinstance(b, ToolResultBlock)
        ]

    def request_wire(
        self, *, model: str, tools: list[dict[str, Any]], history: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """``POST /v1/messages`` body."""
        req = {"model": model, "max_tokens": 4096, "messages": history, "tools": tools}
        validated(MessagesRequest, req, "request")
        return req

    def request_from_wire(self, wire: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(tool definitions, messages) of a validated request."""
        validated(MessagesRequest, wire, "request")
        return list(wire.get("tools", [])), list(wire["messages"])

    def history_from_response(self, wire: Any) -> list[dict[str, Any]]:
        """The response becomes one assistant message."""
        msg: MessageResponse = validated(MessageResponse, wire, "message")
        return [{"role": "assistant", "content": list(wire["content"])}] if msg else []

    def opening(self, text: str) -> list[dict[str, Any]]:
        """One user message."""
        return [{"role": "user", "content": text}]
