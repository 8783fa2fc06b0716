"""Approvals in the evidence store: each one a short life of chained events (schema 5).

An approval lets one exact call that needs approval (``Effect.
APPROVAL_REQUIRED``, docs/approvals.md) run once. It is never a row that
changes: it is the events written for it, each a link of its turn's chain
(``chain.APPROVAL_FIELDS``), in the order the chain gives them:

* ``requested`` — the call that asked: its binding (principal, tenant, turn,
  tool, canonical resource, arguments digest, policy hash), the approval rules
  that applied and who may approve; ``expires_at`` is when the request lapses;
* ``approved`` or ``denied`` — the answer, with the approver the host
  resolved and how they answered (``via``: ``cli``, ``elicitation``, ``page``);
  an approval's ``expires_at`` is when it can no longer be used;
* ``consumed`` — the call that used it (once), or ``expired`` — it lapsed.

The store's unique indexes (``chain_sql.approval_indexes``) let each approval
be requested once, decided once and closed once, in the database itself: two
hosts racing to use one approval cannot both write ``consumed`` — the loser
gets ``ApprovalTaken``. Everything is appended; nothing is updated, so hosts
keep needing only ``SELECT`` and ``INSERT``. ``Approval`` is the fold of an
approval's events; ``ApprovalLedger`` writes and reads them through a store
(``append_approval`` / ``approval_rows``, both backends).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

from sharedos.errors import EvidenceError
from sharedos.evidence.chain import APPROVAL_FIELDS
from sharedos.evidence.store import EvidenceStoreError

if TYPE_CHECKING:
    from sharedos.evidence.appender import Fence

__all__ = [
    "EVENTS",
    "MAX_TTL_S",
    "VIAS",
    "Approval",
    "ApprovalError",
    "ApprovalEvent",
    "ApprovalLedger",
    "ApprovalPending",
    "ApprovalTaken",
    "Binding",
    "approved_calls",
    "fold",
    "new_approval_id",
]

Event = Literal["requested", "approved", "denied", "expired", "consumed"]
EVENTS: tuple[Event, ...] = ("requested", "approved", "denied", "expired", "consumed")
#: how an approver answered: the operator's CLI, an MCP elicitation answered at the
#: client, the local approvals page
VIAS = ("cli", "elicitation", "page")
Status = Literal["pending", "approved", "denied", "expired", "consumed"]

#: a request not answered within this many seconds lapses (``[approvals] request_ttl_s``)
DEFAULT_REQUEST_TTL_S = 3600.0
#: an approval not used within this many seconds lapses (``[approvals] approval_ttl_s``)
DEFAULT_APPROVAL_TTL_S = 900.0
#: the longest a request or an approval may live (about ten years): its expiry must be a
#: time the stores can write (an infinite or larger lifetime is refused where it is set)
MAX_TTL_S = 10 * 366 * 86400.0


class ApprovalTaken(EvidenceStoreError):
    """The store already holds that step of that approval: another writer (another call,
    another host) requested, decided or closed it first. Cause ``conflict``."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "conflict")


class ApprovalError(EvidenceError, ValueError):
    """An approval cannot take that step (unknown, already answered, lapsed, used)."""


class ApprovalPending(ApprovalError):
    """A request for that exact call is already pending (``approval``): name it, ask anew
    nothing (two identical calls at once made two requests of one call)."""

    def __init__(self, approval: Approval) -> None:
        super().__init__(f"approval {approval.approval_id} is already pending for this call")
        self.approval = approval


def now_iso(when: datetime | None = None) -> str:
    """UTC ``when`` (default now) in the stores' timestamp format."""
    moment = when or datetime.now(UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_iso(text: str | None) -> datetime | None:
    """A stored timestamp back as an aware datetime (None when absent or unreadable)."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def new_approval_id() -> str:
    """A fresh approval id: ``apr-`` and 20 lower-case base32 characters (100 random bits)."""
    import base64

    return "apr-" + base64.b32encode(secrets.token_bytes(15)).decode("ascii").lower()[:20]


@dataclass(frozen=True, slots=True)
class Binding:
    """What an approval is for: one exact call, by one person, in one turn, under one policy.

    A call may use an approval only when every field is equal (docs/approvals.md,
    "Binding"): another argument, turn, principal or policy needs a new one.
    """

    turn_id: str
    principal: str
    tenant: str
    tool: str
    resource: str
    arguments_digest: str
    policy_hash: str

    def differences(self, other: Binding) -> list[str]:
        """The fields in which ``other`` differs (empty: the same call)."""
        names = (
            "turn_id",
            "principal",
            "tenant",
            "tool",
            "resource",
            "arguments_digest",
            "policy_hash",
        )
        return [n for n in names if getattr(self, n) != getattr(other, n)]


@dataclass(frozen=True, slots=True)
class ApprovalEvent:
    """One stored event of an approval (a chain link of kind ``approval``)."""

    approval_id: str
    event: str
    event_at: str
    call_id: str | None
    binding: Binding
    rule_ids: tuple[str, ...]
    approvers: tuple[tuple[tuple[str, str], ...], ...]
    approver: str | None
    via: str | None
    expires_at: str | None
    detail: str | None
    seq: int | None = None
    pos: int | None = None

    @classmethod
    def from_values(
        cls, values: Sequence[Any], seq: int | None = None, pos: int | None = None
    ) -> ApprovalEvent:
        """From stored fields in ``APPROVAL_FIELDS`` order."""
        row = dict(zip(APPROVAL_FIELDS, values, strict=True))
        return cls(
            approval_id=str(row["approval_id"]),
            event=str(row["event"]),
            event_at=str(row["event_at"]),
            call_id=row["call_id"],
            binding=Binding(
                turn_id=str(row["turn_id"]),
                principal=str(row["principal"]),
                tenant=str(row["tenant"]),
                tool=str(row["tool"]),
                resource=str(row["resource"]),
                arguments_digest=str(row["arguments_digest"]),
                policy_hash=str(row["policy_hash"]),
            ),
            rule_ids=tuple(_json_list(row["rule_ids"])),
            approvers=tuple(
                tuple((str(k), str(n)) for k, n in entry)
                for entry in _json_list(row["approvers"])
                if isinstance(entry, list)
            ),
            approver=row["approver"],
            via=row["via"],
            expires_at=row["expires_at"],
            detail=row["detail"],
            seq=seq,
            pos=pos,
        )


def _asked_seq(approval: Approval) -> int:
    """The store's number of the approval's ``requested`` event (its commit order)."""
    seq = approval.events[0].seq if approval.events else None
    return seq if seq is not None else -1


def _json_list(text: Any) -> list[Any]:
    if not isinstance(text, str):
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def event_values(
    approval_id: str,
    event: str,
    binding: Binding,
    *,
    call_id: str | None,
    rule_ids: Sequence[str],
    approvers: Sequence[Sequence[Sequence[str]]],
    approver: str | None = None,
    via: str | None = None,
    expires_at: str | None = None,
    detail: str | None = None,
    at: str | None = None,
) -> list[Any]:
    """The stored fields of one event, in ``APPROVAL_FIELDS`` order (JSON columns as text)."""
    compact = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode
    return [
        binding.turn_id,
        approval_id,
        event,
        at or now_iso(),
        call_id,
        binding.tool,
        binding.resource,
        binding.arguments_digest,
        binding.policy_hash,
        binding.principal,
        binding.tenant,
        compact(list(rule_ids)),
        compact([[list(a) for a in entry] for entry in approvers]),
        approver,
        via,
        expires_at,
        detail,
    ]


@dataclass(frozen=True, slots=True)
class Approval:
    """An approval as its events say it stands (``fold``)."""

    approval_id: str
    binding: Binding
    rule_ids: tuple[str, ...]
    approvers: tuple[tuple[tuple[str, str], ...], ...]
    request_call: str | None
    requested_at: str
    request_expires_at: str | None
    status: Status = "pending"
    approver: str | None = None
    via: str | None = None
    decided_at: str | None = None
    expires_at: str | None = None
    closed_call: str | None = None
    closed_at: str | None = None
    detail: str | None = None
    events: tuple[ApprovalEvent, ...] = field(default=())

    def status_at(self, when: datetime | None = None, *, max_age_s: float | None = None) -> Status:
        """The status at ``when`` (now): a pending request or an unused approval past its
        expiry reads as ``expired`` even before anyone wrote that down.

        ``max_age_s``: the longest an approval may be used after its answer where it is
        judged (the using host's ``approval_ttl_s``): the approver stamped its expiry with
        their own lifetime (``sharedos approvals approve --db`` without a host file: the
        default 15 minutes), which must not outlast the host's bound."""
        moment = when or datetime.now(UTC)
        if self.status == "pending":
            lapse = parse_iso(self.request_expires_at)
            if lapse is not None and moment >= lapse:
                return "expired"
        if self.status == "approved":
            lapse = self.lapses_at(max_age_s)
            if lapse is None or moment >= lapse:
                return "expired"
        return self.status

    def lapses_at(self, max_age_s: float | None = None) -> datetime | None:
        """When an approval lapses unused: its expiry, or ``max_age_s`` after its answer when
        that comes first (``status_at``); None when it has no expiry."""
        lapse = parse_iso(self.expires_at)
        decided = parse_iso(self.decided_at)
        if lapse is not None and max_age_s is not None and decided is not None:
            lapse = min(lapse, decided + timedelta(seconds=max_age_s))
        return lapse

    def who_may_approve(self) -> str:
        """``role 'maintainer' or group 'release'`` (``; and`` between rules)."""
        return "; and ".join(
            " or ".join(f"{kind} {name!r}" for kind, name in entry) for entry in self.approvers
        )

    def may_be_approved_by(self, roles: Iterable[str], groups: Iterable[str]) -> bool:
        """True when someone with ``roles`` and ``groups`` satisfies every rule's approvers."""
        have = {("role", r) for r in roles} | {("group", g) for g in groups}
        return bool(self.approvers) and all(
            any((k, n) in have for k, n in entry) for entry in self.approvers
        )

    def to_dict(
        self, when: datetime | None = None, *, max_age_s: float | None = None
    ) -> dict[str, Any]:
        """JSON-ready form (``sharedos approvals list|show --format json``; ``max_age_s``
        as for ``status_at``)."""
        b = self.binding
        return {
            "approval_id": self.approval_id,
            "status": self.status_at(when, max_age_s=max_age_s),
            "turn_id": b.turn_id,
            "principal": b.principal,
            "tenant": b.tenant,
            "tool": b.tool,
            "resource": b.resource,
            "arguments_digest": b.arguments_digest,
            "policy_hash": b.policy_hash,
            "rule_ids": list(self.rule_ids),
            "approvers": [[{"kind": k, "name": n} for k, n in e] for e in self.approvers],
            "request_call": self.request_call,
            "requested_at": self.requested_at,
            "request_expires_at": self.request_expires_at,
            "approver": self.approver,
            "via": self.via,
            "decided_at": self.decided_at,
            "expires_at": self.expires_at,
            "closed_call": self.closed_call,
            "closed_at": self.closed_at,
            "detail": self.detail,
            "events": [
                {
                    "event": e.event,
                    "at": e.event_at,
                    "call_id": e.call_id,
                    "approver": e.approver,
                    "via": e.via,
                    "seq": e.seq,
                    "pos": e.pos,
                }
                for e in self.events
            ],
        }


def fold(events: Iterable[ApprovalEvent]) -> dict[str, Approval]:
    """Each approval's standing from its events (in chain order), by approval id.

    Events whose approval was never requested, or that disagree with its
    request's binding, are not folded in (``verify`` reports them).
    """
    out: dict[str, Approval] = {}
    for ev in events:
        current = out.get(ev.approval_id)
        if ev.event == "requested":
            if current is None:
                out[ev.approval_id] = Approval(
                    approval_id=ev.approval_id,
                    binding=ev.binding,
                    rule_ids=ev.rule_ids,
                    approvers=ev.approvers,
                    request_call=ev.call_id,
                    requested_at=ev.event_at,
                    request_expires_at=ev.expires_at,
                    events=(ev,),
                )
            continue
        if current is None or current.binding != ev.binding:
            continue
        events_so_far = (*current.events, ev)
        if ev.event in ("approved", "denied") and current.status == "pending":
            current = replace(
                current,
                status="approved" if ev.event == "approved" else "denied",
                approver=ev.approver,
                via=ev.via,
                decided_at=ev.event_at,
                expires_at=ev.expires_at,
                detail=ev.detail,
            )
        elif ev.event == "consumed" and current.status == "approved":
            current = replace(
                current, status="consumed", closed_call=ev.call_id, closed_at=ev.event_at
            )
        elif ev.event == "expired" and current.status in ("pending", "approved"):
            current = replace(current, status="expired", closed_at=ev.event_at)
        out[ev.approval_id] = replace(current, events=events_so_far)
    return out


class ApprovalStore(Protocol):
    """What a store gives the ledger (both backends at schema 5)."""

    def append_approval(
        self,
        values: Sequence[Any],
        check: Callable[[], None] | None = None,
        fence: Fence | None = None,
    ) -> str:
        """Append one approval event to its turn's chain; its link hash (``check``, when
        given, reads the store and refuses the append, atomically with it; ``fence``, when
        given, runs just before the commit, once the store let the write in, and refuses it
        by raising)."""
        ...

    def approval_rows(
        self,
        *,
        turn_id: str | None = None,
        approval_id: str | None = None,
        arguments_digest: str | None = None,
    ) -> list[tuple[int, int | None, list[Any]]]:
        """Approval events as (seq, pos, values in ``APPROVAL_FIELDS`` order), chain order
        (each filter, when given, keeps the events whose column equals it)."""
        ...


class ApprovalLedger:
    """Writes and reads approvals through one store (its methods are synchronous and may
    block: the kernel calls them off the event loop)."""

    def __init__(self, store: Any) -> None:
        if not callable(getattr(store, "append_approval", None)) or not callable(
            getattr(store, "approval_rows", None)
        ):
            raise EvidenceStoreError(
                "this evidence store keeps no approvals (it needs schema 5: run "
                "`sharedos evidence migrate`)",
                "io",
            )
        self.store = store

    # -- reading -------------------------------------------------------------------

    def _events(self, **where: Any) -> list[ApprovalEvent]:
        rows = self.store.approval_rows(**where)
        return [ApprovalEvent.from_values(values, seq, pos) for seq, pos, values in rows]

    def get(self, approval_id: str) -> Approval | None:
        """The approval ``approval_id`` as its events say (None: no such request)."""
        return fold(self._events(approval_id=approval_id)).get(approval_id)

    def for_turn(self, turn_id: str) -> list[Approval]:
        """Every approval requested in one turn, oldest first."""
        return list(fold(self._events(turn_id=turn_id)).values())

    def every(self) -> list[Approval]:
        """Every approval of the store, oldest first (by when its request was committed:
        the store gives the events turn by turn, in the order of the turns' ids)."""
        return sorted(fold(self._events()).values(), key=_asked_seq)

    def turn_closed(self, turn_id: str) -> bool:
        """True when the turn's chain has its seal: its calls can no longer be retried, so
        its approvals can no longer be answered or used (nothing is appended after a seal)."""
        has_seal = getattr(self.store, "has_seal", None)
        if callable(has_seal):
            return bool(has_seal(turn_id))
        links = getattr(self.store, "iter_links", None)
        if links is None:
            return False
        return any(link.kind == "seal" for link in links(turn_id))

    def matching(self, binding: Binding) -> list[Approval]:
        """The approvals of the binding's turn for exactly this call, oldest first.

        Read by the turn *and* the arguments digest (every event of an approval carries
        its binding): a call that needs approval reads this twice, once under the store's
        writer, and reading the whole turn made it cost as much as every request the turn
        had made — a model asking 1,000 distinct calls made each next one fold 1,000
        approvals, holding every other call's evidence write meanwhile."""
        events = self._events(turn_id=binding.turn_id, arguments_digest=binding.arguments_digest)
        return [a for a in fold(events).values() if a.binding == binding]

    # -- writing -------------------------------------------------------------------

    def _append(
        self,
        values: list[Any],
        check: Callable[[], None] | None = None,
        fence: Fence | None = None,
    ) -> None:
        if fence is not None:
            self.store.append_approval(values, check, fence)
        elif check is None:
            self.store.append_approval(values)
        else:
            self.store.append_approval(values, check)

    def request(
        self,
        binding: Binding,
        *,
        call_id: str,
        rule_ids: Sequence[str],
        approvers: Sequence[Sequence[Sequence[str]]],
        ttl_s: float = DEFAULT_REQUEST_TTL_S,
        detail: str | None = None,
        when: datetime | None = None,
        same: Callable[[Approval], bool] | None = None,
    ) -> Approval:
        """Record a new request for the call ``call_id``; the pending approval.
        ``ApprovalError`` when the turn has closed (its chain is sealed); with ``same``,
        ``ApprovalPending`` when a pending request of this binding for which ``same`` is
        true is in the store when the request would be appended (checked atomically with
        the append: of identical calls at once, one asks and the others name its request)."""
        moment = when or datetime.now(UTC)
        approval_id = new_approval_id()
        values = event_values(
            approval_id,
            "requested",
            binding,
            call_id=call_id,
            rule_ids=rule_ids,
            approvers=approvers,
            expires_at=now_iso(moment + timedelta(seconds=ttl_s)),
            detail=detail,
            at=now_iso(moment),
        )

        def turn_open() -> None:
            # a call that reached a closed turn (a stdio bridge that has not seen the close)
            # asks nothing: its request could never be answered, nor its call retried
            if self.turn_closed(binding.turn_id):
                raise ApprovalError(
                    f"turn {binding.turn_id} has closed: a call of it can no longer be "
                    "approved (a new turn asks anew)"
                )
            if same is not None:
                for found in self.matching(binding):
                    if found.status_at(moment) == "pending" and same(found):
                        raise ApprovalPending(found)

        self._append(values, turn_open)
        made = fold([ApprovalEvent.from_values(values)]).get(approval_id)
        assert made is not None
        return made

    def _step(
        self,
        approval: Approval,
        event: str,
        *,
        call_id: str | None = None,
        approver: str | None = None,
        via: str | None = None,
        expires_at: str | None = None,
        detail: str | None = None,
        when: datetime | None = None,
        check: Callable[[], None] | None = None,
        fence: Fence | None = None,
    ) -> Approval:
        values = event_values(
            approval.approval_id,
            event,
            approval.binding,
            call_id=call_id,
            rule_ids=approval.rule_ids,
            approvers=approval.approvers,
            approver=approver,
            via=via,
            expires_at=expires_at,
            detail=detail,
            at=now_iso(when),
        )
        self._append(values, check, fence)
        folded = fold([*approval.events, ApprovalEvent.from_values(values)])
        return folded[approval.approval_id]

    def answer(
        self,
        approval_id: str,
        *,
        approve: bool,
        approver: str,
        via: str,
        ttl_s: float = DEFAULT_APPROVAL_TTL_S,
        detail: str | None = None,
        when: datetime | None = None,
    ) -> Approval:
        """Approve or deny a pending request, once. ``ApprovalError`` when it is unknown,
        already answered or lapsed (a lapsed request gets its ``expired`` event);
        ``ApprovalTaken`` when another answer landed first. Whether ``approver`` may
        answer is the caller's to check (``Approval.may_be_approved_by``)."""
        if via not in VIAS:
            raise ApprovalError(f"unknown way of answering {via!r}")
        moment = when or datetime.now(UTC)
        approval = self.get(approval_id)
        if approval is None:
            raise ApprovalError(f"no approval {approval_id!r} was requested")
        self._answerable(approval, moment)

        def still_pending() -> None:
            # the answer lands only on the request as the store holds it at the append: an
            # ``expired`` (the turn closing, a host finding it lapsed) or a seal written by
            # another process since the read above refuses it, never an answer after them
            again = self.get(approval_id)
            if again is None:
                raise ApprovalError(f"no approval {approval_id!r} was requested")
            # (no write here: the append holds the store's writer)
            self._answerable(again, moment, record_lapse=False)

        return self._step(
            approval,
            "approved" if approve else "denied",
            approver=approver,
            via=via,
            expires_at=now_iso(moment + timedelta(seconds=ttl_s)) if approve else None,
            detail=detail,
            when=moment,
            check=still_pending,
        )

    def _answerable(
        self, approval: Approval, moment: datetime, *, record_lapse: bool = True
    ) -> None:
        """``ApprovalError`` unless ``approval`` is pending at ``moment`` and its turn open
        (a lapsed request gets its ``expired`` event, with ``record_lapse``)."""
        approval_id = approval.approval_id
        status = approval.status_at(moment)
        if status == "expired" and approval.status == "pending":
            if record_lapse:
                self.expire(approval, when=moment, detail="the request lapsed before an answer")
            raise ApprovalError(
                f"approval {approval_id} lapsed at {approval.request_expires_at}, unanswered"
            )
        if status != "pending":
            raise ApprovalError(f"approval {approval_id} is {status}, not pending")
        if self.turn_closed(approval.binding.turn_id):
            raise ApprovalError(
                f"approval {approval_id} is for a call of turn {approval.binding.turn_id}, "
                "which has closed: that call can no longer be retried (a new turn asks anew)"
            )

    def consume(
        self,
        approval: Approval,
        *,
        call_id: str,
        when: datetime | None = None,
        max_age_s: float | None = None,
        fence: Fence | None = None,
    ) -> Approval:
        """Use an approved approval for the call ``call_id``, once across every host.

        ``ApprovalError`` when it is not approved or has lapsed (a lapsed one gets
        its ``expired`` event; ``max_age_s`` as for ``Approval.status_at``);
        ``ApprovalTaken`` when another call used it (or expired it) first. The caller
        has checked the binding. ``fence`` runs just before the ``consumed`` event's
        commit and refuses it by raising (the caller gave the write up meanwhile); it
        returns how long the commit may still land (``Plan.fence``).
        """
        moment = when or datetime.now(UTC)
        status = approval.status_at(moment, max_age_s=max_age_s)
        lapsed = ApprovalError(f"approval {approval.approval_id} lapsed at {approval.expires_at}")
        if status == "expired" and approval.status == "approved":
            self.expire(approval, when=moment, detail="it lapsed before it was used")
            raise lapsed
        if status != "approved":
            raise ApprovalError(f"approval {approval.approval_id} is {status}, not approved")

        def still_good() -> float | None:
            # judged again at the commit: a write the store made wait (a lock held by another
            # writer) past the approval's expiry landed, and its call ran on a lapsed approval
            left = fence() if fence is not None else None
            if when is None:
                now = datetime.now(UTC)
                if approval.status_at(now, max_age_s=max_age_s) == "expired":
                    raise lapsed
                # nor may it land past the lapse (a server frozen before it read the commit)
                lapse = approval.lapses_at(max_age_s)
                if lapse is not None:
                    until = (lapse - now).total_seconds()
                    left = until if left is None else min(left, until)
            return left

        try:
            return self._step(approval, "consumed", call_id=call_id, when=moment, fence=still_good)
        except ApprovalError as exc:
            if exc is lapsed:
                self.expire(approval, detail="it lapsed before it was used")
            raise

    def expire(
        self, approval: Approval, *, when: datetime | None = None, detail: str | None = None
    ) -> Approval | None:
        """Record that ``approval`` lapsed (None when another writer closed it first)."""
        try:
            return self._step(approval, "expired", detail=detail, when=when)
        except ApprovalTaken:
            return None


def approved_calls(store: Any, turn_id: str | None = None) -> frozenset[tuple[str, str]]:
    """(turn id, call id) of every call that ran on an approval (its ``consumed`` event):
    the calls recorded ``allow`` whose policy decision was ``approval_required``.

    Replay and the shadow report compare a recorded decision with a policy's; for
    these calls the policy's was ``approval_required`` (a yes let the call run), so
    that is the decision they compare, never the ``allow`` the approval made of it.
    Empty for a store that keeps no approvals (before schema 6)."""
    rows = getattr(store, "approval_rows", None)
    if not callable(rows):
        return frozenset()
    where = {} if turn_id is None else {"turn_id": turn_id}
    events = (ApprovalEvent.from_values(values, seq, pos) for seq, pos, values in rows(**where))
    return frozenset(
        (a.binding.turn_id, a.closed_call)
        for a in fold(events).values()
        if a.status == "consumed" and a.closed_call is not None
    )


def values_of_row(row: Mapping[str, Any]) -> list[Any]:
    """A mapping of ``APPROVAL_FIELDS`` as a stored values list (tests, copies)."""
    return [row.get(name) for name in APPROVAL_FIELDS]
