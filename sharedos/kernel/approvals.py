"""The approval step: a call that needs approval runs only with a yes to that exact call.

The policy answers ``approval_required`` (a permit allows the call and an
approval rule applies; ``sharedos.policy.approvals``). This step then looks,
in the evidence store, for an approval bound to exactly this call
(``Binding``: principal, tenant, turn, tool, canonical resource, arguments
digest, policy hash) and:

1. **uses it** when one was approved and has not lapsed: its ``consumed``
   event is written (once across every host: ``ApprovalTaken`` for the
   loser) and the call goes on as allowed;
2. otherwise, **asks the client** (MCP elicitation, form mode) when the
   client declared elicitation on a channel that can carry a request to it,
   and the person at the client — whom SharedOS takes to be the turn's
   principal, with the roles the host resolved for them and the groups the
   host puts them in — may give the approval: the request is written, the
   question names the tool, the canonical resource and the arguments digest;
   an accept (``approve: true``) is written as ``approved`` by the principal
   ``via`` elicitation and consumed at once; anything else (decline, cancel,
   no answer in time) refuses the call;
3. otherwise **refuses** it (``approval_required``) naming a pending
   approval id — the one already pending for this exact call, or a new
   request — which an operator answers out of band (``sharedos approvals``);
   the same call, retried once approved, then runs (1).

Everything here is evidence (``sharedos.evidence.approvals``) written before
the call can run; a store that cannot be written refuses the call.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from sharedos import canonical
from sharedos.evidence.approvals import (
    DEFAULT_APPROVAL_TTL_S,
    DEFAULT_REQUEST_TTL_S,
    MAX_TTL_S,
    Approval,
    ApprovalError,
    ApprovalLedger,
    ApprovalPending,
    ApprovalTaken,
    Binding,
)
from sharedos.evidence.record import arguments_digest
from sharedos.evidence.store import EvidenceStoreError
from sharedos.outcomes import Effect, ReasonCode
from sharedos.terminal import unambiguous

if TYPE_CHECKING:
    from sharedos.kernel.authorize import Authorization

__all__ = [
    "ApprovalGate",
    "ApprovalSettings",
    "GateAnswer",
    "approved_decision",
    "elicitation_form",
    "settle",
]

logger = logging.getLogger("sharedos.approvals")

#: a ``consumed`` write is waited for at most this many evidence timeouts
#: (``ApprovalGate.consume_wait_s``)
CONSUME_WAITS = 4

#: the one field of the elicitation form: the answer to "approve this exact call?"
APPROVE_FIELD = "approve"


@dataclass(frozen=True, slots=True)
class ApprovalSettings:
    """How a host handles approvals (``[approvals]`` in the host file, docs/approvals.md).

    ``groups`` maps a group an approval rule may name to its members
    (principal names of the tenant ``groups_tenant``: another tenant's rita is
    not this rita); ``approvers`` maps an approver's name to the roles the
    host gives them when they answer out of band (``sharedos approvals``).
    """

    request_ttl_s: float = DEFAULT_REQUEST_TTL_S
    approval_ttl_s: float = DEFAULT_APPROVAL_TTL_S
    elicitation: bool = True
    elicitation_timeout_s: float = 120.0
    groups: Mapping[str, frozenset[str]] = field(default_factory=dict)
    approvers: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: the tenant whose principals ``groups`` names (the context's default tenant)
    groups_tenant: str = "default"

    def __post_init__(self) -> None:
        # each lifetime becomes an expiry time the store writes: a non-finite or
        # too long one would fail every call that needs approval, not at start
        for name in ("request_ttl_s", "approval_ttl_s", "elicitation_timeout_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value <= MAX_TTL_S):
                raise ValueError(
                    f"[approvals] {name} must be a number of seconds above 0 and at most "
                    f"{MAX_TTL_S:g}, not {value!r}"
                )

    def as_json(self) -> dict[str, Any]:
        """The settings as JSON (a standalone stdio turn file carries them to its bridge)."""
        return {
            "request_ttl_s": self.request_ttl_s,
            "approval_ttl_s": self.approval_ttl_s,
            "elicitation": self.elicitation,
            "elicitation_timeout_s": self.elicitation_timeout_s,
            "groups": {g: sorted(members) for g, members in self.groups.items()},
            "approvers": {name: sorted(roles) for name, roles in self.approvers.items()},
            "groups_tenant": self.groups_tenant,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ApprovalSettings:
        """The settings ``as_json`` wrote (``ValueError``/``TypeError`` for anything else)."""

        def names(value: Any) -> dict[str, frozenset[str]]:
            if not isinstance(value, Mapping):
                raise TypeError("a mapping of names to lists of names")
            return {str(k): frozenset(str(v) for v in members) for k, members in value.items()}

        elicitation = data["elicitation"]
        if not isinstance(elicitation, bool):
            raise TypeError("elicitation must be true or false")
        return cls(
            request_ttl_s=float(data["request_ttl_s"]),
            approval_ttl_s=float(data["approval_ttl_s"]),
            elicitation=elicitation,
            elicitation_timeout_s=float(data["elicitation_timeout_s"]),
            groups=names(data["groups"]),
            approvers=names(data["approvers"]),
            groups_tenant=str(data["groups_tenant"]),
        )

    def groups_of(self, name: str, tenant: str | None = None) -> frozenset[str]:
        """The groups the host puts ``name`` in; none for a principal of a tenant other
        than ``groups_tenant`` (``tenant`` None: an out-of-band approver, a host login)."""
        if tenant is not None and tenant != self.groups_tenant:
            return frozenset()
        return frozenset(g for g, members in self.groups.items() if name in members)

    def roles_of(self, name: str) -> frozenset[str]:
        """The roles the host gives ``name`` as an out-of-band approver."""
        return self.approvers.get(name, frozenset())


@dataclass(frozen=True, slots=True)
class GateAnswer:
    """What the approval step decided: run (``approval`` was consumed for this call) or
    refuse (``approval`` is the pending request, if one could be written)."""

    run: bool
    approval: Approval | None = None
    detail: str | None = None
    #: who may approve, as the model is told it
    who: str = ""
    #: the evidence store failed this step (unreadable, unwritable, no answer in time):
    #: the call fails as ``evidence_unavailable``, never a denial
    unavailable: bool = False

    def payload(self) -> dict[str, Any]:
        """The refusal payload's approval fields (wire spelling)."""
        out: dict[str, Any] = {"approvers": self.who}
        if self.approval is not None:
            out["approvalId"] = self.approval.approval_id
            out["approvalStatus"] = self.approval.status
            # pending: a retry once approved runs; approved (by another answer that
            # landed first, unused): a retry runs now
            out["retry"] = self.approval.status in ("pending", "approved")
        else:
            out["retry"] = False
        return out


def elicitation_form(binding: Binding, approval: Approval) -> tuple[str, dict[str, Any]]:
    """The message and form schema of the question put to the person at the client."""
    # every field shown spelled unambiguously: a resource (or a name) holding a bidi
    # override, a zero-width mark or a line separator must not make the person read
    # another call than the one that will run
    tool, resource = unambiguous(binding.tool), unambiguous(binding.resource)
    message = (
        f"SharedOS approval {approval.approval_id}: approve this exact call?\n"
        f"tool: {tool}\n"
        f"resource: {resource}\n"
        f"arguments digest: {binding.arguments_digest}\n"
        f"needed from: {unambiguous(approval.who_may_approve())}\n"
        "Approving lets this one call run once, in this turn only."
    )
    schema = {
        "type": "object",
        "properties": {
            APPROVE_FIELD: {
                "type": "boolean",
                "title": "Approve this call",
                "description": (f"Run {tool} on {resource} once (approval {approval.approval_id})"),
            }
        },
        "required": [APPROVE_FIELD],
    }
    return message, schema


def _accepted(answer: Mapping[str, Any]) -> bool:
    """True only for ``accept`` with ``approve: true`` (anything else is no)."""
    if answer.get("action") != "accept":
        return False
    content = answer.get("content")
    return isinstance(content, Mapping) and content.get(APPROVE_FIELD) is True


class ApprovalGate:
    """The approval step of one host: its ledger (the evidence store) and its settings.

    ``run_sync`` runs a ledger call off the event loop (the host's writer
    lane); every call is bounded by ``timeout_s``.
    """

    def __init__(
        self,
        ledger: ApprovalLedger,
        settings: ApprovalSettings | None = None,
        *,
        timeout_s: float = 2.0,
        run_sync: Callable[..., Any] | None = None,
    ) -> None:
        self.ledger = ledger
        self.settings = settings or ApprovalSettings()
        self.timeout_s = timeout_s
        self._run_sync = run_sync
        #: per turn, the calls that have taken (or are taking) their approval and so run to
        #: their recorded outcome whatever their caller does (``_use``): the turn's seal
        #: waits for them (``RuntimeHost.finish_taken``), so their outcomes precede it
        self.taken: dict[str, int] = {}

    @property
    def consume_wait_s(self) -> float:
        """How long a ``consumed`` write is waited for (``_use``): well past the store's own
        bounds on a write (SQLite's busy timeout, PostgreSQL's lock and statement timeouts,
        a write queued ahead of it), which answer within the evidence timeout or about it;
        a store still silent then does not answer (the call fails ``timeout``)."""
        return CONSUME_WAITS * self.timeout_s

    def release(self, turn_id: str) -> None:
        """A call of ``turn_id`` that had taken its approval (``_use``) has ended."""
        left = self.taken.get(turn_id, 0) - 1
        if left > 0:
            self.taken[turn_id] = left
        else:
            self.taken.pop(turn_id, None)

    async def _use(
        self,
        approval: Approval,
        *,
        call_id: str,
        hold: anyio.CancelScope | None,
        max_age_s: float | None = None,
    ) -> Approval:
        """Consume ``approval`` for the call ``call_id``: the point of no return.

        An approval is spent exactly when its call runs. From the moment its ``consumed``
        event may be written, ``hold`` (the scope of the rest of the call,
        ``RuntimeHost.invoke_tool``) is shielded, so the call runs to its recorded outcome
        whatever its caller does meanwhile (``notifications/cancelled``, a deadline, the
        turn closing): cancelled then, the event landed from an abandoned thread and the
        call never ran — the approval read "used by call …" of a call that had no effect,
        and its retry had to be approved again. The write is waited for, not abandoned at
        the evidence timeout (the store bounds it: SQLite's busy timeout, PostgreSQL's lock
        and statement timeouts): only the store's own answer says whether it was spent —
        within ``consume_wait_s``, past which the store does not answer (a hung disk) and
        the call fails ``TimeoutError``. A write that failed leaves it unspent (``hold``
        unshielded again), so a retry uses it.
        """
        turn_id = approval.binding.turn_id
        if hold is not None:
            # a call already cancelled does not take the approval at all
            await anyio.lowlevel.checkpoint_if_cancelled()
            hold.shield = True
            # released by the call's end (``RuntimeHost.invoke_tool``)
            self.taken[turn_id] = self.taken.get(turn_id, 0) + 1

        # set once the write is given up (below): a write still waiting for the store then
        # (its lock, a frozen server) is refused at its commit, never landing afterwards —
        # the approval spent on a call refused "nothing ran", which its retry could not use
        given_up = threading.Event()
        # when it is given up: a server frozen between the fence and the commit (its COMMIT
        # not read yet) and thawed after that must not commit it either (``Plan.fence``)
        gives_up = time.monotonic() + self.consume_wait_s

        def fence() -> float:
            if given_up.is_set():
                raise EvidenceStoreError(
                    f"the write marking approval {approval.approval_id} used was given up "
                    f"after {self.consume_wait_s:g} s",
                    "timeout",
                )
            return gives_up - time.monotonic()

        def consume() -> Approval:
            return self.ledger.consume(approval, call_id=call_id, max_age_s=max_age_s, fence=fence)

        try:
            # not given up at ``timeout_s``: given up at the evidence timeout, the write went
            # on and landed, and the call refused "nothing ran" had spent its approval all
            # the same. Waited for while the store bounds it itself, but not for ever: a
            # store that does not answer at all (a hung disk, a frozen server) held the
            # call, shielded from every cancellation, for as long as it hung
            with anyio.fail_after(self.consume_wait_s):
                used: Approval = await (
                    self._run_sync(consume)
                    if self._run_sync is not None
                    else anyio.to_thread.run_sync(consume, abandon_on_cancel=True)
                )
        except BaseException:
            given_up.set()
            if hold is not None:
                hold.shield = False
                self.release(turn_id)
            raise
        return used

    async def _off_loop(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        def call() -> Any:
            return fn(*args, **kw)

        with anyio.fail_after(self.timeout_s):
            if self._run_sync is not None:
                return await self._run_sync(call)
            return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)

    @staticmethod
    def binding(
        turn_id: str,
        principal: str,
        tenant: str,
        tool: str,
        resource: str,
        arguments: Any,
        policy_hash: str,
        secret_names: Iterable[str] = (),
    ) -> Binding:
        """The binding of one call (the digest is over the arguments as the handler gets them,
        each field named in ``secret_names`` by its keyed hash under a key of this turn and
        principal: ``bound_arguments``)."""
        bound = bound_arguments(arguments, secret_names, scope=(tenant, principal, turn_id))
        return Binding(
            turn_id=turn_id,
            principal=principal,
            tenant=tenant,
            tool=tool,
            resource=resource,
            arguments_digest=arguments_digest(bound),
            policy_hash=policy_hash,
        )

    async def gate(
        self,
        binding: Binding,
        *,
        call_id: str,
        need: Any,
        roles: Iterable[str],
        peer: Any = None,
        hold: anyio.CancelScope | None = None,
    ) -> GateAnswer:
        """Decide whether the call ``call_id`` (which needs approval ``need``) runs now.

        ``roles`` are the caller's (the principal's, as the host resolved
        them); ``peer`` the transport's back channel (``HandlerContext.peer``); ``hold``
        the scope of the rest of the call, shielded once an approval is taken (``_use``).
        Never raises but on cancellation: a store that cannot be read or
        written refuses the call.
        """
        rule_ids = tuple(r.id for r in need.rules)
        approvers = tuple(tuple(entry) for entry in need.approvers)
        who = need.describe()
        try:
            found = await self._off_loop(self.ledger.matching, binding)
        except (EvidenceStoreError, TimeoutError) as exc:
            return GateAnswer(
                False, None, f"the approvals could not be read ({_why(exc)})", who, True
            )
        now = datetime.now(UTC)
        # an approval lives no longer here than this host's ``approval_ttl_s`` after its
        # answer, whatever life its approver stamped on it
        max_age = self.settings.approval_ttl_s

        def status_of(a: Approval) -> str:
            return a.status_at(now, max_age_s=max_age)

        notes: list[str] = []
        # an approval (or a request) is for this call only when it was for every approval
        # rule the call needs now: the rules that apply may change within one binding (a
        # condition on ``context.now``), and a yes to the rules of the request is no yes to
        # a rule that applies since
        usable = [a for a in found if covers(a, rule_ids, approvers)]
        notes += [
            f"approval {a.approval_id} was for other approval rules "
            f"({', '.join(a.rule_ids) or 'none'}), not for {', '.join(rule_ids)}"
            for a in found
            if a not in usable and status_of(a) in ("pending", "approved")
        ]
        for approval in usable:
            if status_of(approval) != "approved":
                continue
            try:
                used = await self._use(approval, call_id=call_id, hold=hold, max_age_s=max_age)
            except ApprovalTaken:
                notes.append(f"approval {approval.approval_id} was used by another call first")
                continue
            except ApprovalError as exc:
                notes.append(str(exc))
                continue
            except (EvidenceStoreError, TimeoutError) as exc:
                return GateAnswer(
                    False,
                    None,
                    f"the approval could not be recorded as used ({_why(exc)})",
                    who,
                    True,
                )
            return GateAnswer(True, used, None, who)
        for approval in found:
            if approval.status in ("pending", "approved") and status_of(approval) == "expired":
                # a lapse is evidence too: written when a call finds it
                try:
                    await self._off_loop(
                        self.ledger.expire, approval, detail=f"found lapsed by call {call_id}"
                    )
                except (EvidenceStoreError, TimeoutError) as exc:
                    logger.warning(
                        "approvals: could not record that %s lapsed: %s", approval.approval_id, exc
                    )
        pending = [a for a in usable if status_of(a) == "pending"]
        notes += _history(usable, now, max_age)
        if pending:
            return GateAnswer(False, pending[0], _join(notes) or None, who)
        principal = binding.principal
        groups = self.settings.groups_of(principal, binding.tenant)
        not_asked = self._not_asked(peer, need, principal, tuple(roles), tuple(groups))
        can_ask = not_asked is None
        if not_asked is not None:
            notes.append(f"not asked at the client: {not_asked}")
        try:
            # shielded (bounded by timeout_s): a cancellation meanwhile (the client's, the
            # turn closing) is taken after the write, when the request it wrote is known, and
            # by ``_ask``, which closes it as silence closes it. Abandoned in its thread, the
            # write landed after the call went away, and the request stayed pending with no
            # one asked: the retry of this call named it and was never asked at the client
            # (``_ask``), "waiting for an approver" until it lapsed.
            with anyio.CancelScope(shield=can_ask):
                request = await self._off_loop(
                    self.ledger.request,
                    binding,
                    call_id=call_id,
                    rule_ids=rule_ids,
                    approvers=approvers,
                    ttl_s=self.settings.request_ttl_s,
                    detail=_join(notes) or None,
                    same=lambda a: covers(a, rule_ids, approvers),
                )
        except ApprovalPending as exc:
            # an identical call asked first, since this one read the store: its request is
            # this call's too (it asks nothing anew, as when it was pending at the read)
            return GateAnswer(False, exc.approval, _join(notes) or None, who)
        except ApprovalError as exc:  # the turn has closed: nothing to wait for
            return GateAnswer(False, None, _join([*notes, str(exc)]), who)
        except (EvidenceStoreError, TimeoutError) as exc:
            return GateAnswer(
                False, None, f"the approval request could not be recorded ({_why(exc)})", who, True
            )
        if not can_ask:
            return GateAnswer(False, request, _join(notes) or None, who)
        return await self._ask(binding, request, call_id=call_id, peer=peer, who=who, hold=hold)

    def _not_asked(
        self,
        peer: Any,
        need: Any,
        principal: str,
        roles: tuple[str, ...],
        groups: tuple[str, ...],
    ) -> str | None:
        """Why the person at the client is not asked (None: they are), first reason first:
        said to the model and recorded, so what each client could do is in the evidence."""
        if not self.settings.elicitation:
            return "elicitation is off on this host ([approvals] elicitation)"
        if peer is None or not bool(getattr(peer, "can_request", True)):
            return "this call's channel cannot carry a request to the client"
        if not _can_elicit(peer):
            return "the client declared no elicitation"
        if not need.satisfied_by(roles, groups):
            return f"{principal} may not give this approval"
        return None

    async def _ask(
        self,
        binding: Binding,
        request: Approval,
        *,
        call_id: str,
        peer: Any,
        who: str,
        hold: anyio.CancelScope | None = None,
    ) -> GateAnswer:
        """Elicitation: the person at the client (the turn's principal) answers at once."""
        message, schema = elicitation_form(binding, request)
        client = _client_name(peer)
        answer: Mapping[str, Any] | None = None
        why = ""
        try:
            with anyio.move_on_after(self.settings.elicitation_timeout_s) as scope:
                answer = await peer.elicit(message, schema)
            if scope.cancelled_caught:
                why = f"no answer from the client within {self.settings.elicitation_timeout_s:g} s"
        except anyio.get_cancelled_exc_class():
            # the call went away while its question was shown (the client cancelled it, the
            # turn is closing): no answer will come, so the request is closed as silence
            # closes it. Left pending, the retry of this call named it and was never asked
            # at the client — "waiting for an approver" until it lapsed, an hour by default.
            with anyio.CancelScope(shield=True):
                await self._lapse(
                    request, "the call was cancelled while the client was asked, unanswered"
                )
            raise
        except Exception as exc:  # the client refused the request, or the channel broke
            why = f"the client could not be asked ({type(exc).__name__}: {str(exc)[:200]})"
            answer = None
        if answer is None:
            await self._lapse(request, why)
            closed = await self._reread(request)
            return GateAnswer(False, closed, why, who)
        approve = _accepted(answer)
        action = str(answer.get("action"))
        detail = f"answered {action} at the client{client}"
        try:
            decided = await self._off_loop(
                self.ledger.answer,
                request.approval_id,
                approve=approve,
                approver=binding.principal,
                via="elicitation",
                ttl_s=self.settings.approval_ttl_s,
                detail=detail,
            )
        except (ApprovalError, EvidenceStoreError, TimeoutError) as exc:
            return await self._not_written(exc, request, "the answer could not be recorded", who)
        if not approve:
            said = {"decline": "declined", "cancel": "cancelled"}.get(action, "did not approve")
            return GateAnswer(
                False,
                decided,
                f"the person at the client{client} {said} approval {request.approval_id}",
                who,
            )
        try:
            used = await self._use(decided, call_id=call_id, hold=hold)
        except (ApprovalError, EvidenceStoreError, TimeoutError) as exc:
            return await self._not_written(exc, decided, "the approval could not be used", who)
        return GateAnswer(True, used, None, who)

    async def _lapse(self, request: Approval, why: str) -> None:
        """Record that ``request`` closed unanswered at the client (``expired``; nothing when
        another writer closed it first; a store that fails is logged: the call is refused
        either way)."""
        try:
            await self._off_loop(self.ledger.expire, request, detail=why)
        except (EvidenceStoreError, TimeoutError) as exc:
            logger.warning(
                "approvals: could not record that %s lapsed: %s", request.approval_id, exc
            )

    async def _not_written(
        self, exc: Exception, approval: Approval, what: str, who: str
    ) -> GateAnswer:
        """The refusal of a call whose answer or use of ``approval`` was not written: with
        the approval as it stands now (another answer may have landed first: the refusal
        must not call a denied or used approval one still waiting), unless the store
        itself failed (then it cannot be read either)."""
        failed = _store_failed(exc)
        now = approval if failed else await self._reread(approval)
        return GateAnswer(False, now, f"{what} ({_why(exc)})", who, failed)

    async def _reread(self, approval: Approval) -> Approval:
        try:
            again = await self._off_loop(self.ledger.get, approval.approval_id)
        except (EvidenceStoreError, TimeoutError):
            return approval
        return again if again is not None else approval


def approved_decision(decision: Any, approval: Approval) -> Any:
    """``decision`` (``approval_required``) once ``approval`` was used for the call: allowed,
    with the same rules (the approval rules that asked, then the permits)."""
    detail = (
        f"{decision.detail}; approved by {approval.approver} via {approval.via} "
        f"(approval {approval.approval_id})"
    )
    if dataclasses.is_dataclass(decision) and not isinstance(decision, type):
        return dataclasses.replace(
            decision, effect=Effect.ALLOW, reason=ReasonCode.ALLOWED, detail=detail
        )
    raise TypeError("an approval_required decision that is not a dataclass")


async def settle(
    gate: ApprovalGate | None,
    auth: Authorization,
    call: Any,
    context: Any,
    policy_hash: str,
    peer: Any,
    hold: anyio.CancelScope | None = None,
) -> Authorization:
    """The kernel's approval step for a call authorized ``approval_required`` (between
    authorization and the attempt's row): one ``Authorization`` to another.

    Allowed (``reason`` ``allowed``, the decision turned into an allow that names the
    approver) when an approval of this exact call was used; otherwise the refusal —
    ``approval_required`` with the approval fields in ``approval``, or
    ``internal_error``. Never raises but on cancellation (fail closed). ``hold``: the
    scope the rest of the call runs in, shielded from cancellation once an approval is
    taken for it (``ApprovalGate._use``): allowed, it runs to its recorded outcome."""
    decision, tool, args = auth.decision, auth.tool, auth.args
    need = getattr(decision, "approval", None)
    if gate is None or need is None or decision is None or tool is None or args is None:
        return dataclasses.replace(
            auth,
            detail="this host keeps no approvals: the call cannot run",
            approval={"approvers": need.describe() if need else "", "retry": False},
        )
    call_id = str(getattr(call, "call_id", ""))
    binding = gate.binding(
        context.turn_id,
        context.principal,
        context.tenant,
        tool.name,
        # scrubbed as the attempt row's resource is: the approval is kept and shown too
        # (the arguments digest still binds the approval to this exact call)
        auth.redactor.scrub(str(decision.resource)),
        args,
        policy_hash,
        auth.secret_names,
    )
    try:
        answer = await gate.gate(
            binding, call_id=call_id, need=need, roles=context.roles, peer=peer, hold=hold
        )
        if answer.run:
            assert answer.approval is not None
            used = answer.approval
            allowed = approved_decision(decision, used)
            # the attempt's record names the approval it ran on (its diagnostics)
            return dataclasses.replace(
                auth,
                reason=ReasonCode.ALLOWED,
                detail=None,
                decision=allowed,
                approval={
                    "approvalId": used.approval_id,
                    "approver": used.approver,
                    "via": used.via,
                },
            )
    except anyio.get_cancelled_exc_class():
        raise
    except Exception as exc:  # fail closed: the call does not run
        logger.exception("sharedos: internal error in the approval step of %s", call_id)
        return dataclasses.replace(
            auth, reason=ReasonCode.INTERNAL_ERROR, detail=f"{type(exc).__name__}: {exc}"
        )
    if answer.unavailable:
        # the store failed the approval step: a failure, not a denial (whether a request
        # or a ``consumed`` event still landed is for the store to say once it answers)
        return dataclasses.replace(
            auth,
            reason=ReasonCode.EVIDENCE_UNAVAILABLE,
            detail=f"{answer.detail}; nothing ran",
            approval=None,
        )
    # the approval's id and status travel in the payload; the attempt is tied to its
    # request by the request's call id
    return dataclasses.replace(auth, detail=answer.detail or None, approval=answer.payload())


#: this process's key for the secret fields of an approval's arguments digest (each turn's
#: own key is derived from it: ``_scope_key``)
_SECRET_FIELD_KEY = os.urandom(32)


def bound_arguments(
    arguments: Any, secret_names: Iterable[str], *, scope: Sequence[str] = ()
) -> Any:
    """``arguments`` as an approval's digest covers them: a field the tool declares secret by
    an HMAC of its value under a key of this process and of ``scope`` (the call's tenant,
    principal and turn), never by its value.

    The digest is kept in the approval's row and shown (``sharedos approvals show``, the
    question put to the client) beside the recorded arguments, in which that field reads
    ``[redacted]``: a plain SHA-256 over the value would give a short secret (a PIN, a
    one-time code) back to anyone who tries its few candidates. Keyed, it still binds the
    approval to this exact value in the process and turn that asked for it; another process
    (a relaunched bridge) asks again. The key is the turn's, not the process's alone: with
    one key for every turn, a host serving several people gave another person's calls the
    same digest for the same value, so anyone who can read an approval's digest (an
    approver, an auditor) could try the candidates as calls of their own and compare.
    """
    names = frozenset(secret_names)
    if not names or not isinstance(arguments, Mapping):
        return arguments
    key = _scope_key(tuple(scope))
    return {
        name: (_keyed(value, key) if name in names else value) for name, value in arguments.items()
    }


def _scope_key(scope: tuple[str, ...]) -> bytes:
    """The key of one scope (tenant, principal, turn), derived from the process's key."""
    return hmac.new(_SECRET_FIELD_KEY, canonical.total(list(scope)), hashlib.sha256).digest()


def _keyed(value: Any, key: bytes) -> str:
    mac = hmac.new(key, canonical.total(value), hashlib.sha256)
    return "hmac-sha256:" + mac.hexdigest()


def _can_elicit(peer: Any) -> bool:
    """The channel can carry a request to the client, and the client declared elicitation."""
    try:
        return bool(getattr(peer, "can_request", True)) and bool(
            peer.client_supports("elicitation")
        )
    except Exception:
        return False


#: the longest client name an approval's detail keeps (a client gives it in ``initialize``;
#: uncapped, a 4 MiB name bloated every record and refusal of the approval)
CLIENT_NAME_CHARS = 200


def _client_name(peer: Any) -> str:
    name = getattr(peer, "client_name", None)
    try:
        text = name() if callable(name) else name
    except Exception:
        text = None
    if not isinstance(text, str) or not text:
        return ""
    if len(text) > CLIENT_NAME_CHARS:
        text = text[:CLIENT_NAME_CHARS] + "…"
    return f" ({text})"


def covers(
    approval: Approval,
    rule_ids: tuple[str, ...],
    approvers: tuple[tuple[tuple[str, str], ...], ...],
) -> bool:
    """True when ``approval`` was asked for every approval rule (with its approvers) a call
    needs now: whoever may answer it satisfies each of them."""
    had = set(zip(approval.rule_ids, approval.approvers, strict=False))
    return bool(rule_ids) and set(zip(rule_ids, approvers, strict=True)) <= had


#: the earlier approvals of one exact call whose fate a refusal names one by one (the latest;
#: the others are counted)
HISTORY_SHOWN = 3


def _history(found: Iterable[Approval], now: datetime, max_age_s: float) -> list[str]:
    """What became of earlier approvals of this exact call (said to the model and recorded):
    the latest ``HISTORY_SHOWN`` one by one, the others counted. Every one listed made each
    retry's request and refusal grow: a client that declines at once (``codex exec``), asked
    on each retry of one call, left a request a thousand retries later carrying some 50 KB
    of ``approval … was denied`` — quadratic in the store, and read to the model."""
    out = []
    for a in found:
        status = a.status_at(now, max_age_s=max_age_s)
        if status == "consumed":
            out.append(f"approval {a.approval_id} was already used by call {a.closed_call}")
        elif status == "denied":
            out.append(f"approval {a.approval_id} was denied by {a.approver}")
        elif status == "expired":
            out.append(f"approval {a.approval_id} lapsed")
    if len(out) <= HISTORY_SHOWN:
        return out
    earlier = len(out) - HISTORY_SHOWN
    return [
        f"{earlier} earlier approval{'s' if earlier != 1 else ''} of this exact call "
        "were used, denied or lapsed",
        *out[-HISTORY_SHOWN:],
    ]


def _join(notes: list[str]) -> str:
    return "; ".join(notes)


def _store_failed(exc: BaseException) -> bool:
    """True when ``exc`` says the store failed (not that another writer took the step)."""
    return isinstance(exc, TimeoutError) or (
        isinstance(exc, EvidenceStoreError) and not isinstance(exc, ApprovalTaken)
    )


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "the evidence store did not answer in time"
    cause = getattr(exc, "cause", None)
    return f"{cause}: {exc}" if cause else str(exc)
