"""The tamper-evident chain: one hash chain per turn over the store's append-only rows.

Every row a store appends for a turn is one *link* of that turn's chain, in
the order the rows were committed, numbered ``pos`` 0, 1, 2, ... without gaps:

* ``open`` (pos 0): the turn's opening record — its catalogHash, the policy
  bundle hash and revision, the SystemIdentity it was opened with;
* ``attempt``: an attempt row (``EvidenceStore.begin``, or the first half of
  ``record``);
* ``outcome``: an outcome row (``finish``, or the second half of ``record``),
  bound to the attempt it concludes by that attempt's link hash;
* ``seal``: written when the turn closes; it names the head the turn closed on
  and may carry an ed25519 signature of its own hash (``Signer``);
* ``approval`` (schema 5): one event of an approval of one exact call of the
  turn — ``requested``, ``approved``, ``denied``, ``expired`` or
  ``consumed`` — each carrying the whole binding (principal, tenant, tool,
  canonical resource, arguments digest, policy hash, the rules and who may
  approve) and, as it applies, the approver, how they answered and the
  expiry (``sharedos.evidence.approvals``).

A link's hash is ``sha256:`` + SHA-256 of the RFC 8785 (JCS) encoding of one
JSON object: ``kind``, ``prev`` (the hash of the link before it; for pos 0 a
per-turn genesis value) and the row's fields *as stored* (JSON columns as
their stored text, so a verifier needs no JSON re-encoding to agree). The
store-assigned ``seq`` and ``pos`` are not hashed: order is what ``prev``
says, and ``pos`` is a claim ``verify_turn`` checks against it. The two-phase
rows therefore chain naturally: each commit appends one or two links and
costs one SHA-256 over a few hundred bytes (see benchmarks/bench_evidence.py).

What this detects and what it does not (docs/evidence.md): an edited,
deleted, inserted or reordered row is found by anyone who re-walks the chain,
unless the person who changed it also recomputed every later hash. Against
that person the chain needs an anchor outside their reach: the signed seal
(a turn closed with a signing key cannot be rewritten without the key), or
heads copied elsewhere. Deleting a whole turn leaves no trace in the turn
itself; a seal-requiring verification (``--require-seal``) lists turns without one.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import itertools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sharedos import canonical

__all__ = [
    "APPROVAL_FIELDS",
    "ATTEMPT_FIELDS",
    "CHAIN_VERSION",
    "KINDS",
    "LATE_FIELDS",
    "OPEN_FIELDS",
    "OUTCOME_FIELDS",
    "SEAL_FIELDS",
    "Link",
    "Problem",
    "Signer",
    "canonical_object",
    "genesis",
    "link_hash",
    "load_public_key",
    "verify_seal_signature",
    "verify_turn",
]

CHAIN_VERSION = 1
KINDS = ("open", "attempt", "outcome", "seal", "approval")

#: the attempt row's stored fields, in the stores' column order
ATTEMPT_FIELDS = (
    "turn_id",
    "call_id",
    "tool",
    "started_at",
    "arguments_digest",
    "arguments",
    "effect",
    "resource",
    "namespace",
    "action",
    "rule_ids",
    "catalog_hash",
    "policy_hash",
    "principal",
    "tenant",
    "diagnostics",
    "identity",
    "context",
    "shadow",
)
#: fields added to a kind after chain version 1: each hashed only when it is not null,
#: so every link written before it keeps its hash (``context``: the decision context,
#: schema 4; ``shadow``: the shadow policy's decision, schema 5)
LATE_FIELDS: dict[str, tuple[str, ...]] = {"attempt": ("context", "shadow")}
#: the outcome row's stored fields (``of`` is the hash of the attempt link it concludes)
OUTCOME_FIELDS = ("of", "outcome", "reason", "finished_at", "duration_ms", "error")
#: the opening record's stored fields
OPEN_FIELDS = (
    "turn_id",
    "opened_at",
    "catalog_hash",
    "policy_hash",
    "policy_revision",
    "identity",
)
#: the seal's stored fields (``links`` = how many links precede it; ``key_id`` of the signer or null)
SEAL_FIELDS = ("turn_id", "closed_at", "links", "key_id")

#: an approval event's stored fields (schema 5; ``sharedos.evidence.approvals``): the
#: approval and its event, the call it names (the one that asked, or the one that used
#: it), the binding, and the approver, how they answered (``via``) and the expiry
APPROVAL_FIELDS = (
    "turn_id",
    "approval_id",
    "event",
    "event_at",
    "call_id",
    "tool",
    "resource",
    "arguments_digest",
    "policy_hash",
    "principal",
    "tenant",
    "rule_ids",
    "approvers",
    "approver",
    "via",
    "expires_at",
    "detail",
)

FIELDS_OF: dict[str, tuple[str, ...]] = {
    "open": OPEN_FIELDS,
    "attempt": ATTEMPT_FIELDS,
    "outcome": OUTCOME_FIELDS,
    "seal": SEAL_FIELDS,
    "approval": APPROVAL_FIELDS,
}

_encode_str = canonical.encode_string  # C; JCS escaping
_scalar = canonical.scalar


def _key(name: str) -> str:
    return _encode_str(name) + ":"


#: per kind: the JCS key order (all keys are ASCII, so code-point order is UTF-16 order)
#: as (encoded key prefix, index into (kind, prev, *fields)) pairs
_LAYOUT: dict[str, tuple[tuple[str, int], ...]] = {}
#: per kind: the indexes (into (kind, prev, *fields)) of its late fields
_LATE: dict[str, frozenset[int]] = {}
#: per kind and which of its late fields are present (the indexes of those that are):
#: (picks the values in key order, the object's text with a %s per value) -- one C call
#: to pick, one to format
_FORMAT: dict[tuple[str, frozenset[int]], tuple[Callable[[Sequence[Any]], Any], str]] = {}
for _kind, _fields in FIELDS_OF.items():
    _names = ("kind", "prev", *_fields)
    _LAYOUT[_kind] = tuple((_key(n), i) for n, i in sorted((n, i) for i, n in enumerate(_names)))
    _LATE[_kind] = frozenset(_names.index(n) for n in LATE_FIELDS.get(_kind, ()))
    _late = sorted(_LATE[_kind])
    for _n in range(len(_late) + 1):
        for _present in itertools.combinations(_late, _n):
            _absent = _LATE[_kind] - set(_present)
            _kept = [(k, i) for k, i in _LAYOUT[_kind] if i not in _absent]
            _pick = operator.itemgetter(*(i for _, i in _kept))
            _text = "{" + ",".join(k.replace("%", "%%") + "%s" for k, _ in _kept) + "}"
            _FORMAT[(_kind, frozenset(_present))] = (_pick, _text)


def canonical_object(kind: str, prev: str, values: Sequence[Any]) -> bytes:
    """RFC 8785 bytes of ``{"kind": kind, "prev": prev, <fields of kind>: values}``.

    ``values`` are the stored fields of the row in ``FIELDS_OF[kind]`` order;
    each is a string, number, boolean or null (JSON columns as their text). A
    late field (``LATE_FIELDS``) that is null is left out of the object, so a
    link written before the field existed keeps its hash (each late field on its
    own: a row with a context and no shadow decision hashes as at schema 4).
    """
    row = (kind, prev, *values)
    layout = _LAYOUT[kind]
    if len(row) != len(layout):
        raise ValueError(f"{kind} link needs {len(layout) - 2} fields, got {len(values)}")
    late = _LATE[kind]
    pick, fmt = _FORMAT[(kind, frozenset(i for i in late if row[i] is not None))]
    # strings and nulls (nearly every field) without a function call; the rest by _scalar
    text = fmt % tuple(
        [
            _encode_str(v) if type(v) is str else "null" if v is None else _scalar(v)
            for v in pick(row)
        ]
    )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: stores escape them; still deterministic
        return text.encode("utf-8", "backslashreplace")


def link_hash(kind: str, prev: str, values: Sequence[Any]) -> str:
    """``sha256:`` + hex SHA-256 of the link's canonical encoding."""
    return canonical.tag(canonical_object(kind, prev, values))


def genesis(turn_id: str) -> str:
    """The ``prev`` of a turn's first link (bound to the turn id and the chain version)."""
    seed = f"sharedos-evidence-chain/{CHAIN_VERSION}\n{turn_id}".encode("utf-8", "backslashreplace")
    return canonical.tag(seed)


# -- signing ----------------------------------------------------------------------------


def _key_id(public_raw: bytes) -> str:
    # the same id ``sharedos-policy keygen`` prints: SHA-256 (hex) of the raw public key
    return hashlib.sha256(public_raw).hexdigest()


class Signer:
    """An ed25519 private key that signs seals; ``key_id`` names its public key."""

    def __init__(self, private_key: Any) -> None:
        from cryptography.hazmat.primitives import serialization

        self._key = private_key
        public = private_key.public_key()
        self.public_raw: bytes = public.public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.key_id = _key_id(self.public_raw)

    @classmethod
    def generate(cls) -> Signer:
        """A fresh key (tests; operators use ``sharedos-policy keygen``)."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes) -> Signer:
        """A key from PEM (PKCS#8, unencrypted); ``ValueError`` when it is not an ed25519 key."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        key = serialization.load_pem_private_key(data, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("the signing key is not an ed25519 private key")
        return cls(key)

    def private_pem(self) -> bytes:
        """The private key as unencrypted PKCS#8 PEM."""
        from cryptography.hazmat.primitives import serialization

        return bytes(
            self._key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    def public_pem(self) -> bytes:
        """The public key as SubjectPublicKeyInfo PEM (what a verifier is given)."""
        from cryptography.hazmat.primitives import serialization

        return bytes(
            self._key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def sign(self, seal_hash: str) -> str:
        """Base64 ed25519 signature of the seal link's hash string."""
        return base64.b64encode(self._key.sign(seal_hash.encode("ascii"))).decode("ascii")


def load_public_key(data: bytes) -> tuple[Any, str]:
    """(public key, key_id) from PEM; ``ValueError`` when it is not an ed25519 public key."""
    from cryptography.hazmat.primitives import serialization

    from sharedos.pemkeys import load_ed25519_public

    try:
        key = load_ed25519_public(data)
    except ValueError as exc:
        raise ValueError(f"the verification key file {exc}") from None
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return key, _key_id(raw)


def verify_seal_signature(public_key: Any, seal_hash: str, signature: str) -> bool:
    """True when ``signature`` (base64) is the key's signature of ``seal_hash``."""
    from cryptography.exceptions import InvalidSignature

    if not isinstance(signature, str) or not isinstance(seal_hash, str):
        return False  # a stored or given value of another type signs nothing
    try:
        public_key.verify(base64.b64decode(signature, validate=True), seal_hash.encode("ascii"))
    except (InvalidSignature, ValueError):
        return False
    return True


# -- verification -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Link:
    """One link as read back from a store, for ``verify_turn``.

    ``values`` are the row's stored fields in ``FIELDS_OF[kind]`` order; for an
    outcome the first (``of``) is the stored hash of the attempt link with the
    same ``seq`` (None when that attempt is gone). ``values`` is None when the
    link row exists but its content row does not (the content was deleted).
    """

    turn_id: str
    pos: int
    kind: str
    seq: int | None
    prev: str
    hash: str
    values: tuple[Any, ...] | None
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding of ``verify_turn``: ``kind`` is edited, deleted, inserted, reordered, unsealed,
    signature or approval (``damaged``: the store's file itself,
    ``sharedos.evidence.verify.check_file``)."""

    kind: str
    turn_id: str
    position: int | None
    seq: int | None
    detail: str
    #: set for a finding about the store's checkpoints (then ``turn_id`` is empty)
    checkpoint: int | None = None

    def line(self) -> str:
        """One human line: what, where."""
        if self.checkpoint is not None and not self.turn_id:
            return f"{self.kind}: checkpoint {self.checkpoint}: {self.detail}"
        if not self.turn_id:  # about the store as a whole (a damaged file)
            return f"{self.kind}: {self.detail}"
        where = f"position {self.position}" if self.position is not None else "-"
        seq = f" (seq {self.seq})" if self.seq is not None else ""
        return f"{self.kind}: turn {self.turn_id} {where}{seq}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {
            "kind": self.kind,
            "turn_id": self.turn_id,
            "position": self.position,
            "seq": self.seq,
            "detail": self.detail,
            "checkpoint": self.checkpoint,
        }


@dataclass(slots=True)
class TurnReport:
    """What ``verify_turn`` found for one turn."""

    turn_id: str
    links: int
    head: str | None
    sealed: bool = False
    signed_by: str | None = None
    problems: list[Problem] = field(default_factory=list)


def _self_valid(link: Link) -> bool:
    if link.values is None or link.kind not in FIELDS_OF:
        return False
    try:
        return link_hash(link.kind, link.prev, link.values) == link.hash
    except (TypeError, ValueError):
        return False


def verify_turn(
    turn_id: str,
    links: Iterable[Link],
    *,
    public_keys: Mapping[str, Any] | None = None,
    require_seal: bool = False,
    covered: tuple[int, str, int] | Sequence[tuple[int, str, int]] | None = None,
) -> TurnReport:
    """Walk one turn's chain; report every edited, deleted, inserted or reordered link.

    The walk follows ``prev`` pointers from the turn's genesis, using the
    stored hashes (so one edited row is reported once and the walk goes on
    past it). Findings, each with the position where the chain shows it:

    * ``edited``: a link whose stored hash is not the hash of its content
      (for an outcome: also one moved to another attempt);
    * ``deleted``: the chain breaks (a link chains to a hash no link holds:
      the link before it was deleted, or replaced with its hash recomputed),
      or a link's content row is gone;
    * ``inserted``: a link the chain does not go through (a second link at a
      position, one chained to nothing), or a content row with no link
      (``Link.pos == -1``);
    * ``reordered``: links of the chain whose ``pos`` is not their place in it
      (reported where the displacement starts).

    With ``public_keys`` (key_id -> key) every seal must carry a valid
    signature by one of them, and a turn must have a seal (a host that signs
    seals every turn it closes: a turn without one was never closed — a host
    that died, or a turn still running — or had its seal removed);
    ``require_seal`` reports a turn without a seal without keys too.
    ``covered`` is (position, hash, checkpoint number), or a sequence of them:
    the heads store-wide checkpoints recorded for this turn, each of which the
    chain must still hold with that hash (``sharedos.evidence.checkpoint``) —
    every one, not only the furthest: a later checkpoint (one anybody who can
    write the store can take) never vouches for what an earlier one covered.
    """
    ordered = sorted(links, key=lambda lk: (lk.pos, lk.seq if lk.seq is not None else -1))
    problems: list[Problem] = []
    report = TurnReport(turn_id=turn_id, links=0, head=None, problems=problems)

    def add(kind: str, link: Link | None, position: int | None, detail: str) -> None:
        problems.append(
            Problem(kind, turn_id, position, link.seq if link is not None else None, detail)
        )

    linked = [lk for lk in ordered if lk.pos >= 0]
    for lk in ordered:
        if lk.pos < 0:
            add("inserted", lk, None, f"an {lk.kind} row that has no link in the chain")
    report.links = len(linked)
    chain, expected, remaining = _walk(turn_id, linked, add)
    _check_links(chain, expected, remaining, add)
    _stray_links(chain, remaining, add)
    report.head = chain[-1].hash if chain else None
    _check_seals(chain, report, add, public_keys=public_keys, require_seal=require_seal)
    _check_approvals(chain, add)
    if covered:
        _check_covered(chain, _heads(covered), add)
    problems.sort(key=lambda p: (p.position if p.position is not None else -1, p.kind))
    return report


#: how a stage of ``verify_turn`` reports a finding: (kind, link, position, detail)
_Add = Callable[[str, "Link | None", "int | None", str], None]


def _walk(
    turn_id: str, linked: list[Link], add: _Add
) -> tuple[list[Link], list[int], dict[int, Link]]:
    """Stage 1, the walk: from genesis, follow the link whose prev is the current hash.

    Returns the chain, the position each of its links should have (a deletion
    gap shifts it), and the links the walk did not go through (by ``id``).
    """
    by_prev: dict[str, list[Link]] = {}
    for lk in linked:
        by_prev.setdefault(lk.prev, []).append(lk)
    held = {lk.hash for lk in linked}
    chain: list[Link] = []
    expected: list[int] = []
    remaining = {id(lk): lk for lk in linked}
    cur = genesis(turn_id)
    while remaining:
        nexts = [lk for lk in by_prev.get(cur, ()) if id(lk) in remaining]
        if len(nexts) > 1:
            # a fork: the genuine link is the one the rest of the chain goes through
            nexts.sort(key=lambda lk: (-len(by_prev.get(lk.hash, ())), lk.pos))
        if nexts:
            nxt = nexts[0]
        else:
            # the chain stops; a later link chained to a hash nobody holds continues it
            last_pos = chain[-1].pos if chain else -1
            orphans = [lk for lk in remaining.values() if lk.prev not in held and lk.pos > last_pos]
            if not orphans:
                break
            nxt = min(orphans, key=lambda lk: lk.pos)
            gap = nxt.pos - (last_pos + 1)
            add(
                "deleted",
                nxt,
                last_pos + 1,
                f"{gap} link(s) missing before the {nxt.kind} at position {nxt.pos}"
                if gap > 0
                else f"the {nxt.kind} at position {nxt.pos} is chained to a link that is gone "
                "(deleted, or edited with its hash recomputed)",
            )
        following = expected[-1] + 1 if expected else 0
        # after a deletion the chain resumes at the orphan's own position
        expected.append(following if nexts else max(nxt.pos, following))
        chain.append(nxt)
        del remaining[id(nxt)]
        cur = nxt.hash
    return chain, expected, remaining


def _check_links(
    chain: list[Link], expected: list[int], remaining: dict[int, Link], add: _Add
) -> None:
    """Stage 2, every link of the chain: its content, its binding, its place."""
    attempt_hash = {lk.seq: lk.hash for lk in chain if lk.kind == "attempt"}
    chain_positions = {lk.pos for lk in chain}
    # links put in with the chain renumbered around them shift the genuine ones
    shifting = sorted(lk.pos for lk in remaining.values() if lk.pos not in chain_positions)
    offset = 0
    last_seq: int | None = None
    for index, lk in enumerate(chain):
        if lk.values is None:
            add("deleted", lk, lk.pos, f"the {lk.kind} row of this link is gone")
        elif lk.kind == "outcome" and lk.values[0] != attempt_hash.get(lk.seq):
            add("edited", lk, lk.pos, "the outcome no longer concludes the attempt it was bound to")
        elif not _self_valid(lk):
            add("edited", lk, lk.pos, f"the {lk.kind} does not match its hash")
        moved = lk.pos - expected[index] - bisect.bisect_left(shifting, lk.pos)
        if moved != offset and moved != 0:
            add(
                "reordered",
                lk,
                expected[index],
                f"the {lk.kind} stored at position {lk.pos} belongs at position {expected[index]}",
            )
        offset = moved
        if lk.kind == "attempt" and lk.seq is not None:
            # the store numbers rows as they commit, so a turn's attempts have rising seqs
            if last_seq is not None and lk.seq <= last_seq:
                add(
                    "reordered",
                    lk,
                    lk.pos,
                    f"the attempt at this position has seq {lk.seq}, not after the "
                    f"attempt before it (seq {last_seq}): the store's order was changed",
                )
            last_seq = lk.seq


def _stray_links(chain: list[Link], remaining: dict[int, Link], add: _Add) -> None:
    """Stage 3, links the chain does not go through."""
    chain_positions = {lk.pos for lk in chain}
    for lk in remaining.values():
        second = " (a second link at this position)" if lk.pos in chain_positions else ""
        add("inserted", lk, lk.pos, f"a {lk.kind} that is not part of the chain{second}")


def _check_seals(
    chain: list[Link],
    report: TurnReport,
    add: _Add,
    *,
    public_keys: Mapping[str, Any] | None,
    require_seal: bool,
) -> None:
    """Stage 4, the seal: signed by a trusted key (with keys), present when required."""
    seals = [lk for lk in chain if lk.kind == "seal"]
    report.sealed = bool(seals)
    for seal in seals[1:]:
        # a turn closes once: no host writes a second seal (``seal_closed`` checks for one
        # atomically with its append), and one appended after rows past the first would
        # vouch for what the first did not
        add("inserted", seal, seal.pos, "a second seal (a turn is sealed once)")
    if public_keys is not None:
        for seal in seals:
            key_id = seal.values[SEAL_FIELDS.index("key_id")] if seal.values else None
            key = public_keys.get(str(key_id)) if key_id else None
            if key is None or seal.signature is None:
                add(
                    "signature",
                    seal,
                    seal.pos,
                    f"the seal is not signed by a trusted key ({key_id})",
                )
            elif not verify_seal_signature(key, seal.hash, seal.signature):
                add("signature", seal, seal.pos, "the seal's signature does not verify")
            else:
                report.signed_by = str(key_id)
    if (require_seal or public_keys is not None) and not seals:
        add(
            "unsealed",
            None,
            None,
            "the turn has no seal (never closed: its host died or it is still running; or "
            "the store refused its seal as it closed (a lock, a full disk) until its host "
            "ended, which the host said on exit; or its seal was deleted)",
        )


#: what each approval event may follow (None: nothing, it opens the approval's life):
#: requested, then approved or denied, then consumed (approved only) or expired
_APPROVAL_AFTER: dict[str, tuple[str | None, ...]] = {
    "requested": (None,),
    "approved": ("requested",),
    "denied": ("requested",),
    "consumed": ("approved",),
    "expired": ("requested", "approved"),
}
#: the fields of an approval event that are its binding (equal in every event of it)
_APPROVAL_BINDING = tuple(
    APPROVAL_FIELDS.index(name)
    for name in (
        "turn_id",
        "tool",
        "resource",
        "arguments_digest",
        "policy_hash",
        "principal",
        "tenant",
    )
)


def _check_approvals(chain: list[Link], add: _Add) -> None:
    """Stage 4b, the approvals: each approval's events follow its life, in chain order.

    Every event is a well-hashed link, so an event its approval's life does not
    allow — a ``consumed`` with no ``approved`` before it (a call that ran on no
    yes), an answer after the approval lapsed, an event of an approval never
    requested, one bound to another call than its request, or any event after the
    turn's seal — is a finding (``approval``): the hash chain alone says the rows
    are as written, not that what they say could have happened.
    """
    last: dict[str, str] = {}
    binding: dict[str, tuple[Any, ...]] = {}
    event_at = APPROVAL_FIELDS.index("event")
    id_at = APPROVAL_FIELDS.index("approval_id")
    sealed = False
    for lk in chain:
        if lk.kind == "seal":
            sealed = True
        if lk.kind != "approval" or lk.values is None:
            continue
        approval_id, event = str(lk.values[id_at]), str(lk.values[event_at])
        if sealed:
            # nothing of an approval is written to a closed turn (the ledger refuses a request
            # or an answer on a sealed chain; the close expires every open approval before its
            # seal): the chain grows past a seal only by refusals of late calls, and a signed
            # seal vouches for none of it
            add(
                "approval",
                lk,
                lk.pos,
                f"approval {approval_id}: {event!r} after the turn's seal (no approval event "
                "is written to a closed turn)",
            )
        bound = tuple(lk.values[i] for i in _APPROVAL_BINDING)
        before = last.get(approval_id)
        allowed = _APPROVAL_AFTER.get(event)
        if allowed is None:
            add("approval", lk, lk.pos, f"approval {approval_id}: unknown event {event!r}")
        elif before not in allowed:
            after = f"after {before!r}" if before is not None else "with no request before it"
            add(
                "approval",
                lk,
                lk.pos,
                f"approval {approval_id}: {event!r} {after} (its life allows it only after "
                + " or ".join(repr(a) if a else "nothing" for a in allowed)
                + ")",
            )
        elif event != "requested" and bound != binding.get(approval_id):
            add(
                "approval",
                lk,
                lk.pos,
                f"approval {approval_id}: {event!r} is bound to another call than its request",
            )
        if event == "requested" and approval_id not in binding:
            binding[approval_id] = bound
        last[approval_id] = event


def _heads(
    covered: tuple[int, str, int] | Sequence[tuple[int, str, int]],
) -> list[tuple[int, str, int]]:
    """``covered`` as a list of heads (one head given alone is a list of one)."""
    if covered and isinstance(covered[0], int):
        return [cast("tuple[int, str, int]", covered)]
    return list(cast("Sequence[tuple[int, str, int]]", covered))


def _check_covered(chain: list[Link], covered: list[tuple[int, str, int]], add: _Add) -> None:
    """Stage 5, the checkpoints: the chain still holds every head they covered, with its hash.

    Said once per cause: the furthest covered head the chain no longer reaches
    (``deleted``), and the furthest one it holds with another hash (``edited``).
    """
    at = {lk.pos: lk.hash for lk in chain}
    gone: tuple[int, str, int] | None = None
    changed: tuple[int, str, int] | None = None
    for head in covered:
        pos, hash_, _number = head
        if pos not in at:
            if gone is None or pos > gone[0]:
                gone = head
        elif at[pos] != hash_ and (changed is None or pos > changed[0]):
            changed = head
    if gone is not None:
        pos, _hash, number = gone
        end = chain[-1].pos if chain else -1
        add(
            "deleted",
            None,
            pos,
            f"checkpoint {number} covered this turn up to position {pos}; the chain now "
            f"ends at position {end}: what was committed before the checkpoint is gone",
        )
    if changed is not None:
        pos, _hash, number = changed
        add(
            "edited",
            None,
            pos,
            f"the link at this position is not the one checkpoint {number} covered",
        )
