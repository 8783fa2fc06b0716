"""The one writer of what a model is told when a call does not succeed.

Every refusal, failure and cancellation a harness receives — from the
scripted column's driver, from the turn bridge, from a bridge's own fallback
— is written here, once, and carried by ``ToolResult`` (``content`` holds
the sentence as one text block, ``structured`` the payload). The bridge only
maps those types onto the wire, so the scripted and MCP columns deliver
byte-identical words for the same refusal.

The sentence says plainly whether this was a policy denial or a failure,
names the tool and the canonical resource, and says whether retrying the
same call can help. Codex hands the model the ``structuredContent`` JSON
rather than the text, and pi-mcp-adapter appends it, so the payload repeats
the sentence (``message``) and is written for a model as well.

Rule references are shown by id only: an ``@id`` as written, a positional id
(``/etc/sharedos/rules/files.sos:27``) as ``files.sos:27``. Source columns
and directories are never shown to a model (they tell it nothing it can act
on, and the directories describe the host); the evidence record keeps the
full ids for the operator, and ``sharedos-policy explain`` gives positions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from sharedos.outcomes import DENIAL_REASONS, OUTCOME_OF, ReasonCode

_DENIAL = "SharedOS policy denial"
_FINAL = (
    "This is an authorization decision, not a malfunction; retrying the same call will not help."
)
_FAILURE = "SharedOS tool failure (not a policy denial)"

_HINTS: dict[ReasonCode, str] = {
    ReasonCode.INVALID_ARGUMENTS: (
        "The arguments do not match the tool's inputSchema: retrying the same call will not help. "
        "Fix the arguments to match the inputSchema and call again."
    ),
    ReasonCode.HANDLER_ERROR: "The tool reported an error. Retrying the same call will not help.",
    ReasonCode.TIMEOUT: (
        "The tool did not finish in time and was stopped. Retrying the same call is unlikely "
        "to help."
    ),
    ReasonCode.INTERNAL_ERROR: (
        "SharedOS failed internally (fail closed); the call may or may not have taken effect. "
        "Report this to the operator; retrying the same call will not help."
    ),
    ReasonCode.EVIDENCE_UNAVAILABLE: (
        "SharedOS could not record this attempt, so the tool was not run and the call had no "
        "effect. Retrying will not help until the operator repairs the evidence store."
    ),
    ReasonCode.MALFORMED_REQUEST: (
        "The request could not be read as a tool call; nothing ran. Send a well-formed request."
    ),
    ReasonCode.UPSTREAM_ERROR: (
        "The upstream server failed. Retrying may succeed once it is healthy again."
    ),
    ReasonCode.UPSTREAM_TIMEOUT: (
        "The upstream server did not answer in time. Retry later or with a smaller request."
    ),
    ReasonCode.UPSTREAM_UNAVAILABLE: (
        "The upstream server could not be reached; nothing was sent to it. Retry later."
    ),
    ReasonCode.UPSTREAM_UNAUTHORIZED: (
        "The upstream server refused the credential this call carried (expired, revoked, or "
        "without the scope it needs). Retrying will not help until the operator renews it."
    ),
    ReasonCode.LINKED_RESOURCE: (
        "On disk this path is reached through a link (a symbolic link, a hard link or a git "
        "pointer), so SharedOS did not forward the call; nothing was sent to the upstream. "
        "Retrying the same call will not help; use the path the link points to, if that is "
        "allowed."
    ),
}
#: evidence_unavailable after the handler ran: the effect may have happened
_RAN_UNRECORDED = (
    "The tool ran, but SharedOS could not record its outcome: the call may have taken effect. "
    "Do not assume it failed; report this to the operator before retrying."
)
_POSITIONAL = re.compile(r"^(?:.*[/\\])?([^/\\]+):(\d+)$")


def shown_name(tool: object, limit: int = 80) -> str:
    """A tool name (or resource) safe to quote in a sentence (repr'd when odd, truncated when long)."""
    text = tool if isinstance(tool, str) else repr(tool)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    printable = text.isprintable() and " " not in text
    return text if printable and text else repr(text)


def rule_id(ref: Any) -> str:
    """The id string of a ``RuleRef`` (or of anything printable)."""
    rid = getattr(ref, "id", None)
    return str(rid) if rid is not None else str(ref)


def public_rule_id(ref: Any) -> str:
    """A rule's id as a model may see it: ``@id`` verbatim, a positional id by file base name."""
    rid = rule_id(ref)
    file, line = getattr(ref, "file", None), getattr(ref, "line", None)
    if file and line and rid == f"{file}:{line}":
        return f"{str(file).replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}"
    if file is None:
        match = _POSITIONAL.match(rid)
        if match and ("/" in rid or "\\" in rid):
            return f"{match.group(1)}:{match.group(2)}"
    return rid


def _rules(rule_ids: Iterable[Any]) -> str:
    refs = [public_rule_id(r) for r in rule_ids]
    if not refs:
        return ""
    return ("rule " if len(refs) == 1 else "rules ") + ", ".join(refs)


def _sentence(detail: str | None) -> str:
    """``detail`` as the end of a sentence (stripped, with a full stop), or empty."""
    if not detail:
        return ""
    text = detail.strip()
    if text and text[-1] not in ".!?":
        text += "."
    return text


def approval_message(
    name: str, on: str, detail: str | None, approval: Mapping[str, Any] | None
) -> str:
    """The sentence for ``approval_required``: who may approve, the approval id, what to do."""
    info = approval or {}
    who = info.get("approvers") or "an approver"
    head = (
        f"{_DENIAL} until approved: the call to tool {name}{on} needs an approval by "
        f"{who} (approval_required) and did not run."
    )
    said = _sentence(detail)
    said = said[:1].upper() + said[1:]  # it follows a full stop
    approval_id = info.get("approvalId")
    if approval_id and info.get("retry") and info.get("approvalStatus") == "approved":
        tail = (
            f"Approval {approval_id} has been approved: retry this same call with exactly the "
            "same arguments in this turn to run it once. Any other call needs its own approval."
        )
    elif approval_id and info.get("retry"):
        tail = (
            f"Approval {approval_id} is waiting for an approver. Tell the user it needs their "
            "approver's yes; once it has been approved, retry this same call with exactly the "
            "same arguments in this turn. Any other call needs its own approval."
        )
    elif approval_id:
        tail = (
            f"Approval {approval_id} is {info.get('approvalStatus', 'closed')}: retrying the "
            "same call asks for a new approval."
        )
    else:
        tail = "No approval request could be recorded; retrying will not help until it can."
    return " ".join(part for part in (head, said, tail) if part)


def refusal_message(
    reason: ReasonCode,
    tool: object,
    *,
    resource: str | None = None,
    rule_ids: Iterable[Any] = (),
    detail: str | None = None,
    ran: bool = False,
    approval: Mapping[str, Any] | None = None,
) -> str:
    """The model-facing sentence for a denial, a failure or a cancellation.

    ``ran`` is for ``evidence_unavailable`` only: the handler had run when the
    outcome could not be recorded, so the call may have taken effect.
    ``approval`` (``approval_required`` only): the approval's id, status and who
    may approve (``sharedos.kernel.approvals.GateAnswer.payload``).
    """
    name = shown_name(tool)
    on = f" on {shown_name(resource, 200)}" if resource else ""
    if reason is ReasonCode.APPROVAL_REQUIRED:
        return approval_message(name, on, detail, approval)
    if reason in DENIAL_REASONS:
        if reason is ReasonCode.TOOL_UNAVAILABLE:
            return (
                f"{_DENIAL}: there is no tool named {name} in this turn's catalogue "
                f"(tool_unavailable). {_FINAL} Use a tool from the turn's tool list."
            )
        if reason is ReasonCode.NOT_IN_RUN_POLICY:
            why = "the tool is not in this run's managed tool set (not_in_run_policy)"
        elif reason is ReasonCode.NOT_IN_TURN_CATALOG:
            why = "the tool was not published in this turn's catalogue (not_in_turn_catalog)"
        elif reason is ReasonCode.TURN_CLOSED:
            why = "this turn has closed (turn_closed)"
        elif reason is ReasonCode.UNRESOLVABLE_RESOURCE:
            extra = f": {detail.strip().rstrip('.')}" if detail and detail.strip() else ""
            why = (
                "its resource could not be resolved to a canonical resource "
                f"(unresolvable_resource){extra}"
            )
        elif reason is ReasonCode.FORBIDDEN:
            rules = _rules(rule_ids)
            why = f"the access policy forbids it (forbidden{' by ' + rules if rules else ''})"
        else:  # no_matching_permit
            why = "no permit rule of the access policy covers it (no_matching_permit: default deny)"
        return f"{_DENIAL}: the call to tool {name}{on} was refused: {why}. {_FINAL}"
    if reason is ReasonCode.CANCELLED:
        return f"SharedOS: the call to tool {name}{on} was cancelled before it completed."
    head = f"{_FAILURE}: the call to tool {name}{on} failed ({reason.value})."
    said = _sentence(detail)
    if reason is ReasonCode.EVIDENCE_UNAVAILABLE and ran:
        hint = _RAN_UNRECORDED
    else:
        hint = _HINTS.get(reason, "Retrying the same call will not help.")
    return " ".join(part for part in (head, said, hint) if part)


def refusal_payload(
    reason: ReasonCode,
    tool: str,
    call_id: str,
    message: str,
    *,
    resource: str | None = None,
    rule_ids: Iterable[Any] = (),
    detail: str | None = None,
    approval: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``structuredContent`` of a refusal (wire spelling), the sentence included as ``message``;
    for ``approval_required`` also ``approvalId``, ``approvalStatus``, ``approvers``, ``retry``."""
    payload: dict[str, Any] = {
        "outcome": str(OUTCOME_OF[reason]),
        "reason": str(reason),
        "tool": tool,
        "callId": call_id,
        "message": message,
        "resource": resource,
        "ruleIds": [public_rule_id(r) for r in rule_ids],
    }
    if detail:
        payload["detail"] = detail
    if approval:
        payload.update(approval)
    return payload


def refusal_content(
    reason: ReasonCode,
    tool: str,
    call_id: str,
    *,
    resource: str | None = None,
    rule_ids: Iterable[Any] = (),
    detail: str | None = None,
    ran: bool = False,
    approval: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The content blocks and the structured payload of one refusal: the only place both are made."""
    rules = tuple(rule_ids)
    message = refusal_message(
        reason, tool, resource=resource, rule_ids=rules, detail=detail, ran=ran, approval=approval
    )
    payload = refusal_payload(
        reason,
        tool,
        call_id,
        message,
        resource=resource,
        rule_ids=rules,
        detail=detail,
        approval=approval,
    )
    return [{"type": "text", "text": message}], payload


def folded_refusal(
    content: list[dict[str, Any]], structured: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """``content`` followed by ``structured`` as a JSON text block: a refusal without a payload.

    For a tool that declares an ``outputSchema``: schema-validating clients (the
    TypeScript SDK, MCP Inspector) check a result's ``structuredContent``
    against that schema even when ``isError`` is true, and a refusal payload
    cannot match an arbitrary tool's schema, so such a refusal carries no
    ``structuredContent`` at all (valid for every client: the spec lets an
    error result omit it). The payload stays model-visible, as JSON text after
    the sentence (the spec's own convention for structured content shown as
    text); ASCII-escaped, so an odd name can never make the text unsendable.
    """
    if structured is None:
        return list(content)
    return [*content, {"type": "text", "text": json.dumps(structured, default=str)}]


__all__ = [
    "folded_refusal",
    "public_rule_id",
    "refusal_content",
    "refusal_message",
    "refusal_payload",
    "shown_name",
]
