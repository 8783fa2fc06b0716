"""Vendor API-layer tool-call shapes the scripted column speaks (both ways).

``SHAPES`` maps a shape name to its class: ``responses`` (OpenAI Responses),
``anthropic`` (Anthropic Messages), ``pi`` (pi-ai messages) and ``dsh``
(``tool/call``, defined in ``dsh.py`` — see the caveat there).
"""

from __future__ import annotations

from sharedos.harness.shapes.anthropic import AnthropicShape
from sharedos.harness.shapes.dsh import DshShape
from sharedos.harness.shapes.neutral import Call, Result, ShapeError, ToolSpec, Turn, WireShape
from sharedos.harness.shapes.pi import PiShape
from sharedos.harness.shapes.responses import ResponsesShape

SHAPES: dict[str, type[WireShape]] = {
    "responses": ResponsesShape,
    "anthropic": AnthropicShape,
    "pi": PiShape,
    "dsh": DshShape,
}

SHAPE_NAMES: tuple[str, ...] = tuple(SHAPES)


def get_shape(name: str) -> WireShape:
    """An instance of the named shape; ``KeyError`` names the known shapes."""
    try:
        return SHAPES[name]()
    except KeyError:
        raise KeyError(f"unknown shape {name!r} (known: {', '.join(SHAPES)})") from None


__all__ = [
    "SHAPES",
    "SHAPE_NAMES",
    "Call",
    "Result",
    "ShapeError",
    "ToolSpec",
    "Turn",
    "WireShape",
    "get_shape",
]
