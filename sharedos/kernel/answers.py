"""The ``ToolResult`` a caller is given once its record is durable (or could not be made).

What the handler step ended in (``Ran``) and the call's ``Authorization``
make the answer; the tool name and call id shown are the record's (storable,
scrubbed), so the answer never says more than the record does. A refusal is
built once, by ``ToolResult.refusal`` (text by ``sharedos.kernel.messages``,
scrubbed by the call's redactor, folded for a tool with an ``outputSchema``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sharedos.evidence.record import EvidenceRecord
from sharedos.kernel.authorize import Authorization
from sharedos.kernel.handlers import HandlerResult
from sharedos.kernel.messages import folded_refusal
from sharedos.kernel.result import ToolResult
from sharedos.outcomes import Outcome, ReasonCode

__all__ = ["Ran", "answer", "refusal", "unrecorded"]


@dataclass(frozen=True, slots=True)
class Ran:
    """What the handler step ended in."""

    outcome: Outcome
    reason: ReasonCode | None = None
    error: str | None = None
    result: HandlerResult | None = None


def answer(
    auth: Authorization, row: EvidenceRecord, seq: int, ran: Ran, error: str | None
) -> ToolResult:
    """The result for a recorded attempt: the handler's on success (scrubbed), its own error
    result when it asked for ``passthrough``, else the one refusal text. ``error`` is the
    recorded (scrubbed, capped) error."""
    result = ran.result
    if result is not None and (ran.outcome is Outcome.SUCCEEDED or result.passthrough):
        content: Any = list(result.content)
        structured = result.structured
        redactor = auth.redactor
        if redactor.needles:
            scrubbed = redactor.scrub_json(content)
            content = scrubbed if isinstance(scrubbed, list) else content
            structured = redactor.scrub_json(structured) if structured is not None else None
        if ran.outcome is not Outcome.SUCCEEDED and structured is not None and auth.folds:
            # a brokered upstream's own error result, for a tool with an outputSchema:
            # its payload is folded into the text (see messages.folded_refusal)
            content, structured = folded_refusal(content, structured), None
        return ToolResult(
            call_id=row.call_id,
            tool=row.tool,
            outcome=ran.outcome,
            reason=ran.reason,
            decision=auth.decision,
            content=content,
            structured=structured,
            error=error,
            evidence_seq=seq,
        )
    assert ran.reason is not None
    shown = error
    if ran.reason is ReasonCode.INTERNAL_ERROR and error:
        shown = "internal error (" + error.split(":", 1)[0] + ")"  # details stay in the log
    return refusal(auth, row, ran.reason, shown, error, seq)


def refusal(
    auth: Authorization,
    row: EvidenceRecord,
    reason: ReasonCode,
    shown: str | None,
    error: str | None,
    seq: int,
    *,
    ran: bool = False,
) -> ToolResult:
    """A refusal for the call ``row`` records: ``shown`` is the detail the model reads,
    ``error`` the recorded one."""
    return ToolResult.refusal(
        reason,
        row.tool,
        row.call_id,
        detail=shown,
        decision=auth.decision,
        evidence_seq=seq,
        ran=ran,
        error=error,
        redactor=auth.redactor,
        fold=auth.folds,
        approval=auth.approval if reason is ReasonCode.APPROVAL_REQUIRED else None,
    )


def unrecorded(
    auth: Authorization, row: EvidenceRecord, cause: str, seq: int, *, ran: bool
) -> ToolResult:
    """The answer when the store could not commit: failed / evidence_unavailable (fail closed)."""
    if ran:
        shown = f"the evidence store could not record the outcome ({cause})"
    else:
        shown = f"the evidence store is unavailable ({cause}); nothing ran"
    return refusal(auth, row, ReasonCode.EVIDENCE_UNAVAILABLE, shown, shown, seq, ran=ran)
