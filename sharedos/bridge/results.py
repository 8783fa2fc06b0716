"""SharedOS outcome → MCP ``CallToolResult``.

Refusals are results, never JSON-RPC errors (ADR 0014). The structured payload
keeps denied and failed distinguishable; the text block is written for the
model, because Codex and Pi pass only the text on: it says plainly whether
this was a policy denial or a failure, names the tool and the resource, and
says whether retrying the same call can help.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import mcp_types as types
from pydantic import BaseModel, TypeAdapter

from sharedos.outcomes import Outcome, ReasonCode

_FAILURE_HINTS: dict[str, str] = {
    ReasonCode.INVALID_ARGUMENTS.value: (
        "The arguments do not match the tool's inputSchema; retrying the same call will not "
        "help, a call with corrected arguments might."
    ),
    ReasonCode.TIMEOUT.value: "The tool did not finish in time. Retrying the same call is unlikely to help.",
    ReasonCode.HANDLER_ERROR.value: "The tool reported an error. Retrying the same call will not help.",
    ReasonCode.INTERNAL_ERROR.value: (
        "SharedOS failed internally and refused the call (fail closed). Retrying the same call "
        "will not help."
    ),
}


def _value(obj: Any) -> str | None:
    if obj is None:
        return None
    return str(getattr(obj, "value", obj))


def _rule_ids(decision: Any) -> list[str]:
    refs = getattr(decision, "rule_ids", None) or ()
    out: list[str] = []
    for ref in refs:
        rid = getattr(ref, "id", ref)
        out.append(str(rid))
    return out


def refusal_payload(
    *,
    outcome: str,
    reason: str | None,
    tool: str,
    resource: str | None,
    rule_ids: Sequence[str],
    detail: str | None,
) -> dict[str, Any]:
    """The ``structuredContent`` of a refusal (wire spelling: ``ruleIds``)."""
    payload: dict[str, Any] = {
        "outcome": outcome,
        "reason": reason,
        "tool": tool,
        "resource": resource,
        "ruleIds": list(rule_ids),
    }
    if detail:
        payload["detail"] = detail
    return payload


def refusal_text(
    *,
    outcome: str,
    reason: str | None,
    tool: str,
    resource: str | None,
    rule_ids: Sequence[str],
    detail: str | None,
) -> str:
    """One paragraph for the model: denial or failure, which tool and resource, will a retry help."""
    on = f" on resource {resource!r}" if resource else ""
    rules = f"; rule(s): {', '.join(rule_ids)}" if rule_ids else ""
    if detail:
        detail = detail.strip()
        if detail and detail[-1] not in ".!?":
            detail += "."
    if outcome == Outcome.DENIED.value:
        text = (
            f"SharedOS policy denial: the call to tool {tool!r}{on} was refused by the access "
            f"policy (reason: {reason}{rules}). This is an authorization decision, not a "
            "malfunction; retrying the same call will not help."
        )
        if detail:
            text += f" {detail}"
        return text
    if outcome == Outcome.CANCELLED.value:
        return f"SharedOS: the call to tool {tool!r}{on} was cancelled before it completed."
    hint = _FAILURE_HINTS.get(reason or "", "Retrying the same call will not help.")
    text = f"SharedOS tool failure (not a policy denial): the call to tool {tool!r}{on} failed (reason: {reason})."
    if detail:
        text += f" {detail}"
    return f"{text} {hint}"


_BLOCK: TypeAdapter[types.ContentBlock] = TypeAdapter(types.ContentBlock)


def _content_blocks(raw: Any) -> list[types.ContentBlock]:
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


def _unencodable(value: Any, depth: int = 0) -> bool:
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


def to_wire_result(result: Any) -> types.CallToolResult | dict[str, Any]:
    """``to_call_tool_result(result)``, or for the common case its wire dict directly.

    A success whose content is text blocks only (no structured content) is
    answered as its wire dict (``content``, ``isError``, ``resultType``): the SDK's runner
    accepts a dict result and validates it against the protocol version's
    result shape exactly as it does a model's dump, so building a pydantic model
    only to dump it again would cost time on every call and change nothing on
    the wire. Everything else takes ``to_call_tool_result``.
    """
    if _value(result.outcome) == Outcome.SUCCEEDED.value and result.structured is None:
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


def to_call_tool_result(result: Any) -> types.CallToolResult:
    """Map a kernel ``ToolResult`` to the MCP result the harness receives."""
    outcome = _value(result.outcome)
    if outcome == Outcome.SUCCEEDED.value:
        structured = result.structured
        blocks = _content_blocks(result.content)
        if not blocks and structured is not None:
            # Spec: a tool returning structured content SHOULD also return it as text.
            blocks = [types.TextContent(type="text", text=json.dumps(structured, default=str))]
        structured = structured if isinstance(structured, dict) else None
        if _carries_lone_surrogate(blocks, structured):
            # Security/robustness: the SDK would fail to serialize this after the call
            # "succeeded", and the harness would wait for an answer forever. Raising
            # here makes the bridge answer (and record) an internal error instead.
            raise ValueError("the tool's result holds text JSON cannot carry (a lone surrogate)")
        return types.CallToolResult(content=blocks, structured_content=structured, is_error=False)
    decision = getattr(result, "decision", None)
    reason = _value(getattr(result, "reason", None))
    resource = getattr(decision, "resource", None) if decision is not None else None
    rule_ids = _rule_ids(decision)
    detail = getattr(result, "error", None)
    if detail is None and decision is not None and outcome == Outcome.DENIED.value:
        detail = getattr(decision, "detail", None) or None
    tool = str(result.tool)
    payload = refusal_payload(
        outcome=outcome or Outcome.FAILED.value,
        reason=reason,
        tool=tool,
        resource=resource,
        rule_ids=rule_ids,
        detail=detail,
    )
    text = refusal_text(
        outcome=payload["outcome"],
        reason=reason,
        tool=tool,
        resource=resource,
        rule_ids=rule_ids,
        detail=detail,
    )
    kernel_payload = getattr(result, "structured", None)
    if isinstance(kernel_payload, dict):
        # Keep what the kernel said (callId, its own sentence) under ours.
        payload = {**{k: v for k, v in kernel_payload.items() if k not in payload}, **payload}
    content: list[types.ContentBlock] = [types.TextContent(type="text", text=text)]
    return types.CallToolResult(content=content, structured_content=payload, is_error=True)


def internal_error_result(tool: str, detail: str) -> types.CallToolResult:
    """The result for a call the bridge could not even hand to the kernel (fail closed)."""
    payload = refusal_payload(
        outcome=Outcome.FAILED.value,
        reason=ReasonCode.INTERNAL_ERROR.value,
        tool=tool,
        resource=None,
        rule_ids=(),
        detail=detail,
    )
    text = refusal_text(
        outcome=Outcome.FAILED.value,
        reason=ReasonCode.INTERNAL_ERROR.value,
        tool=tool,
        resource=None,
        rule_ids=(),
        detail=detail,
    )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=payload,
        is_error=True,
    )
