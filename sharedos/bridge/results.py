"""Kernel ``ToolResult`` -> MCP ``CallToolResult``: a mapping of types, nothing more.

Refusals are results, never JSON-RPC errors (ADR 0014). What the harness
reads — the text block and the ``structuredContent`` payload — is written
once, by ``sharedos.kernel.messages``, and carried by the ``ToolResult``; the
bridge puts exactly that on the wire, so a scripted column and an MCP column
deliver byte-identical words for the same refusal.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import mcp_types as types
from pydantic import BaseModel, TypeAdapter

from sharedos.kernel.result import ToolResult
from sharedos.outcomes import Outcome, ReasonCode

_BLOCK: TypeAdapter[types.ContentBlock] = TypeAdapter(types.ContentBlock)


def _content_blocks(raw: Sequence[object] | None) -> list[types.ContentBlock]:
    blocks: list[types.ContentBlock] = []
    for block in raw or ():
        if isinstance(block, BaseModel):
            blocks.append(block)  # type: ignore[arg-type]
        elif (
            isinstance(block, dict)
            and len(block) == 2
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        ):
            # the common case, without a discriminated-union validation per call
            blocks.append(types.TextContent(type="text", text=block["text"]))
        else:
            blocks.append(_BLOCK.validate_python(block, by_alias=True))
    return blocks


def _unencodable(value: object, depth: int = 0) -> bool:
    """True when ``value`` holds a string UTF-8 cannot encode (ASCII strings cost ~nothing)."""
    if isinstance(value, str):
        if value.isascii():
            return False
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if depth > 100:
        return False
    if isinstance(value, dict):
        return any(
            _unencodable(k, depth + 1) or _unencodable(v, depth + 1) for k, v in value.items()
        )
    if isinstance(value, list | tuple):
        return any(_unencodable(v, depth + 1) for v in value)
    return False


def _carries_lone_surrogate(blocks: Sequence[Any], structured: dict[str, Any] | None) -> bool:
    for block in blocks:
        if isinstance(block, types.TextContent):
            if _unencodable(block.text):
                return True
        elif _unencodable(block.model_dump()):
            return True
    return structured is not None and _unencodable(structured)


def to_wire_result(result: ToolResult) -> types.CallToolResult | dict[str, Any]:
    """``to_call_tool_result(result)``, or for the common case its wire dict directly.

    A success whose content is text blocks only (no structured content) is
    answered as its wire dict (``content``, ``isError``, ``resultType``): the SDK's runner
    accepts a dict result and validates it against the protocol version's
    result shape exactly as it does a model's dump, so building a pydantic model
    only to dump it again would cost time on every call and change nothing on
    the wire. Everything else takes ``to_call_tool_result``.
    """
    if result.outcome is Outcome.SUCCEEDED and result.structured is None:
        content = result.content
        if content and all(
            type(block) is dict
            and len(block) == 2
            and block.get("type") == "text"
            and type(block.get("text")) is str
            and not _unencodable(block["text"])
            for block in content
        ):
            # exactly what CallToolResult(...).model_dump(by_alias=True, exclude_none=True)
            # gives (resultType: the model's default; required on 2026-07-28)
            return {
                "content": [dict(block) for block in content],
                "isError": False,
                "resultType": "complete",
            }
    return to_call_tool_result(result)


def to_call_tool_result(result: ToolResult) -> types.CallToolResult:
    """The MCP result for a kernel ``ToolResult``: its content and payload, its error flag."""
    is_error = result.outcome is not Outcome.SUCCEEDED
    structured = result.structured if isinstance(result.structured, dict) else None
    blocks = _content_blocks(result.content)
    if not blocks and structured is not None:
        # Spec: a tool returning structured content SHOULD also return it as text.
        blocks = [types.TextContent(type="text", text=json.dumps(structured, default=str))]
    if _carries_lone_surrogate(blocks, structured):
        # Security/robustness: the SDK would fail to serialize this after the call
        # was answered, and the harness would wait for an answer forever. Raising
        # here makes the bridge answer (and record) an internal error instead.
        raise ValueError("the tool's result holds text JSON cannot carry (a lone surrogate)")
    return types.CallToolResult(content=blocks, structured_content=structured, is_error=is_error)


def internal_error_result(
    tool: str, detail: str, call_id: str = "", *, output_schema: bool = False
) -> types.CallToolResult:
    """The result for a call the bridge could not even hand to the kernel (fail closed).

    ``output_schema``: the tool declares one, so the payload is folded into the
    text (``folded_refusal``), as the kernel does for its own refusals.
    """
    return to_call_tool_result(
        ToolResult.refusal(
            ReasonCode.INTERNAL_ERROR, tool, call_id, detail=detail, fold=output_schema
        )
    )
