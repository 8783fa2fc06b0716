"""The closed vocabulary of outcomes and reason codes.

Every attempt ends in exactly one ``Outcome``; every outcome other than
``succeeded`` carries exactly one ``ReasonCode``. Both enums are closed: adding
a member is an API change and must be documented in ``docs/reason-codes.md``.
Denied and failed are distinct on purpose, so that a denial rate can be counted
from the evidence.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """What happened to one tool-call attempt."""

    SUCCEEDED = "succeeded"
    DENIED = "denied"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Effect(StrEnum):
    """A policy decision's effect.

    ``approval_required``: a permit allows the call and an approval rule applies
    to it, so it runs only with an approval of that exact call
    (docs/approvals.md). Anything that does not know approvals reads it as "not
    allow", which refuses the call (fail closed).
    """

    ALLOW = "allow"
    DENY = "deny"
    APPROVAL_REQUIRED = "approval_required"


#: how far each effect lets a call go: deny, then approval_required (it runs once
#: approved), then allow. A change of effect widens or narrows access by it (``diff``,
#: ``replay`` and the shadow report order their differences so). Keyed by the enum,
#: which compares and hashes as its text, so a recorded ``"deny"`` reads it too.
EFFECT_REACH: dict[str, int] = {Effect.DENY: 0, Effect.APPROVAL_REQUIRED: 1, Effect.ALLOW: 2}


class ReasonCode(StrEnum):
    """Why an attempt did not succeed (or, for ``allowed``, why it could)."""

    #: the decision tree found a permit and no forbid (only on allowed decisions)
    ALLOWED = "allowed"
    # -- denied --------------------------------------------------------------
    #: the tool name is unknown, malformed, or has no requirement
    TOOL_UNAVAILABLE = "tool_unavailable"
    #: the tool exists but is not in the run's managed set (ToolPolicy)
    NOT_IN_RUN_POLICY = "not_in_run_policy"
    #: the tool was not in the catalogue published for this turn
    NOT_IN_TURN_CATALOG = "not_in_turn_catalog"
    #: no permit rule matched (default deny)
    NO_MATCHING_PERMIT = "no_matching_permit"
    #: a forbid rule matched (forbid overrides permit)
    FORBIDDEN = "forbidden"
    #: the resource could not be resolved or canonicalized (e.g. '..' above '/')
    UNRESOLVABLE_RESOURCE = "unresolvable_resource"
    #: the turn has closed; the bridge refuses further calls
    TURN_CLOSED = "turn_closed"
    #: a permit allows the call but an approval rule applies: it runs only with an
    #: approval of this exact call (the one denial a retry can change, once approved)
    APPROVAL_REQUIRED = "approval_required"
    # -- failed --------------------------------------------------------------
    #: the arguments do not satisfy the tool's inputSchema
    INVALID_ARGUMENTS = "invalid_arguments"
    #: the handler raised or reported an error
    HANDLER_ERROR = "handler_error"
    #: the handler did not finish within its deadline
    TIMEOUT = "timeout"
    #: the host failed internally while handling the call (failed closed)
    INTERNAL_ERROR = "internal_error"
    #: the attempt could not be made durable, so nothing ran (evidence before effect)
    EVIDENCE_UNAVAILABLE = "evidence_unavailable"
    #: the request could not be parsed into a tool call (recorded with what can be said)
    MALFORMED_REQUEST = "malformed_request"
    #: a brokered upstream MCP server answered with a protocol error, crashed or disconnected
    UPSTREAM_ERROR = "upstream_error"
    #: a brokered upstream MCP server did not answer within its call timeout
    UPSTREAM_TIMEOUT = "upstream_timeout"
    #: a brokered upstream MCP server could not be reached for this call
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    #: a brokered upstream refused the credential the call carried (HTTP 401, or a 403
    #: ``insufficient_scope``): the principal must sign in again or get a wider scope
    UPSTREAM_UNAUTHORIZED = "upstream_unauthorized"
    #: a brokered call's path resource is reached through a link on disk (a symbolic
    #: link, a hard link, a git pointer), so it was not forwarded to the upstream
    LINKED_RESOURCE = "linked_resource"
    # -- cancelled -----------------------------------------------------------
    #: the caller cancelled the request
    CANCELLED = "cancelled"


DENIAL_REASONS = frozenset(
    {
        ReasonCode.TOOL_UNAVAILABLE,
        ReasonCode.NOT_IN_RUN_POLICY,
        ReasonCode.NOT_IN_TURN_CATALOG,
        ReasonCode.NO_MATCHING_PERMIT,
        ReasonCode.FORBIDDEN,
        ReasonCode.UNRESOLVABLE_RESOURCE,
        ReasonCode.TURN_CLOSED,
        ReasonCode.APPROVAL_REQUIRED,
    }
)
FAILURE_REASONS = frozenset(
    {
        ReasonCode.INVALID_ARGUMENTS,
        ReasonCode.HANDLER_ERROR,
        ReasonCode.TIMEOUT,
        ReasonCode.INTERNAL_ERROR,
        ReasonCode.EVIDENCE_UNAVAILABLE,
        ReasonCode.MALFORMED_REQUEST,
        ReasonCode.UPSTREAM_ERROR,
        ReasonCode.UPSTREAM_TIMEOUT,
        ReasonCode.UPSTREAM_UNAVAILABLE,
        ReasonCode.UPSTREAM_UNAUTHORIZED,
        ReasonCode.LINKED_RESOURCE,
    }
)


def outcome_for_reason(reason: ReasonCode) -> Outcome:
    """The outcome a non-success reason code implies."""
    if reason in DENIAL_REASONS:
        return Outcome.DENIED
    if reason in FAILURE_REASONS:
        return Outcome.FAILED
    if reason is ReasonCode.CANCELLED:
        return Outcome.CANCELLED
    return Outcome.SUCCEEDED


#: ``outcome_for_reason`` of every reason code, as a mapping (a lookup on hot paths)
OUTCOME_OF: dict[ReasonCode, Outcome] = {
    reason: outcome_for_reason(reason) for reason in ReasonCode
}
