"""``EvidenceRecord``: one tool-call attempt, as it is stored.

A plain frozen dataclass (it is built on every call); ``to_dict`` /
``from_dict`` give its JSON shape, used by the SQLite store and the JSONL
export. Keys are the field names below (snake_case: this is SharedOS's own
record format, not an MCP wire shape).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import rfc8785

from sharedos import canonical
from sharedos.outcomes import Outcome, ReasonCode

REDACTED = "[redacted]"
#: stored arguments larger than this (bytes of JSON) are replaced by a marker; the digest stays
MAX_STORED_ARGUMENTS = 64 * 1024
#: raw tool strings longer than this are truncated in the record (the length is kept)
MAX_STORED_TOOL = 1024


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

    def access_context(self) -> Any:
        """The ``AccessContext`` this attempt was decided under, rebuilt from ``context``.

        For a replay (deciding the recorded call again under another policy):
        the principal, tenant, roles and attributes the host resolved, and this
        record's turn id. ``ValueError`` when the record has none (written
        before schema 4) or it was too large to keep (a ``$truncated`` marker).
        """
        from sharedos.context import AccessContext

        ctx = self.context
        if not isinstance(ctx, Mapping) or "principal" not in ctx:
            why = "was too large to keep" if ctx else "was not recorded (before schema 4)"
            raise ValueError(f"the decision context of attempt {self.seq} {why}")
        return AccessContext(
            principal=ctx["principal"],
            tenant=ctx.get("tenant", "default"),
            roles=tuple(ctx.get("roles") or ()),
            attributes=dict(ctx.get("attributes") or {}),
            turn_id=self.turn_id,
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


def redact_arguments(arguments: Any, secret_names: Iterable[str]) -> Any:
    """``arguments`` with the values of the named top-level fields replaced by ``"[redacted]"``."""
    secrets = frozenset(secret_names)
    if not secrets or not isinstance(arguments, Mapping):
        return arguments
    return {k: (REDACTED if k in secrets else v) for k, v in arguments.items()}


# Encoders built once (``json.dumps`` with keyword arguments builds a new one per
# call); they hold only immutable configuration.
_STORABLE = json.JSONEncoder(ensure_ascii=True, allow_nan=False).encode


def fast_canonical(arguments: Any) -> bytes | None:
    """RFC 8785 JSON of ``arguments`` from the C encoder, or None when only the general path can say.

    ``sharedos.canonical.fast``: None for integral and extreme floats, huge
    integers, lone surrogates, keys JCS orders differently and nesting too
    deep; ``canonical_arguments`` handles those.
    """
    return canonical.fast(arguments)


def canonical_arguments(arguments: Any) -> bytes:
    """RFC 8785 JSON of ``arguments``; a deterministic fallback for values JCS cannot encode."""
    made = canonical.fast(arguments)
    if made is not None:
        return made
    try:
        return rfc8785.dumps(arguments)
    except Exception:
        pass
    try:
        # NaN, integers beyond 2**53, non-JSON objects: still digest deterministically.
        return json.dumps(arguments, sort_keys=True, default=safe_repr, ensure_ascii=True).encode()
    except Exception:  # too deep, or a mapping that fails while being walked
        return f"<unencodable {type(arguments).__name__}>".encode()


def arguments_digest(arguments: Any) -> str:
    """``sha256:`` + SHA-256 hex of the canonical JSON of ``arguments``."""
    return digest_of_canonical(canonical_arguments(arguments))


def digest_of_canonical(canonical: bytes) -> str:
    """``sha256:`` + SHA-256 hex of already-canonical JSON bytes."""
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


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


def scrub_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each non-empty secret replaced by ``"[redacted]"``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


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
