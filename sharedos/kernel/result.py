"""``ToolResult``: the answer to one call, exactly as the harness is given it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sharedos.kernel.messages import folded_refusal, refusal_content
from sharedos.kernel.policy_api import DecisionLike
from sharedos.outcomes import OUTCOME_OF, Outcome, ReasonCode
from sharedos.redaction import NO_SECRETS, Redactor

#: ``ToolResult.refusal``'s default ``error``: the same text as ``detail``
_AS_DETAIL: str = "\x00as-detail"

__all__ = ["ToolResult"]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The answer to one call. ``outcome`` succeeded / denied / failed (cancelled re-raises).

    ``content`` and ``structured`` are exactly what the harness is given: for a
    success the handler's; for anything else the one refusal text of
    ``sharedos.kernel.messages`` and its payload (or, for a handler failure
    with ``passthrough``, the handler's own error result).
    """

    call_id: str
    tool: str
    outcome: Outcome
    reason: ReasonCode | None
    decision: DecisionLike | None
    content: list[dict[str, Any]]
    structured: dict[str, Any] | None
    error: str | None
    #: the evidence record's sequence number; -1 when no record could be written
    evidence_seq: int

    @property
    def is_error(self) -> bool:
        """True for every outcome but ``succeeded`` (MCP ``isError``)."""
        return self.outcome is not Outcome.SUCCEEDED

    def to_mcp(self) -> dict[str, Any]:
        """An MCP ``CallToolResult`` in wire spelling (a refusal is a result, never an error)."""
        out: dict[str, Any] = {"content": self.content, "isError": self.is_error}
        if self.structured is not None:
            out["structuredContent"] = self.structured
        return out

    @classmethod
    def refusal(
        cls,
        reason: ReasonCode,
        tool: str,
        call_id: str,
        *,
        detail: str | None = None,
        decision: DecisionLike | None = None,
        evidence_seq: int = -1,
        ran: bool = False,
        error: str | None = _AS_DETAIL,
        redactor: Redactor = NO_SECRETS,
        fold: bool = False,
        approval: dict[str, Any] | None = None,
    ) -> ToolResult:
        """A non-success result, built once: its text and payload written by
        ``sharedos.kernel.messages``, scrubbed by ``redactor``, and — with ``fold``, for a
        tool that declares an ``outputSchema`` — the payload folded into the text
        (``folded_refusal``) instead of sent as ``structuredContent``. ``detail`` is what
        the model reads; ``error`` what the result carries as its error (``detail``
        unless given). ``approval``: the approval fields of an ``approval_required`` refusal
        (``sharedos.kernel.approvals.GateAnswer.payload``)."""
        resource = decision.resource if decision is not None else None
        rules = tuple(decision.rule_ids) if decision is not None else ()
        named, said = tool, detail
        if redactor.needles:
            # scrubbed before the sentence is written, as well as after: the sentence cuts a
            # long tool name or resource (``shown_name``) and goes on after the cut, where a
            # secret's head is no longer at an end of the text for the scrubber to find
            named = redactor.scrub(tool)
            resource = redactor.scrub(resource) if resource is not None else None
            said = redactor.scrub(detail) if detail is not None else None
        content, payload = refusal_content(
            reason,
            named,
            call_id,
            resource=resource,
            rule_ids=rules,
            detail=said,
            ran=ran,
            approval=approval,
        )
        structured: dict[str, Any] | None = payload
        if redactor.needles:
            content = redactor.scrub_json(content)
            structured = redactor.scrub_json(payload)
        if fold:
            content, structured = folded_refusal(content, structured), None
        return cls(
            call_id=call_id,
            tool=tool,
            outcome=OUTCOME_OF[reason],
            reason=reason,
            decision=decision,
            content=content,
            structured=structured,
            error=detail if error is _AS_DETAIL else error,
            evidence_seq=evidence_seq,
        )
