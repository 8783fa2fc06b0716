"""One attempt in flight (``Attempt``), what its handler step ended in (``Ran``), and the
evidence record made from it: redaction and scrubbing are applied here, once, to every field."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sharedos.catalog.definition import ToolDefinition
from sharedos.evidence.record import (
    EvidenceRecord,
    OutcomeRecord,
    arguments_digest,
    encoded_text,
    plain_json,
    redact_arguments,
    safe_text,
    storable_arguments,
)
from sharedos.evidence.redaction import NO_SECRETS, Secrets, non_object_marker
from sharedos.kernel.context import AccessContext, ToolCall
from sharedos.kernel.handlers import HandlerResult
from sharedos.kernel.kernel import TurnCatalog
from sharedos.kernel.policy_api import DecisionLike, rule_id
from sharedos.outcomes import Outcome, ReasonCode

__all__ = ["MAX_ERROR", "Attempt", "Ran", "attempt_record", "given_up", "now", "scrubbed"]

#: recorded (and shown) error texts are capped at this many characters, after scrubbing
MAX_ERROR = 2000


def now() -> str:
    """UTC now, ISO 8601 with microseconds and a ``Z``."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Ran:
    """What the handler step ended in."""

    outcome: Outcome
    reason: ReasonCode | None = None
    error: str | None = None
    result: HandlerResult | None = None


@dataclass(slots=True)
class Attempt:
    """What is known about an attempt so far; becomes the evidence record."""

    call: ToolCall
    context: AccessContext
    tool_name: str
    call_id: str
    started_at: str
    t0: float
    catalog: TurnCatalog | None
    diagnostics: Mapping[str, Any] | None
    identity: Mapping[str, Any] | None
    tool: ToolDefinition | None = None
    arguments: Any = None
    args: dict[str, Any] | None = None
    decision: DecisionLike | None = None
    secret_names: frozenset[str] = frozenset()
    secrets: Secrets = NO_SECRETS
    #: the stored arguments and their digest, when made from the one canonical encoding
    #: before the handler ran (else they are derived from ``arguments``)
    stored: tuple[Any, str] | None = None
    #: an ``approval_required`` refusal's approval fields (``GateAnswer.payload``)
    approval: dict[str, Any] | None = None

    @classmethod
    def begin(
        cls,
        call: ToolCall,
        context: AccessContext,
        meta: tuple[TurnCatalog | None, Mapping[str, Any] | None, Mapping[str, Any] | None],
        arguments: Any = None,
    ) -> Attempt:
        """A new attempt at ``call``, timed from now."""
        return cls(
            call=call,
            context=context,
            tool_name=safe_text(getattr(call, "tool", None)),
            call_id=safe_text(getattr(call, "call_id", ""), 256),
            started_at=now(),
            t0=time.perf_counter(),
            catalog=meta[0],
            diagnostics=meta[1],
            identity=meta[2],
            arguments=arguments,
        )

    def elapsed_ms(self) -> float:
        """Milliseconds since the attempt began."""
        return round((time.perf_counter() - self.t0) * 1000.0, 3)


def scrubbed(attempt: Attempt, text: str | None) -> str | None:
    """``text`` with the attempt's secrets scrubbed, made storable and capped (None stays None)."""
    if text is None:
        return None
    # scrub before truncating: a secret straddling the cut would leave its prefix
    return safe_text(attempt.secrets.scrub(str(text)), MAX_ERROR)


def stored_arguments(arguments: Any, secret_names: frozenset[str]) -> Any:
    """Arguments as recorded: secret fields redacted; a non-object never stored (a marker is)."""
    if arguments is None:
        return None
    if not isinstance(arguments, Mapping):
        return non_object_marker(arguments)
    try:
        return storable_arguments(redact_arguments(arguments, secret_names))
    except Exception:  # a hostile mapping: record that, never fail the record over it
        return {"$unstorable": safe_text(type(arguments).__name__)}


def stored_json(value: Mapping[str, Any] | None, secrets: Secrets) -> dict[str, Any] | None:
    """Caller-supplied diagnostics / identity as recorded: detached JSON, secrets scrubbed."""
    stored = plain_json(value)
    if stored is None or not secrets:
        return stored
    text = encoded_text(stored)
    if secrets.found_in(text if text is not None else repr(stored)):
        return plain_json(secrets.scrub_json(stored))
    return stored


def decision_context(context: AccessContext) -> dict[str, Any] | None:
    """The decision context an attempt records: the trusted ``AccessContext`` as the host
    resolved it and the policy read it (principal, tenant, roles, attributes; the turn id
    is the record's own), as detached, storable JSON (``EvidenceRecord.access_context``
    reads it back). Over ``MAX_STORED_ARGUMENTS`` it is a ``$truncated`` marker."""
    return plain_json(
        {
            "principal": context.principal,
            "tenant": context.tenant,
            "roles": list(context.roles),
            "attributes": dict(context.attributes),
        }
    )


def attempt_record(
    attempt: Attempt, policy_hash: str, context_json: Mapping[str, Any] | None = None
) -> EvidenceRecord:
    """The attempt row: everything known before the handler runs (no outcome).

    ``context_json``: ``decision_context(attempt.context)``, when the caller keeps
    it per context (it is the same for every call of a turn).
    """
    context, decision, tool, secrets = (
        attempt.context,
        attempt.decision,
        attempt.tool,
        attempt.secrets,
    )
    if attempt.stored is not None:
        stored_args, digest = attempt.stored
    else:
        stored_args = stored_arguments(attempt.arguments, attempt.secret_names)
        digest = arguments_digest(stored_args)
    if secrets:
        text = encoded_text(stored_args)
        if secrets.found_in(text if text is not None else repr(stored_args)):
            stored_args = storable_arguments(secrets.scrub_json(stored_args))
            digest = arguments_digest(stored_args)
    catalog = attempt.catalog
    return EvidenceRecord(
        turn_id=context.turn_id,
        call_id=secrets.scrub(attempt.call_id) if secrets else attempt.call_id,
        tool=secrets.scrub(attempt.tool_name) if secrets else attempt.tool_name,
        started_at=attempt.started_at,
        arguments_digest=digest,
        arguments=stored_args,
        effect=str(decision.effect) if decision is not None else None,
        # security: a resource holding a lone surrogate (JSON can carry one) must not
        # make the record unwritable, which would erase the attempt
        resource=scrubbed(attempt, decision.resource)
        if decision is not None and decision.resource is not None
        else None,
        namespace=(decision.namespace if decision is not None else None)
        or (tool.namespace if tool is not None else None),
        action=decision.action if decision is not None else None,
        rule_ids=tuple(rule_id(r) for r in decision.rule_ids) if decision is not None else (),
        catalog_hash=catalog.catalog_hash if catalog is not None else None,
        policy_hash=policy_hash,
        principal=context.principal,
        tenant=context.tenant,
        diagnostics=stored_json(attempt.diagnostics, secrets),
        identity=stored_json(attempt.identity, secrets),
        context=stored_json(
            context_json if context_json is not None else decision_context(context), secrets
        ),
    )


def given_up(
    attempt: Attempt, why: str, bound_s: float, *, ran: bool, had: Ran | None = None
) -> OutcomeRecord:
    """What to write for a write given up on: what the caller was told (or ``cancelled``)."""
    at, ms = now(), attempt.elapsed_ms()
    if why == "cancelled":
        if had is not None and not ran:
            return OutcomeRecord(had.outcome, at, ms, had.reason, had.error)  # a refusal stands
        return OutcomeRecord(Outcome.CANCELLED, at, ms, ReasonCode.CANCELLED, None)
    if ran and had is not None:
        ended = str(had.outcome) + (f"/{had.reason}" if had.reason else "")
        error = (
            f"the outcome could not be committed within {bound_s:g} s; "
            f"the tool had finished: {ended}"
        )
    else:
        error = f"the attempt could not be committed within {bound_s:g} s; nothing ran"
    return OutcomeRecord(Outcome.FAILED, at, ms, ReasonCode.EVIDENCE_UNAVAILABLE, error)
