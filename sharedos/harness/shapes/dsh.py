"""dsh ``tool/call`` shape — SharedOS's own reading, in this one module.

No public reference for dsh's wire protocol was reachable when this was
written (dsh 0.1.1-rc.2 cannot be installed here), so this module is the
single place that defines it; correct it here and every user follows. What
it assumes, from the ADR's description ("dsh tool/call"):

* JSON-RPC 2.0 framing. The model side asks for a tool with a request
  ``{"jsonrpc": "2.0", "id": <call id>, "method": "tool/call",
  "params": {"name": <tool name>, "arguments": {...}}}``; one model step may
  send a batch (a JSON array) of such requests.
* The harness answers each with ``{"jsonrpc": "2.0", "id": <call id>,
  "result": {"content": [MCP content blocks], "isError": bool,
  "structuredContent"?: {...}}}``. A refusal is a *result* with
  ``isError: true``; a JSON-RPC ``error`` member is reserved for requests
  that could not be processed at all.
* The tool catalogue travels as a ``tool/list`` result ``{"tools": [MCP Tool
  objects]}`` and the end of a model step without calls as a notification
  ``{"jsonrpc": "2.0", "method": "turn/end", "params": {"text": ...}}``.
* Names are JSON strings and travel unchanged.
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
    specs_from_wire,
    validated,
)

#: The version of this module's reading of the dsh protocol (bump when corrected).
DSH_SHAPE_VERSION = "sharedos-reading-1"


class DshTool(BaseModel):
    """An MCP-style tool object in a ``tool/list`` result."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    description: str = ""
    inputSchema: dict[str, Any]


class ToolCallParams(BaseModel):
    """``params`` of ``tool/call``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCallRequest(BaseModel):
    """A ``tool/call`` JSON-RPC request."""

    model_config = ConfigDict(extra="forbid")

    jsonrpc: Literal["2.0"]
    id: str | int
    method: Literal["tool/call"]
    params: ToolCallParams


class TurnEnd(BaseModel):
    """The ``turn/end`` notification: the model step had no calls."""

    model_config = ConfigDict(extra="forbid")

    jsonrpc: Literal["2.0"]
    method: Literal["turn/end"]
    params: dict[str, Any] = Field(default_factory=dict)


class ToolCallResult(BaseModel):
    """``result`` of a ``tool/call``."""

    model_config = ConfigDict(extra="forbid")

    content: list[dict[str, Any]]
    isError: bool = False
    structuredContent: dict[str, Any] | None = None


class ToolCallResponse(BaseModel):
    """A JSON-RPC response to ``tool/call``."""

    model_config = ConfigDict(extra="forbid")

    jsonrpc: Literal["2.0"]
    id: str | int
    result: ToolCallResult


class ModelStep(BaseModel):
    """One model step: a batch of ``tool/call`` requests, or a ``turn/end`` notification."""

    model_config = ConfigDict(extra="forbid")

    step: list[ToolCallRequest] | TurnEnd


class DshShape:
    """dsh ``tool/call`` (JSON-RPC 2.0), as defined in this module."""

    name: ClassVar[str] = "dsh"
    label: ClassVar[str] = "dsh tool/call"
    api: ClassVar[str] = f"dsh-tool-call-{DSH_SHAPE_VERSION}"
    carries_error_flag: ClassVar[bool] = True

    def wire_tool_name(self, raw: str) -> str:
        """Unchanged: names are JSON strings."""
        return raw

    def tools_wire(self, tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
        """MCP-style tool objects."""
        return [
            DshTool(name=t.name, description=t.description, inputSchema=t.input_schema).model_dump(
                mode="json"
            )
            for t in tools
        ]

    def tools_from_wire(self, wire: Any) -> list[ToolSpec]:
        """Canonical specs."""
        return specs_from_wire(
            wire, DshTool, lambda t, _i: ToolSpec(t.name, t.description, dict(t.inputSchema))
        )

    def turn_wire(self, turn: Turn, *, model: str, seq: int) -> dict[str, Any]:
        """A batch of ``tool/call`` requests, or a ``turn/end`` notification."""
        step: Any
        if turn.calls:
            step = [
                {
                    "jsonrpc": "2.0",
                    "id": c.call_id,
                    "method": "tool/call",
                    "params": {"name": c.name, "arguments": c.arguments},
                }
                for c in turn.calls
            ]
        else:
            step = {"jsonrpc": "2.0", "method": "turn/end", "params": {"text": turn.text}}
        validated(ModelStep, {"step": step}, "model step")
        return {"step": step}

    def turn_from_wire(self, wire: Any) -> Turn:
        """Requests with names exactly as given (ids are kept as strings)."""
        parsed: ModelStep = validated(ModelStep, wire, "model step")
        if isinstance(parsed.step, TurnEnd):
            return Turn((), str(parsed.step.params.get("text", "")))
        return Turn(
            tuple(Call(str(r.id), r.params.name, dict(r.params.arguments)) for r in parsed.step)
        )

    def results_wire(
        self, results: Sequence[Result], names: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """One JSON-RPC response per request: refusals are results with ``isError: true``."""
        out = []
        for r in results:
            response = {
                "jsonrpc": "2.0",
                "id": r.call_id,
                "result": {"content": list(r.content), "isError": bool(r.is_error)},
            }
            validated(ToolCallResponse, response, "tool/call response")
            out.append(response)
        return out

    def results_from_wire(self, wire: Any) -> list[Result]:
        """The trailing run of ``tool/call`` responses."""
        if not isinstance(wire, list):
            return []
        trailing: list[Result] = []
        for item in reversed(wire):
            if not (isinstance(item, dict) and "result" in item and "jsonrpc" in item):
                break
            resp: ToolCallResponse = validated(ToolCallResponse, item, "tool/call response")
            trailing.append(Result(str(resp.id), tuple(resp.result.content), resp.result.isError))
        return list(reversed(trailing))

    def request_wire(
        self, *, model: str, tools: list[dict[str, Any]], history: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The model input: the ``tool/list`` result plus the transcript of steps and responses."""
        return {"model": model, "tools": {"tools": tools}, "transcript": history}

    def request_from_wire(self, wire: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(tool objects, transcript)."""
        if not isinstance(wire, dict) or not isinstance(wire.get("transcript"), list):
            raise ShapeError(
                "dsh request: expected {'tools': {'tools': [...]}, 'transcript': [...]}"
            )
        tools = wire.get("tools", {}).get("tools", [])
        return list(tools), list(wire["transcript"])

    def history_from_response(self, wire: Any) -> list[dict[str, Any]]:
        """The step's requests join the transcript."""
        parsed: ModelStep = validated(ModelStep, wire, "model step")
        step = wire["step"]
        return list(step) if isinstance(parsed.step, list) else [dict(step)]

    def opening(self, text: str) -> list[dict[str, Any]]:
        """A ``turn/start`` notification carrying the prompt."""
        return [{"jsonrpc": "2.0", "method": "turn/start", "params": {"text": text}}]
