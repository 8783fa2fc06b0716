"""Vendor-neutral values the wire shapes translate to and from, and the shape interface.

These are plain frozen dataclasses (they sit on the driver's loop); the
pydantic models in each shape module validate the wire JSON itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from pydantic import ValidationError

from sharedos.errors import HarnessError


class ShapeError(HarnessError, ValueError):
    """Wire JSON that does not fit the vendor's shape, or a value the shape cannot carry."""


@dataclass(frozen=True)
class ToolSpec:
    """What a vendor tool definition carries: name (canonical), description, input schema."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class Call:
    """One tool call: the call id, the raw tool string, and the arguments object."""

    call_id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    """One tool result as a harness hands it back to the model.

    ``content`` holds MCP content blocks (``{"type": "text", "text": ...}``,
    ``{"type": "image", "data": ..., "mimeType": ...}``). ``is_error`` is
    ``None`` when the shape has no error flag (OpenAI Responses): the refusal is
    then carried only in the content.
    """

    call_id: str
    content: tuple[dict[str, Any], ...]
    is_error: bool | None


@dataclass(frozen=True)
class Turn:
    """What the model said in one response: its tool calls, or a final text when it has none."""

    calls: tuple[Call, ...] = ()
    text: str = ""


class WireShape(Protocol):
    """One vendor's API-layer tool-call shape, both ways.

    Every ``*_wire`` method returns wire JSON (plain dicts/lists exactly as they
    are serialised) and every ``*_from_wire`` method validates wire JSON with the
    shape's pydantic models and returns neutral values. Harness side (the
    driver): ``request_wire``, ``turn_from_wire``, ``results_wire``. Provider
    side (the scripted model): ``request_from_wire``, ``turn_wire``,
    ``results_from_wire``.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    #: the vendor API this shape follows (recorded as the harness version of the column)
    api: ClassVar[str]
    #: whether result payloads carry an explicit error flag on this wire
    carries_error_flag: ClassVar[bool]

    def wire_tool_name(self, raw: str) -> str:
        """How a (possibly malformed) raw tool name is spelled on this wire."""
        ...

    def tools_wire(self, tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
        """Vendor tool definitions for a catalogue (raises ``ShapeError`` if one cannot be carried)."""
        ...

    def tools_from_wire(self, wire: Any) -> list[ToolSpec]:
        """Canonical tool specs from vendor tool definitions."""
        ...

    def turn_wire(self, turn: Turn, *, model: str, seq: int) -> dict[str, Any]:
        """Provider side: the model's response carrying ``turn``."""
        ...

    def turn_from_wire(self, wire: Any) -> Turn:
        """Harness side: the calls (raw names for the kernel) or the final text of a response."""
        ...

    def results_wire(
        self, results: Sequence[Result], names: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """Harness side: conversation items carrying tool results (``names``: call id -> raw name)."""
        ...

    def results_from_wire(self, wire: Any) -> list[Result]:
        """Provider side: the tool results in conversation items."""
        ...

    def request_wire(
        self, *, model: str, tools: list[dict[str, Any]], history: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Harness side: the request (declared model, tool definitions, conversation so far)."""
        ...

    def request_from_wire(self, wire: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Provider side: (tool definitions, conversation items) of a validated request."""
        ...

    def history_from_response(self, wire: Any) -> list[dict[str, Any]]:
        """Harness side: the conversation items a response contributes to the next request."""
        ...

    def opening(self, text: str) -> list[dict[str, Any]]:
        """Harness side: the conversation a turn starts with (the user's prompt)."""
        ...


def validated(model: Any, wire: Any, what: str) -> Any:
    """Validate ``wire`` with a pydantic model, turning errors into a one-line ``ShapeError``."""
    try:
        return model.model_validate(wire)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in first["loc"])
        where = f"{what}.{loc}" if loc else what
        raise ShapeError(f"{where}: {first['msg']}") from None


def dumps(value: Any) -> str:
    """The JSON text that goes on a wire (UTF-8, no ASCII escaping, no NaN)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def specs_from_wire(
    wire: Any, model: Any, to_spec: Callable[[Any, int], ToolSpec]
) -> list[ToolSpec]:
    """Validate a vendor ``tools`` list item by item with ``model``; map each to a ``ToolSpec``.

    ``to_spec(tool, index)`` reads the vendor fields (and may raise ``ShapeError``).
    """
    if not isinstance(wire, list):
        raise ShapeError("tools: expected a list")
    return [to_spec(validated(model, item, f"tools[{i}]"), i) for i, item in enumerate(wire)]
