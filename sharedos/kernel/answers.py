"""The ``ToolResult`` a caller is given once its record is durable (or could not be made)."""

from __future__ import annotations

from typing import Any

from sharedos.kernel.attempt import Attempt, Ran
from sharedos.kernel.messages import folded_refusal
from sharedos.kernel.result import ToolResult
from sharedos.outcomes import Outcome, ReasonCode

__all__ = ["answer", "declares_output_schema", "refusal", "unrecorded"]


def declares_output_schema(attempt: Attempt) -> bool:
    """True when the tool called declares an ``outputSchema`` (in the registry or the turn).

    Such a tool's refusals carry no ``structuredContent`` (see
    ``sharedos.kernel.messages.folded_refusal``): a client that validates
    results against the schema would otherwise reject the refusal.
    """
    tool = attempt.tool
    if tool is not None:
        return tool.output_schema is not None
    catalog, name = attempt.catalog, getattr(attempt.call, "tool", None)
    if catalog is None or not isinstance(name, str) or name not in catalog.names:
        return False
    return any(t.name == name and t.output_schema is not None for t in catalog.tools)


def _for_clients(
    attempt: Attempt, content: list[dict[str, Any]], structured: dict[str, Any] | None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """A refusal's content and payload as every client accepts them (folded when needed)."""
    if structured is not None and declares_output_schema(attempt):
        return folded_refusal(content, structured), None
    return content, structured


def answer(attempt: Attempt, seq: int, ran: Ran, error: str | None) -> ToolResult:
    """The result for a recorded attempt: the handler's on success, else the one refusal text."""
    result = ran.result
    if ran.outcome is Outcome.SUCCEEDED and result is not None:
        content, structured = scrub_result(attempt, list(result.content), result.structured)
        return ToolResult(
            call_id=attempt.call_id,
            tool=attempt.tool_name,
            outcome=Outcome.SUCCEEDED,
            reason=None,
            decision=attempt.decision,
            content=content,
            structured=structured,
            error=None,
            evidence_seq=seq,
        )
    assert ran.reason is not None
    if result is not None and result.passthrough:
        # the handler's own error result (a brokered upstream's), scrubbed; its payload is
        # folded into the text when the tool declares an outputSchema (see _for_clients)
        content, structured = _for_clients(
            attempt, *scrub_result(attempt, list(result.content), result.structured)
        )
        return ToolResult(
            call_id=attempt.call_id,
            tool=attempt.tool_name,
            outcome=ran.outcome,
            reason=ran.reason,
            decision=attempt.decision,
            content=content,
            structured=structured,
            error=error,
            evidence_seq=seq,
        )
    shown = error
    if ran.reason is ReasonCode.INTERNAL_ERROR and error:
        shown = "internal error (" + error.split(":", 1)[0] + ")"  # details stay in the log
    return refusal(attempt, ran.reason, shown, error, seq)


def refusal(
    attempt: Attempt,
    reason: ReasonCode,
    shown: str | None,
    error: str | None,
    seq: int,
    *,
    ran: bool = False,
) -> ToolResult:
    """A refusal for ``attempt``: ``shown`` is the detail the model reads, ``error`` the recorded one."""
    secrets = attempt.secrets
    made = ToolResult.refusal(
        reason,
        secrets.scrub(attempt.tool_name) if secrets else attempt.tool_name,
        secrets.scrub(attempt.call_id) if secrets else attempt.call_id,
        detail=shown,
        decision=attempt.decision,
        evidence_seq=seq,
        ran=ran,
        approval=attempt.approval if reason is ReasonCode.APPROVAL_REQUIRED else None,
    )
    content, structured = _for_clients(
        attempt, *scrub_result(attempt, made.content, made.structured)
    )
    return ToolResult(
        call_id=made.call_id,
        tool=made.tool,
        outcome=made.outcome,
        reason=made.reason,
        decision=made.decision,
        content=content,
        structured=structured,
        error=error,
        evidence_seq=seq,
    )


def scrub_result(
    attempt: Attempt, content: list[dict[str, Any]], structured: dict[str, Any] | None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Content and payload with the call's secrets scrubbed out of every string."""
    secrets = attempt.secrets
    if not secrets:
        return content, structured
    scrubbed = secrets.scrub_json(content)
    return (
        scrubbed if isinstance(scrubbed, list) else content,
        secrets.scrub_json(structured) if structured is not None else None,
    )


def unrecorded(attempt: Attempt, cause: str, seq: int, *, ran: bool) -> ToolResult:
    """The answer when the store could not commit: failed / evidence_unavailable (fail closed)."""
    if ran:
        shown = f"the evidence store could not record the outcome ({cause})"
    else:
        shown = f"the evidence store is unavailable ({cause}); nothing ran"
    return refusal(attempt, ReasonCode.EVIDENCE_UNAVAILABLE, shown, shown, seq, ran=ran)
