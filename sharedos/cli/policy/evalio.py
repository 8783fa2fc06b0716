"""The JSONL wire shapes of ``sharedos-policy eval``.

One request per input line, one JSON object per output line, in order. A line
that is not a valid request yields an ``error`` object for that line; the batch
goes on. Field names follow JSON spelling on the wire.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sharedos.policy.jsonvalues import loads


class EvalRequest(BaseModel):
    """One request: the raw tool name, its arguments and the (trusted) context."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] = Field(default_factory=dict)


class RuleRefOut(BaseModel):
    """A rule cited by a decision, with its source position."""

    id: str
    effect: str
    file: str
    line: int
    col: int


class EvalDecision(BaseModel):
    """The decision for one request line."""

    line: int
    tool: str
    effect: str
    reason: str
    namespace: str | None
    action: str | None
    resource: str | None
    rule_ids: list[str]
    rules: list[RuleRefOut]
    detail: str


class EvalErrorBody(BaseModel):
    """Why a line could not be evaluated."""

    code: Literal["invalid_json", "invalid_request", "internal_error"]
    message: str


class EvalError(BaseModel):
    """The output for an input line that is not a valid request."""

    line: int
    error: EvalErrorBody


def parse_request(line: str) -> EvalRequest | EvalErrorBody:
    """Parse one JSONL input line into a request, or say precisely why it is not one."""
    try:
        raw = loads(line)
    except json.JSONDecodeError as exc:
        return EvalErrorBody(code="invalid_json", message=f"{exc.msg} at column {exc.colno}")
    except ValueError as exc:  # NaN/Infinity, or an integer over Python's 4,300-digit limit
        return EvalErrorBody(code="invalid_json", message=str(exc).split(";")[0])
    if not isinstance(raw, dict):
        return EvalErrorBody(
            code="invalid_request",
            message=f'expected a JSON object {{"tool", "args", "context"}}, got {type(raw).__name__}',
        )
    try:
        return EvalRequest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()
        )
        return EvalErrorBody(code="invalid_request", message=problems)


def decision_line(line: int, decision: Any) -> EvalDecision:
    """Project a core ``Decision`` onto the output shape."""
    refs = [
        RuleRefOut(id=r.id, effect=str(r.effect), file=str(r.file), line=r.line, col=r.col)
        for r in decision.rule_ids
    ]
    return EvalDecision(
        line=line,
        tool=decision.tool,
        effect=str(decision.effect),
        reason=str(decision.reason),
        namespace=decision.namespace,
        action=decision.action,
        resource=decision.resource,
        rule_ids=[r.id for r in refs],
        rules=refs,
        detail=decision.detail,
    )


def dump(model: BaseModel) -> str:
    """One compact JSON line (JSONL) for an output object.

    ASCII-only: JSON escapes every control character, and escaping non-ASCII
    too keeps U+0085/U+2028/U+2029 (line breaks to ``str.splitlines`` and
    JavaScript) from splitting a record in two.
    """
    return json.dumps(model.model_dump(mode="json"), separators=(",", ":"), ensure_ascii=True)
