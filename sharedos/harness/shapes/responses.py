"""OpenAI Responses API tool-call shape.

Requests carry function tools ``{"type": "function", "name", "description",
"parameters", "strict"}``; the response's ``output`` carries ``function_call``
items ``{"type", "id", "call_id", "name", "arguments" (a JSON string), "status"}``;
the next request's ``input`` carries ``function_call_output`` items
``{"type", "call_id", "output"}``. Function names must match
``^[a-zA-Z0-9_-]+$``, so names go through ``wirenames.wire_name`` (equal to
``portable_tool_name`` for every published name) and back exactly.

This wire has no error flag on a tool result: a refusal reaches the model only
as the output text (``carries_error_flag = False``).
"""

from __future__ import annotations

import json
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

NAME_PATTERN = r"^[a-zA-Z0-9_-]+$"


class FunctionTool(BaseModel):
    """A function tool in ``tools``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionCall(BaseModel):
    """A ``function_call`` output item (also replayed as an input item)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["function_call"]
    id: str | None = None
    call_id: str
    # a model may emit any name; the pattern applies to tool definitions
    name: str
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class InputText(BaseModel):
    """``input_text`` part of a function_call_output list output."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["input_text"]
    text: str


class InputImage(BaseModel):
    """``input_image`` part of a function_call_output list output."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["input_image"]
    image_url: str
    detail: Literal["low", "high", "auto"] = "auto"


class FunctionCallOutput(BaseModel):
    """A ``function_call_output`` input item."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["function_call_output"]
    id: str | None = None
    call_id: str
    output: str | list[InputText | InputImage]
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class OutputText(BaseModel):
    """``output_text`` content of an assistant message item."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["output_text"]
    text: str
    annotations: list[Any] = Field(default_factory=list)


class OutputMessage(BaseModel):
    """An assistant ``message`` output item."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["message"]
    id: str | None = None
    role: Literal["assistant"]
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    content: list[OutputText]


class EasyInputMessage(BaseModel):
    """A user/system/developer message input item."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["message"] | None = None
    role: Literal["user", "system", "developer"]
    content: str


InputItem = FunctionCall | FunctionCallOutput | OutputMessage | EasyInputMessage


class ResponsesRequest(BaseModel):
    """``POST /v1/responses`` body (the fields a tool-calling harness sends)."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: list[InputItem]
    tools: list[FunctionTool] = Field(default_factory=list)
    tool_choice: Literal["auto", "none", "required"] | None = None
    parallel_tool_calls: bool | None = None


class ResponseObject(BaseModel):
    """A ``response`` object (non-streaming)."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "in_progress", "incomplete", "failed"]
    model: str
    output: list[FunctionCall | OutputMessage]


def _content_to_output(content: Sequence[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(content) == 1 and content[0].get("type") == "text":
        return str(content[0].get("text", ""))
    parts: list[dict[str, Any]] = []
    for block in content:
        if block.get("type") == "text":
            parts.append({"type": "input_text", "text": str(block.get("text", ""))})
        elif block.get("type") == "image":
            url = f"data:{block.get('mimeType', 'application/octet-stream')};base64,{block.get('data', '')}"
            parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
        else:
            # no Responses part for other MCP blocks: carried as their JSON text
            parts.append({"type": "input_text", "text": dumps(block)})
    return parts


def _output_to_content(output: str | list[InputText | InputImage]) -> tuple[dict[str, Any], ...]:
    if isinstance(output, str):
        return ({"type": "text", "text": output},)
    blocks: list[dict[str, Any]] = []
    for part in output:
        if isinstance(part, InputText):
            blocks.append({"type": "text", "text": part.text})
        else:
            head, _, data = part.image_url.partition(",")
            mime = head.removeprefix("data:").removesuffix(";base64")
            blocks.append({"type": "image", "data": data, "mimeType": mime})
    return tuple(blocks)


class ResponsesShape:
    """OpenAI Responses API: function tools, ``function_call`` / ``function_call_output`` items."""

    name: ClassVar[str] = "responses"
    label: ClassVar[str] = "OpenAI Responses"
    api: ClassVar[str] = "openai-responses-v1"
    carries_error_flag: ClassVar[bool] = False

    def wire_tool_name(self, raw: str) -> str:
        """Escaped into ``[A-Za-z0-9_-]+`` (``files.read`` -> ``files_dread``)."""
        return wire_name(raw)

    def tools_wire(self, tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
        """Function tools; ``strict`` is false because published schemas need not meet strict mode."""
        return [
            FunctionTool(
                type="function",
                name=wire_name(t.name),
                description=t.description,
                parameters=t.input_schema,
                strict=False,
            ).model_dump(mode="json")
            for t in tools
        ]

    def tools_from_wire(self, wire: Any) -> list[ToolSpec]:
        """Canonical specs; a function name that is not a valid escape is a ``ShapeError``."""

        def spec(tool: FunctionTool, i: int) -> ToolSpec:
            raw = raw_from_wire(tool.name)
            if raw is None:
                raise ShapeError(f"tools[{i}].name {tool.name!r} is not a SharedOS wire name")
            return ToolSpec(raw, tool.description or "", dict(tool.parameters or {}))

        return specs_from_wire(wire, FunctionTool, spec)

    def turn_wire(self, turn: Turn, *, model: str, seq: int) -> dict[str, Any]:
        """A completed ``response`` with function_call items, or one assistant message."""
        output: list[dict[str, Any]] = []
        for i, call in enumerate(turn.calls):
            output.append(
                FunctionCall(
                    type="function_call",
                    id=f"fc_{seq:04d}_{i:02d}",
                    call_id=call.call_id,
                    name=wire_name(call.name),
                    arguments=dumps(call.arguments),
                    status="completed",
                ).model_dump(mode="json")
            )
        if not turn.calls:
            output.append(
                OutputMessage(
                    type="message",
                    id=f"msg_{seq:04d}",
                    role="assistant",
                    status="completed",
                    content=[OutputText(type="output_text", text=turn.text)],
                ).model_dump(mode="json")
            )
        envelope = {
            "id": f"resp_{seq:04d}",
            "object": "response",
            "created_at": 0,
            "status": "completed",
            "model": model,
            "output": output,
        }
        # validate what we emit with the same model the reader uses
        validated(ResponseObject, envelope, "response")
        return envelope

    def turn_from_wire(self, wire: Any) -> Turn:
        """Function calls with raw names (decoded escapes, else exactly as received)."""
        resp: ResponseObject = validated(ResponseObject, wire, "response")
        calls: list[Call] = []
        texts: list[str] = []
        for item in resp.output:
            if isinstance(item, FunctionCall):
                try:
                    args = json.loads(item.arguments)
                except json.JSONDecodeError as exc:
                    raise ShapeError(
                        f"function_call {item.call_id!r}: arguments is not JSON ({exc.msg})"
                    ) from None
                if not isinstance(args, dict):
                    raise ShapeError(
                        f"function_call {item.call_id!r}: arguments is not a JSON object"
                    )
                calls.append(Call(item.call_id, name_for_kernel(item.name), args))
            else:
                texts.extend(part.text for part in item.content)
        return Turn(tuple(calls), "".join(texts))

    def results_wire(
        self, results: Sequence[Result], names: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """``function_call_output`` items (the output text carries any refusal)."""
        return [
            FunctionCallOutput(
                type="function_call_output",
                call_id=r.call_id,
                output=_content_to_output(r.content),  # type: ignore[arg-type]
            ).model_dump(mode="json", exclude_none=True)
            for r in results
        ]

    def results_from_wire(self, wire: Any) -> list[Result]:
        """Results of the trailing ``function_call_output`` items (``is_error`` is not on this wire)."""
        out: list[Result] = []
        for i, item in enumerate(wire):
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                fco: FunctionCallOutput = validated(FunctionCallOutput, item, f"input[{i}]")
                out.append(Result(fco.call_id, _output_to_content(fco.output), None))
        return out

    def request_wire(
        self, *, model: str, tools: list[dict[str, Any]], history: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """``POST /v1/responses`` body."""
        req = ResponsesRequest(
            model=model,
            input=history,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
            tool_choice="auto",
            parallel_tool_calls=True,
        )
        return req.model_dump(mode="json", exclude_none=True)

    def request_from_wire(self, wire: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(function tools, input items) of a validated request."""
        req: ResponsesRequest = validated(ResponsesRequest, wire, "request")
        return list(wire["tools"]) if "tools" in wire else [], list(wire["input"]) if req else []

    def history_from_response(self, wire: Any) -> list[dict[str, Any]]:
        """Output items are replayed verbatim as input items."""
        resp: ResponseObject = validated(ResponseObject, wire, "response")
        return [dict(item) for item in wire["output"]] if resp else []

    def opening(self, text: str) -> list[dict[str, Any]]:
        """The conversation a turn starts with: one user input item."""
        return [{"role": "user", "content": text}]
