"""``EvidenceRecord``: one tool-call attempt, as it is stored.

A plain frozen dataclass (it is built on every call); ``to_dict`` /
``from_dict`` give its JSON shape, used by the SQLite store and the JSONL
export. Keys are the field names below (snake_case: this is SharedOS's own
record format, not an MCP wire shape).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sharedos import canonical
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.redaction import Redactor, non_object_marker, redact_fields

if TYPE_CHECKING:
    from sharedos.context import AccessContext

#: stored arguments larger than this (bytes of JSON) are replaced by a marker; the digest stays
MAX_STORED_ARGUMENTS = 64 * 1024
#: raw tool strings longer than this are truncated in the record (the length is kept)
MAX_STORED_TOOL = 1024
#: the value types a shallow copy of an object detaches (immutable)
_FLAT = frozenset({str, int, bool, type(None)})
#: recorded (and shown) error texts are capped at this many characters, after scrubbing
MAX_ERROR = 2000
#: arguments up to this size (bytes of canonical JSON) are stored from the bytes their
#: digest is made of (one encoding per call); larger ones take the general path, which
#: applies the storage cap
ONE_PASS_MAX = MAX_STORED_ARGUMENTS // 8


@dataclass(frozen=True, slots=True)
class OutcomeRecord:
    """How an attempt ended: the second of its two rows (``EvidenceStore.finish``)."""

    outcome: Outcome
    finished_at: str
    duration_ms: float
    reason: ReasonCode | None = None
    error: str | None = None


#: the fields of ``EvidenceRecord`` that belong to the outcome row, not the attempt row
OUTCOME_FIELDS = ("outcome", "reason", "finished_at", "duration_ms", "error")


@dataclass(frozen=True, slots=True)
class EvidenceRecord:
    """One attempt, with its outcome when it has one.

    As written by ``EvidenceStore.begin`` the outcome fields are ``None``; as
    read back they are ``None`` exactly when the attempt was interrupted
    (``status == "interrupted"``). ``seq`` is assigned by the store (``None``
    before it is recorded).
    """

    turn_id: str
    call_id: str
    tool: str
    started_at: str
    arguments_digest: str
    outcome: Outcome | None = None
    finished_at: str | None = None
    duration_ms: float | None = None
    arguments: Any = None
    reason: ReasonCode | None = None
    effect: str | None = None
    resource: str | None = None
    namespace: str | None = None
    action: str | None = None
    rule_ids: tuple[str, ...] = ()
    error: str | None = None
    catalog_hash: str | None = None
    policy_hash: str | None = None
    principal: str | None = None
    tenant: str | None = None
    diagnostics: Mapping[str, Any] | None = None
    identity: Mapping[str, Any] | None = None
    #: the decision context: the trusted AccessContext the host resolved, as the
    #: policy saw it (``{"principal", "tenant", "roles", "attributes"}``); None for
    #: records written before schema 4. ``access_context()`` reads it back.
    context: Mapping[str, Any] | None = None
    #: the shadow policy's decision of this call (``[policy] shadow``), recorded beside
    #: the one enforced and never acted on: ``{"policy", "effect", "reason", "rule_ids"}``
    #: (``"resource"`` when it differs from the enforced one), or ``{"policy", "error"}``
    #: when the shadow failed; None without a shadow policy, and before schema 5
    shadow: Mapping[str, Any] | None = None
    seq: int | None = None

    @property
    def status(self) -> str:
        """The outcome's value, or ``"interrupted"`` for an attempt with no outcome."""
        return str(self.outcome) if self.outcome is not None else "interrupted"

    @property
    def outcome_record(self) -> OutcomeRecord | None:
        """The outcome row of this record, or None for a bare attempt."""
        if self.outcome is None:
            return None
        return OutcomeRecord(
            outcome=self.outcome,
            finished_at=self.finished_at or self.started_at,
            duration_ms=self.duration_ms if self.duration_ms is not None else 0.0,
            reason=self.reason,
            error=self.error,
        )

    @property
    def served_by(self) -> str | None:
        """Which credential served this call at a brokered upstream, as ``UPSTREAM:IDENTITY``
        (``docs:principal:alice``, ``git:shared``), from ``diagnostics.servedBy``; None for a
        call no upstream served (a built-in tool, a refusal)."""
        diag = self.diagnostics
        served = diag.get("servedBy") if isinstance(diag, Mapping) else None
        if not isinstance(served, Mapping):
            return None
        return f"{served.get('upstream', '?')}:{served.get('credential', '?')}"

    def access_context(self) -> Any:
        """The ``AccessContext`` this attempt was decided under, rebuilt from ``context``.

        For a replay (deciding the recorded call again under another policy):
        the principal, tenant, roles and attributes the host resolved, and this
        record's turn id. ``ValueError`` when the record has none (written
        before schema 4), it was too large to keep (a ``$truncated`` marker), or
        it is not a context SharedOS records (roles that are not a list of
        strings, attributes that are not an object, a principal that is no
        identifier: changed outside SharedOS), which is never read loosely
        into another context (a string of roles into its characters).
        """
        from sharedos.context import AccessContext

        ctx = self.context
        if not isinstance(ctx, Mapping) or "principal" not in ctx:
            why = "was too large to keep" if ctx else "was not recorded (before schema 4)"
            raise ValueError(f"the decision context of attempt {self.seq} {why}")
        roles = ctx.get("roles", [])
        attributes = ctx.get("attributes", {})
        if not isinstance(roles, list) or not isinstance(attributes, Mapping):
            raise ValueError(
                f"the decision context of attempt {self.seq} is not one SharedOS records "
                "(roles not a list, or attributes not an object)"
            )
        return AccessContext.model_validate(
            {
                "principal": ctx["principal"],
                "tenant": ctx.get("tenant", "default"),
                "roles": tuple(roles),
                "attributes": dict(attributes),
                "turn_id": self.turn_id,
            },
            strict=True,
        )

    def with_outcome(self, outcome: OutcomeRecord) -> EvidenceRecord:
        """This attempt concluded by ``outcome``."""
        return replace(
            self,
            outcome=outcome.outcome,
            reason=outcome.reason,
            finished_at=outcome.finished_at,
            duration_ms=outcome.duration_ms,
            error=outcome.error,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (enums as their string values), with the derived ``status``."""
        out = asdict(self)
        out["outcome"] = str(self.outcome) if self.outcome is not None else None
        out["reason"] = str(self.reason) if self.reason is not None else None
        out["rule_ids"] = list(self.rule_ids)
        out["status"] = self.status
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvidenceRecord:
        """Inverse of ``to_dict`` (``status`` is derived and ignored); unknown keys are refused."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k != "status"}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown evidence fields: {sorted(unknown)}")
        if values.get("outcome") is not None:
            values["outcome"] = Outcome(values["outcome"])
        if values.get("reason") is not None:
            values["reason"] = ReasonCode(values["reason"])
        values["rule_ids"] = tuple(values.get("rule_ids") or ())
        return cls(**values)


def safe_repr(value: object) -> str:
    """``repr(value)``, or a placeholder when ``repr`` itself fails (hostile or too deep)."""
    try:
        return repr(value)
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"


def safe_text(value: object, limit: int = MAX_STORED_TOOL) -> str:
    """A string that SQLite/UTF-8 can store: lone surrogates escaped, non-strings repr'd, capped."""
    text = value if isinstance(value, str) else safe_repr(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > limit:
        text = f"{text[:limit]}...[truncated, {len(text)} chars]"
    return text


# Encoders built once (``json.dumps`` with keyword arguments builds a new one per
# call); they hold only immutable configuration.
_STORABLE = json.JSONEncoder(ensure_ascii=True, allow_nan=False).encode

#: ``sha256:`` + SHA-256 of the RFC 8785 encoding of ``arguments`` (``sharedos.canonical``)
arguments_digest = canonical.digest


#: The text form of every JSON value the evidence store writes: compact, ASCII-only
#: (lone surrogates and control characters stay storable as SQLite TEXT), and
#: never failing on a stray non-JSON object (``repr`` of it instead).
storable_json_text = json.JSONEncoder(
    ensure_ascii=True, separators=(",", ":"), default=safe_repr
).encode


class EncodedJson(dict[str, Any]):
    """A JSON object that also carries the JSON text it was decoded from.

    Built on the per-call path (arguments, diagnostics, identity) so that the
    SQLite store writes ``text`` as is instead of encoding the object a second
    time. It is an ordinary ``dict`` to everyone else; a copy (``dict(x)``,
    ``dataclasses.asdict``) is a plain object without the text. Treat it as
    immutable: the text is not kept in step with later changes.
    """

    __slots__ = ("text",)

    def __init__(
        self, obj: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), text: str = ""
    ) -> None:
        super().__init__(obj)
        self.text = text

    @classmethod
    def decode(cls, text: str) -> EncodedJson:
        """The object ``text`` encodes (which must be a JSON object), with ``text`` kept."""
        return cls(json.loads(text), text)


def encoded_text(value: Any) -> str | None:
    """The JSON text an ``EncodedJson`` carries, else None."""
    return value.text if type(value) is EncodedJson and value.text else None


def storable_arguments(arguments: Any) -> Any:
    """A JSON copy of ``arguments`` within the size cap, else a marker dict."""
    try:
        text = _STORABLE(arguments)
    except Exception:  # not JSON, NaN, too deep (RecursionError), hostile objects
        # security: never a repr of the arguments (it would carry their secrets)
        return {"$unstorable": safe_text(type(arguments).__name__)}
    if len(text) > MAX_STORED_ARGUMENTS:
        return {"$truncated": True, "$bytes": len(text)}
    # a detached copy: nothing done to the caller's object later can change the record
    return json.loads(text)


def plain_json(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A JSON-safe, detached copy of caller-supplied diagnostics / identity (never raises).

    The copy is an ``EncodedJson`` (the store writes its text as is). Passing one
    back in returns it unchanged: a bridge encodes its per-turn identity once.
    """
    if not value:
        return None
    if encoded_text(value) is not None:
        return value  # type: ignore[return-value]  # EncodedJson is a dict
    try:
        text = storable_json_text(dict(value))
    except Exception:
        return {"$unstorable": safe_text(type(value).__name__)}
    if len(text) > MAX_STORED_ARGUMENTS:
        return {"$truncated": True, "$bytes": len(text)}
    return EncodedJson.decode(text)  # a dict always encodes to a JSON object


def now_iso() -> str:
    """UTC now, ISO 8601 with microseconds and a ``Z`` (every record's timestamps)."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def iso(at: float) -> str:
    """``at`` (seconds since the epoch, ``time.time()``) as a record timestamp (``now_iso``'s form)."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _elapsed_ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


def _capped(text: str, limit: int) -> str:
    """``text`` (already storable) capped as ``safe_text`` caps it."""
    return text if len(text) <= limit else f"{text[:limit]}...[truncated, {len(text)} chars]"


def scrubbed_error(text: str | None, redactor: Redactor) -> str | None:
    """An error text as recorded and shown: secrets scrubbed, storable, capped (None stays None)."""
    if text is None:
        return None
    # scrub before truncating: a secret straddling the cut would leave its prefix
    return safe_text(redactor.scrub(str(text)) if redactor.needles else str(text), MAX_ERROR)


def concluded(
    outcome: Outcome, reason: ReasonCode | None, error: str | None, t0: float, redactor: Redactor
) -> OutcomeRecord:
    """The outcome row of an attempt timed from ``t0`` (``time.perf_counter``), ending now;
    ``error`` scrubbed by ``redactor``, made storable and capped."""
    return OutcomeRecord(
        outcome, now_iso(), _elapsed_ms(t0), reason, scrubbed_error(error, redactor)
    )


def stored_json(value: Mapping[str, Any] | None, redactor: Redactor) -> dict[str, Any] | None:
    """Caller-supplied JSON (diagnostics, identity, the decision context) as recorded:
    detached, storable, capped, secrets scrubbed (the rows of calls, and a turn's opening
    record: ``evidence_turn``)."""
    stored = plain_json(value)
    if stored is None or not redactor.needles:
        return stored
    text = encoded_text(stored)
    if redactor.found_in(text if text is not None else repr(stored)):
        return plain_json(redactor.scrub_json(stored))
    return stored


def _stored_arguments(
    arguments: Any, encoded: tuple[bytes, str] | None, secret_names: frozenset[str]
) -> tuple[Any, str]:
    """The arguments as recorded, and their digest: secret fields redacted, a non-object
    never stored (a marker is), large ones capped; from ``encoded`` (their RFC 8785
    bytes and its tag) when that needs no change, so they are encoded once per call."""
    if arguments is None:
        return None, arguments_digest(None)  # absent stays absent, not {}
    if (
        encoded is not None
        and not secret_names  # redacted ones are stored and digested redacted
        and len(encoded[0]) <= ONE_PASS_MAX
        and type(arguments) is dict
    ):
        data, digest = encoded
        # a detached copy: flat immutable values copied shallowly, anything else decoded
        copied = (
            dict(arguments)
            if all(type(v) in _FLAT for v in arguments.values())
            else json.loads(data)
        )
        return EncodedJson(copied, data.decode("utf-8")), digest
    if not isinstance(arguments, Mapping):
        stored: Any = non_object_marker(arguments)
    else:
        try:
            stored = storable_arguments(redact_fields(arguments, secret_names))
        except Exception:  # a hostile mapping: record that, never fail the record over it
            stored = {"$unstorable": safe_text(type(arguments).__name__)}
    return stored, arguments_digest(stored)


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
    *,
    context: AccessContext,
    call_id: object,
    tool: object,
    started: float,
    arguments: Any,
    encoded: tuple[bytes, str] | None,
    secret_names: frozenset[str],
    redactor: Redactor,
    decision: Any,
    namespace: str | None,
    catalog_hash: str | None,
    policy_hash: str | None,
    diagnostics: Mapping[str, Any] | None,
    identity: Mapping[str, Any] | None,
    context_json: Mapping[str, Any] | None,
    ended: tuple[Outcome, ReasonCode | None, str | None, float] | None = None,
    shadow: Mapping[str, Any] | None = None,
) -> EvidenceRecord:
    """The attempt row of one call, built once from what its authorization found.

    Every field is made storable and scrubbed by ``redactor`` here, in one
    place: the raw ``tool`` and ``call_id`` (capped), ``started`` (``time.time()``), the ``arguments`` as
    received (``secret_names`` redacted; ``encoded``, their RFC 8785 bytes and
    digest, spares a second encoding), the ``decision``'s resource, the
    ``diagnostics``, ``identity`` and decision context (``context_json``:
    ``decision_context(context)``, which a caller may keep per context).
    ``namespace`` is the tool's, for a call no decision was made for.
    ``ended`` = (outcome, reason, error, t0) makes the complete record of a
    call refused before any handler (one commit). ``shadow``: the shadow
    policy's decision of the call (``sharedos.kernel.shadow``), stored like the
    other caller-supplied JSON.
    """
    scrubs = bool(redactor.needles)
    stored_args, digest = _stored_arguments(arguments, encoded, secret_names)
    if scrubs:
        text = encoded_text(stored_args)
        if redactor.found_in(text if text is not None else repr(stored_args)):
            stored_args = storable_arguments(redactor.scrub_json(stored_args))
            digest = arguments_digest(stored_args)
    if scrubs:
        # scrub before capping: a secret straddling the cut would leave its prefix
        call_text = _capped(redactor.scrub(safe_text(call_id, sys.maxsize)), 256)
        tool_text = _capped(redactor.scrub(safe_text(tool, sys.maxsize)), MAX_STORED_TOOL)
    else:
        call_text, tool_text = safe_text(call_id, 256), safe_text(tool)
    if decision is not None:
        resource = decision.resource
        # security: a resource holding a lone surrogate (JSON can carry one) must not
        # make the record unwritable, which would erase the attempt
        resource = scrubbed_error(resource, redactor) if resource is not None else None
        rule_ids = tuple(_rule_id(r) for r in decision.rule_ids)
        effect: str | None = str(decision.effect)
        namespace = decision.namespace or namespace
        action = decision.action
    else:
        resource, rule_ids, effect, action = None, (), None, None
    if context_json is None:
        context_json = decision_context(context)
    if ended is None:
        outcome = reason = finished_at = duration_ms = error = None
    else:
        outcome, reason, error, t0 = ended
        finished_at, duration_ms = now_iso(), _elapsed_ms(t0)
        error = scrubbed_error(error, redactor)
    return EvidenceRecord(
        turn_id=context.turn_id,
        call_id=call_text,
        tool=tool_text,
        started_at=iso(started),
        arguments_digest=digest,
        arguments=stored_args,
        effect=effect,
        resource=resource,
        namespace=namespace,
        action=action,
        rule_ids=rule_ids,
        catalog_hash=catalog_hash,
        policy_hash=policy_hash,
        principal=context.principal,
        tenant=context.tenant,
        diagnostics=stored_json(diagnostics, redactor),
        identity=stored_json(identity, redactor),
        context=stored_json(context_json, redactor),
        shadow=stored_json(shadow, redactor),
        outcome=outcome,
        reason=reason,
        finished_at=finished_at,
        duration_ms=duration_ms,
        error=error,
    )


def _rule_id(ref: Any) -> str:
    """The id string of a ``RuleRef`` (or of anything printable)."""
    rid = getattr(ref, "id", None)
    return str(rid) if rid is not None else str(ref)
