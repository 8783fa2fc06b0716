"""``ChainAppender``: the two-phase writes of a store, each row a link of its turn's chain.

Shared by every backend: it turns ``begin`` / ``finish`` / ``record`` /
``open_turn`` / ``seal_turn`` into a ``Plan`` (the content rows and the links
to append, with their positions and hashes) and hands it to the backend's
``execute``, which commits it in one transaction. The appender keeps the
turn heads it knows (``HeadCache``) and answers the three ways a plan can
fail to land cleanly:

* ``StaleHead``: another writer appended to the turn first (the
  ``(turn_id, pos)`` key collided): re-read the head, re-plan, try again
  (a bounded number of times);
* ``CommitUnknown``: the connection died while the plan was in flight, so
  it may or may not have committed: after the backend reconnects the
  appender looks at the first link it planned — the same hash there means it
  committed (the write is not repeated), anything else means it did not;
* ``EvidenceStoreError``: the write failed; the turn's cached head is
  dropped (it is re-read next time) and the error goes to the caller.

Everything here runs on the caller's thread under one lock per store; the
backends' methods are synchronous (``sharedos.kernel.recorder`` keeps them
off the event loop).
"""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sharedos.errors import EvidenceError
from sharedos.evidence.chain import (
    ATTEMPT_FIELDS,
    Signer,
    genesis,
    link_hash,
)
from sharedos.evidence.checkpoint import (
    Checkpoint,
    CheckpointTaken,
    checkpoint_genesis,
    make_checkpoint,
)
from sharedos.evidence.record import EvidenceRecord, OutcomeRecord, now_iso
from sharedos.evidence.store import EvidenceStoreError

__all__ = [
    "ChainAppender",
    "ChainBackend",
    "CommitUnknown",
    "HeadCache",
    "Opening",
    "Plan",
    "PlannedLink",
    "StaleHead",
]

#: how often a write is re-planned after another writer moved the turn's head, at least
#: (it goes on until its deadline: ``_commit_locked``)
MAX_STALE_RETRIES = 8
#: the longest pause, in seconds, before a write re-plans after losing its turn's head
STALE_PAUSE_S = 0.004
#: seconds between a writer's checkpoints (``sharedos.evidence.checkpoint``)
DEFAULT_CHECKPOINT_INTERVAL_S = 10.0
#: a writer holding this many uncheckpointed heads checkpoints at once
DIRTY_LIMIT = 50_000
#: seconds, at least, before a writer whose checkpoint failed tries another (its interval if longer)
RETRY_CHECKPOINT_S = 10.0


class StaleHead(EvidenceError):
    """The plan's first position is taken: the turn's head moved (another writer)."""


class _Uncached(Exception):
    """A no-wait plan needed something only the database knows."""


class CommitUnknown(EvidenceError):
    """The connection was lost with the plan in flight; the backend has reconnected."""

    def __init__(self, message: str, cause: EvidenceStoreError) -> None:
        super().__init__(message)
        self.cause = cause


#: ``Plan.fence``: raises to refuse a plan at its commit; else how many seconds the commit
#: may still land (None: no bound). PostgreSQL ends the transaction's session when it stays
#: idle past that, so a server frozen after the fence (its COMMIT not yet read) does not
#: commit it once it thaws (``PostgresEvidenceStore.execute``)
Fence = Callable[[], float | None]


@dataclass(frozen=True, slots=True)
class Opening:
    """A turn's opening record: what the turn was offered and which policy decided it."""

    turn_id: str
    opened_at: str
    catalog_hash: str | None = None
    policy_hash: str | None = None
    policy_revision: str | None = None
    identity: str | None = None  # JSON text

    def values(self) -> tuple[Any, ...]:
        """In ``OPEN_FIELDS`` order."""
        return (
            self.turn_id,
            self.opened_at,
            self.catalog_hash,
            self.policy_hash,
            self.policy_revision,
            self.identity,
        )


@dataclass(frozen=True, slots=True)
class PlannedLink:
    """One link to append: its position, kind, predecessor and hash."""

    pos: int
    kind: str
    prev: str
    hash: str


class _AttemptSeq:
    """Stands for the seq of the attempt written earlier in the same plan (an outcome's ``attempt``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ATTEMPT_SEQ"


ATTEMPT_SEQ: Any = _AttemptSeq()


@dataclass(slots=True)
class Plan:
    """One transaction's worth of rows: the content rows and their links, in chain order.

    ``seq`` is set for an outcome (the attempt it concludes); for a plan with
    an attempt the backend assigns it. ``seal`` is (closed_at, links, key_id,
    signature).
    """

    turn_id: str
    links: list[PlannedLink] = field(default_factory=list)
    opening: Opening | None = None
    attempt: Sequence[Any] | None = None
    outcome: tuple[Any, ...] | None = None  # (outcome, reason, finished_at, duration_ms, error)
    seq: int | None = None
    seal: tuple[str, int, str | None, str | None] | None = None
    #: an approval event's stored fields (``APPROVAL_FIELDS`` order, turn id first)
    approval: Sequence[Any] | None = None
    #: run by the backend inside the plan's transaction, its rows written, just before its
    #: commit; raising rolls the plan back (a write its caller gave up on while the store
    #: made it wait — a lock, a frozen server — must not land once the store answers). It
    #: returns how many seconds the commit may still land (None: no bound), which a server
    #: that can be frozen between the fence and the commit is told (``Fence``)
    fence: Fence | None = None
    #: the rows to insert into ``chain``, in chain order: (kind, parameters); set when
    #: the plan is complete (``done``). Parameters are ``chain_sql.insert_sql(kind)``'s:
    #: the link (turn_id, pos, kind, prev_hash, hash), then the kind's content. An
    #: outcome whose attempt is in the same plan has ``ATTEMPT_SEQ`` for its
    #: ``attempt``. Backends read them and never change them (a plan may be run twice).
    rows: list[tuple[str, list[Any]]] = field(default_factory=list)

    def done(self) -> Plan:
        """Complete the plan: make its ``rows`` from its links; the plan."""
        self.rows = self._rows()
        return self

    def _rows(self) -> list[tuple[str, list[Any]]]:
        out: list[tuple[str, list[Any]]] = []
        turn = self.turn_id
        for link in self.links:
            params: list[Any] = [turn, link.pos, link.kind, link.prev, link.hash]
            kind = link.kind
            if kind == "attempt":
                assert self.attempt is not None
                params += self.attempt[1:]
            elif kind == "outcome":
                assert self.outcome is not None
                params.append(self.seq if self.seq is not None else ATTEMPT_SEQ)
                params += self.outcome
            elif kind == "open":
                assert self.opening is not None
                params += self.opening.values()[1:]
            elif kind == "approval":
                assert self.approval is not None
                params += self.approval[1:]
            else:
                assert self.seal is not None
                params += self.seal
            out.append((kind, params))
        return out


class ChainBackend(Protocol):
    """What a backend gives the appender (each method synchronous, one short transaction)."""

    def head(self, turn_id: str) -> tuple[int, str] | None:
        """The turn's last link (pos, hash) as the database has it, or None."""
        ...

    def attempt_link(self, seq: int) -> tuple[str, str] | None:
        """(turn_id, hash) of the attempt link of ``seq``, or None."""
        ...

    def link_at(self, turn_id: str, pos: int) -> tuple[int | None, str] | None:
        """(seq, hash) of the link at ``pos`` of the turn, or None."""
        ...

    def execute(self, plan: Plan) -> int:
        """Commit ``plan`` atomically; return the attempt's seq (or ``plan.seq``, or -1).

        Raises ``StaleHead`` when its first link's position is taken,
        ``CommitUnknown`` when the connection was lost in flight,
        ``EvidenceStoreError`` otherwise.
        """
        ...


class HeadCache:
    """The last link (pos, hash) of recently written turns, and the hashes of attempts not yet finished.

    Only a cache: a miss (or a forgotten entry after a failed or unknown
    commit) is answered from the database, and a stale entry (another process
    appended to the turn) makes the insert collide on the store's
    ``(turn_id, pos)`` key, after which the writer re-reads the head. Bounded,
    so a long-lived host does not grow with every turn it ever served.
    """

    def __init__(self, max_turns: int = 4096, max_pending: int = 65536) -> None:
        self._heads: OrderedDict[str, tuple[int, str]] = OrderedDict()
        self._pending: OrderedDict[int, tuple[str, str]] = OrderedDict()
        self._max_turns = max_turns
        self._max_pending = max_pending

    def head(self, turn_id: str) -> tuple[int, str] | None:
        """The cached (pos, hash) of the turn's last link, or None."""
        return self._heads.get(turn_id)

    def advance(self, turn_id: str, pos: int, hash_: str) -> None:
        """Remember that ``pos``/``hash_`` is now the turn's last link."""
        heads = self._heads
        heads[turn_id] = (pos, hash_)
        heads.move_to_end(turn_id)
        if len(heads) > self._max_turns:
            heads.popitem(last=False)

    def forget(self, turn_id: str) -> None:
        """Drop the turn's head (after a failed or unknown commit)."""
        self._heads.pop(turn_id, None)

    def attempt(self, seq: int) -> tuple[str, str] | None:
        """(turn_id, attempt link hash) of an attempt begun here and not finished yet."""
        return self._pending.get(seq)

    def begun(self, seq: int, turn_id: str, hash_: str) -> None:
        """Remember an attempt awaiting its outcome."""
        pending = self._pending
        pending[seq] = (turn_id, hash_)
        if len(pending) > self._max_pending:
            pending.popitem(last=False)

    def finished(self, seq: int) -> None:
        """The attempt has its outcome."""
        self._pending.pop(seq, None)

    def clear(self) -> None:
        """Forget everything (after a reconnection)."""
        self._heads.clear()
        self._pending.clear()


def _revision_of(identity_text: str | None) -> str | None:
    """``policyBundleRevision`` from SystemIdentity JSON text, without decoding all of it."""
    if not identity_text or "policyBundleRevision" not in identity_text:
        return None
    import json

    try:
        value = json.loads(identity_text).get("policyBundleRevision")
    except (ValueError, AttributeError):
        return None
    return str(value) if value is not None else None


class ChainAppender:
    """Plans and commits chained rows for one store (thread-safe; one write at a time).

    ``attempt_values`` turns a record into its stored attempt fields
    (``ATTEMPT_FIELDS`` order, JSON columns as text, text the backend can
    store); ``identity_text`` gives a record's stored identity text. With a
    ``signer`` every seal carries an ed25519 signature of its hash.
    """

    def __init__(
        self,
        backend: ChainBackend,
        attempt_values: Callable[[EvidenceRecord], list[Any]],
        *,
        text: Callable[[str | None], str | None] = lambda s: s,
        signer: Signer | None = None,
        deadline_s: float = 1.8,
        checkpoint_interval_s: float | None = DEFAULT_CHECKPOINT_INTERVAL_S,
    ) -> None:
        self.backend = backend
        self.attempt_values = attempt_values
        self.text = text
        self.signer = signer
        self.deadline_s = deadline_s
        self.cache = HeadCache()
        self.lock = threading.Lock()
        #: the heads this writer committed since its last checkpoint (turn -> (pos, hash))
        self.dirty: dict[str, tuple[int, str]] = {}
        #: seconds between checkpoints (None: only when asked, and at close)
        self.checkpoint_interval_s = checkpoint_interval_s
        #: when the next checkpoint is due (``time.monotonic``; never without an interval)
        self.next_checkpoint = time.monotonic() + (
            checkpoint_interval_s if checkpoint_interval_s is not None else float("inf")
        )
        #: after a checkpoint failed, none is due before this (``time.monotonic``)
        self._retry_at = 0.0
        #: the store's last checkpoint as this writer knows it (None: ask the database)
        self._last_checkpoint: Checkpoint | None = None
        #: when the write under way must be done by (``time.monotonic``); None between writes.
        #: Backends bound their own waits (a connection from the pool) by it.
        self.deadline: float | None = None
        #: True while planning a no-wait write: a head not in the cache ends the attempt
        self._cached_only = False
        self._identity_index = ATTEMPT_FIELDS.index("identity")

    # -- planning ------------------------------------------------------------------

    def _head(self, turn_id: str) -> tuple[int, str] | None:
        head = self.cache.head(turn_id)
        if head is None:
            if self._cached_only:
                raise _Uncached()
            head = self.backend.head(turn_id)
            if head is not None:
                self.cache.advance(turn_id, *head)
        return head

    def _start(
        self,
        plan: Plan,
        head: tuple[int, str] | None,
        fallback: Callable[[], Opening] | None,
    ) -> int:
        """Add the opening when the turn has none yet; the next free position.

        ``fallback`` makes the opening from the plan's row: called only for a
        turn's first row (the opening is not built, nor the identity decoded,
        for every other attempt).
        """
        if head is not None:
            return head[0] + 1
        opening = fallback() if fallback is not None else None
        opening = opening or Opening(turn_id=plan.turn_id, opened_at=now_iso())
        plan.opening = opening
        prev = genesis(plan.turn_id)
        plan.links.append(PlannedLink(0, "open", prev, link_hash("open", prev, opening.values())))
        return 1

    def _prev(self, plan: Plan, head: tuple[int, str] | None) -> str:
        if plan.links:
            return plan.links[-1].hash
        assert head is not None
        return head[1]

    def _opening_from(self, values: Sequence[Any]) -> Opening:
        identity = values[self._identity_index]
        return Opening(
            turn_id=values[0],
            opened_at=values[ATTEMPT_FIELDS.index("started_at")],
            catalog_hash=values[ATTEMPT_FIELDS.index("catalog_hash")],
            policy_hash=values[ATTEMPT_FIELDS.index("policy_hash")],
            policy_revision=self.text(_revision_of(identity)),
            identity=identity,
        )

    def _outcome_values(self, outcome: OutcomeRecord) -> tuple[Any, ...]:
        # every text through the backend's ``text``, ASCII too: PostgreSQL's ``text`` cannot
        # hold NUL, which is ASCII (an upstream's error message may carry one)
        text = self.text
        return (
            str(outcome.outcome),
            str(outcome.reason) if outcome.reason is not None else None,
            text(outcome.finished_at),
            float(outcome.duration_ms),
            text(outcome.error),
        )

    def _plan_attempt(self, values: list[Any], outcome: OutcomeRecord | None) -> Plan:
        turn_id = values[0]
        plan = Plan(turn_id=turn_id, attempt=values)
        head = self._head(turn_id)
        pos = self._start(plan, head, lambda: self._opening_from(values))
        prev = self._prev(plan, head)
        attempt_hash = link_hash("attempt", prev, values)
        plan.links.append(PlannedLink(pos, "attempt", prev, attempt_hash))
        if outcome is not None:
            plan.outcome = self._outcome_values(outcome)
            h = link_hash("outcome", attempt_hash, (attempt_hash, *plan.outcome))
            plan.links.append(PlannedLink(pos + 1, "outcome", attempt_hash, h))
        return plan.done()

    def _plan_outcome(self, seq: int, outcome: OutcomeRecord) -> Plan:
        known = self.cache.attempt(seq)
        if known is None:
            if self._cached_only:
                raise _Uncached()
            known = self.backend.attempt_link(seq)
        if known is None:
            raise EvidenceStoreError(f"no attempt with seq {seq} to conclude", "conflict")
        turn_id, attempt_hash = known
        plan = Plan(turn_id=turn_id, seq=seq, outcome=self._outcome_values(outcome))
        head = self._head(turn_id)
        pos = self._start(plan, head, None)
        prev = self._prev(plan, head)
        h = link_hash("outcome", prev, (attempt_hash, *plan.outcome))  # type: ignore[misc]
        plan.links.append(PlannedLink(pos, "outcome", prev, h))
        return plan.done()

    def _plan_open(self, opening: Opening) -> Plan | None:
        plan = Plan(turn_id=opening.turn_id)
        if self._head(opening.turn_id) is not None:
            return None  # already opened (by this turn's first call, or another process)
        self._start(plan, None, lambda: opening)
        return plan.done()

    def _plan_approval(
        self,
        values: Sequence[Any],
        check: Callable[[], None] | None = None,
        fence: Fence | None = None,
    ) -> Plan:
        turn_id = values[0]
        plan = Plan(turn_id=turn_id, approval=values, fence=fence)
        head = self._head(turn_id)
        if check is not None:
            # after the head is known: whatever lands in the turn after ``check`` read the
            # store takes the position this plan writes, so the commit fails (``StaleHead``)
            # and the plan is made again, ``check`` with it — the check and the append are
            # one step, for every writer of the turn on any host
            check()
        pos = self._start(plan, head, None)
        prev = self._prev(plan, head)
        plan.links.append(PlannedLink(pos, "approval", prev, link_hash("approval", prev, values)))
        return plan.done()

    def _plan_seal(
        self, turn_id: str, closed_at: str, check: Callable[[], None] | None = None
    ) -> Plan:
        plan = Plan(turn_id=turn_id)
        head = self._head(turn_id)
        if check is not None:
            check()  # after the head is known, as in ``_plan_approval``
        pos = self._start(plan, head, None)
        prev = self._prev(plan, head)
        key_id = self.signer.key_id if self.signer is not None else None
        values = (turn_id, closed_at, pos, key_id)
        h = link_hash("seal", prev, values)
        signature = self.signer.sign(h) if self.signer is not None else None
        plan.seal = (closed_at, pos, key_id, signature)
        plan.links.append(PlannedLink(pos, "seal", prev, h))
        return plan.done()

    # -- committing ------------------------------------------------------------------

    def _advanced(self, turn_id: str, pos: int, hash_: str) -> None:
        """A plan landed: the turn's head is now (pos, hash_), and the next checkpoint covers it."""
        self.cache.advance(turn_id, pos, hash_)
        self.dirty[turn_id] = (pos, hash_)

    def _commit(self, make: Callable[[], Plan | None]) -> tuple[int, Plan | None]:
        """Plan and execute under the lock, re-planning on a moved head; (seq, plan landed)."""
        with self.lock:
            deadline = self.deadline = time.monotonic() + self.deadline_s
            try:
                return self._commit_locked(make, deadline)
            finally:
                self.deadline = None

    def _commit_locked(
        self, make: Callable[[], Plan | None], deadline: float
    ) -> tuple[int, Plan | None]:
        turn = "?"
        lost = 0
        while lost < MAX_STALE_RETRIES or time.monotonic() < deadline:
            plan = make()
            if plan is None:
                return -1, None
            turn = plan.turn_id
            try:
                seq = self._execute(plan, deadline)
            except StaleHead:
                # another writer of the turn appended first. Writers that plan from their
                # cache append faster than one that re-reads the head, so the loser pauses
                # a random moment (the others' lockstep broken) and tries until its
                # deadline, not a fixed number of times: three processes writing one turn
                # made about one write in a hundred fail after 8 straight losses
                self.cache.forget(plan.turn_id)
                lost += 1
                time.sleep(random.uniform(0, STALE_PAUSE_S))
                continue
            except BaseException:
                self.cache.forget(plan.turn_id)
                raise
            last = plan.links[-1]
            self._advanced(plan.turn_id, last.pos, last.hash)
            return seq, plan
        raise EvidenceStoreError(
            f"turn {turn}: {lost} other writes moved its chain head "
            "while this one was being written",
            "locked",
        )

    def landed(self, doubt: tuple[str, int, str, int | None]) -> tuple[bool, int | None]:
        """Whether a write in doubt (``EvidenceStoreError.in_doubt``) committed after all: its
        first link is at its place with its hash. With it, its attempt's seq (None when it
        has no attempt). ``EvidenceStoreError`` while the store cannot be read."""
        turn_id, pos, link_hash, attempt_pos = doubt
        found = self.backend.link_at(turn_id, pos)
        if found is None or found[1] != link_hash:
            return False, None
        if attempt_pos is None:
            return True, None
        got = self.backend.link_at(turn_id, attempt_pos)
        return True, (int(got[0]) if got is not None and got[0] is not None else None)

    def _execute(self, plan: Plan, deadline: float) -> int:
        """``backend.execute``, resolving an in-flight connection loss by looking at the first link."""
        try:
            return self.backend.execute(plan)
        except CommitUnknown as lost:
            first = plan.links[0]
            while True:
                try:
                    found = self.backend.link_at(plan.turn_id, first.pos)
                except EvidenceStoreError:
                    if time.monotonic() >= deadline:
                        raise _in_doubt(lost.cause, plan) from None
                    time.sleep(0.05)
                    continue
                break
            if found is not None and found[1] == first.hash:
                # it committed before the connection went: the answer is what landed
                if plan.seq is not None:
                    return plan.seq
                attempt = next((lk for lk in plan.links if lk.kind == "attempt"), None)
                if attempt is None:
                    return -1
                got = self.backend.link_at(plan.turn_id, attempt.pos)
                return int(got[0]) if got is not None and got[0] is not None else -1
            if found is not None:
                raise StaleHead() from None
            if time.monotonic() >= deadline:
                raise _in_doubt(lost.cause, plan) from None
            return self._execute(plan, deadline)  # not committed: once more, on the new connection

    # -- the no-wait path -----------------------------------------------------------------

    def try_now(
        self, kind: str, args: tuple[Any, ...], run: Callable[[Plan], int | None]
    ) -> tuple[bool, Any]:
        """``begin``/``finish``/``record`` at once if nothing would wait: ``(True, result)``.

        ``(False, None)`` when another write of this store is under way (its
        lock is taken), when planning would need the database (a turn or an
        attempt not in the cache), or when ``run`` — the backend committing the
        plan on a connection that does not wait — returns None. The caller
        then takes its ordinary path, which decides and reports.
        """
        if not self.lock.acquire(blocking=False):
            return False, None
        try:
            self._cached_only = True
            try:
                if kind == "begin":
                    (attempt,) = args
                    plan = self._plan_attempt(self.attempt_values(attempt), None)
                elif kind == "finish":
                    seq, outcome = args
                    plan = self._plan_outcome(int(seq), outcome)
                elif kind == "record":
                    (record,) = args
                    outcome = record.outcome_record
                    if outcome is None:
                        return False, None
                    plan = self._plan_attempt(self.attempt_values(record), outcome)
                else:
                    return False, None
            except _Uncached:
                return False, None
            finally:
                self._cached_only = False
            seq = run(plan)
            if seq is None:
                self.cache.forget(plan.turn_id)
                return False, None
            last = plan.links[-1]
            self._advanced(plan.turn_id, last.pos, last.hash)
            if kind == "begin":
                self.cache.begun(seq, plan.turn_id, plan.links[-1].hash)
                return True, seq
            if kind == "finish":
                self.cache.finished(int(args[0]))
                return True, None
            return True, seq
        finally:
            self.lock.release()

    # -- group commit ----------------------------------------------------------------------

    def commit_group(self, ops: Sequence[tuple[str, tuple[Any, ...]]]) -> list[tuple[bool, Any]]:
        """Commit several ``begin``/``finish``/``record`` writes in one transaction.

        Each op is (kind, args) as for the store's method; the answer is one
        (True, result) or (False, exception) per op, in order. The ops are
        planned in order (a later one of the same turn chains after an
        earlier one) and committed together: one transaction, one commit (one
        fsync where the store syncs), so when it returns every one of them is
        as durable as its own commit would have made it. If the group cannot
        land as a whole (one op conflicts, a head moved, the connection
        dropped), nothing of it is kept and each op is committed on its own,
        so one op's failure is never another's.
        """
        execute_many = getattr(self.backend, "execute_many", None)
        if execute_many is None or len(ops) < 2:
            return [self._one(kind, args) for kind, args in ops]
        with self.lock:
            deadline = self.deadline = time.monotonic() + self.deadline_s
            try:
                plans: list[Plan] = []
                try:
                    for kind, args in ops:
                        plan = self._plan_op(kind, args)
                        plans.append(plan)
                        last = plan.links[-1]
                        # the next op of this turn chains after this one (forgotten on failure)
                        self.cache.advance(plan.turn_id, last.pos, last.hash)
                    seqs = execute_many(plans) if time.monotonic() < deadline else None
                except CommitUnknown as lost:
                    # the group is one transaction: it landed whole or not at all
                    try:
                        seqs = self._group_landed(plans, lost, deadline)
                    except EvidenceStoreError as unknown:
                        # it may have landed: writing it again could write it twice, so
                        # every write of the group fails closed, as one write would (each
                        # in doubt: the group is one transaction, so its first link tells)
                        for plan in plans:
                            self.cache.forget(plan.turn_id)
                        return [(False, _in_doubt(unknown, plan)) for plan in plans]
                except (StaleHead, EvidenceStoreError, ValueError):
                    seqs = None
                if seqs is None:
                    for plan in plans:
                        self.cache.forget(plan.turn_id)
                else:
                    results: list[tuple[bool, Any]] = []
                    for (kind, args), plan, seq in zip(ops, plans, seqs, strict=True):
                        last = plan.links[-1]
                        self.dirty[plan.turn_id] = (last.pos, last.hash)
                        results.append((True, self._landed(kind, args, plan, seq)))
                    return results
            finally:
                self.deadline = None
        return [self._one(kind, args) for kind, args in ops]

    def _group_landed(
        self, plans: list[Plan], lost: CommitUnknown, deadline: float
    ) -> list[int] | None:
        """After a connection lost with a group in flight: its seqs if it committed, None if
        it did not (then each write is made on its own). Raises the loss's cause when that
        cannot be told within the deadline (every write of the group then fails closed)."""
        first = plans[0].links[0]
        while True:
            try:
                found = self.backend.link_at(plans[0].turn_id, first.pos)
            except EvidenceStoreError:
                if time.monotonic() >= deadline:
                    raise lost.cause from None
                time.sleep(0.05)
                continue
            break
        if found is None or found[1] != first.hash:
            return None
        seqs: list[int] = []
        for plan in plans:
            if plan.seq is not None or plan.attempt is None:
                seqs.append(plan.seq if plan.seq is not None else -1)
                continue
            link = next(lk for lk in plan.links if lk.kind == "attempt")
            got = self.backend.link_at(plan.turn_id, link.pos)
            seqs.append(int(got[0]) if got is not None and got[0] is not None else -1)
        return seqs

    def _plan_op(self, kind: str, args: tuple[Any, ...]) -> Plan:
        if kind == "begin":
            return self._plan_attempt(self.attempt_values(args[0]), None)
        if kind == "finish":
            return self._plan_outcome(int(args[0]), args[1])
        if kind == "record":
            outcome = args[0].outcome_record
            if outcome is None:
                raise ValueError("record() needs a record with an outcome")
            return self._plan_attempt(self.attempt_values(args[0]), outcome)
        raise ValueError(f"no such write {kind!r}")

    def _landed(self, kind: str, args: tuple[Any, ...], plan: Plan, seq: int) -> Any:
        if kind == "begin":
            self.cache.begun(seq, plan.turn_id, plan.links[-1].hash)
            return seq
        if kind == "finish":
            self.cache.finished(int(args[0]))
            return None
        return seq

    def _one(self, kind: str, args: tuple[Any, ...]) -> tuple[bool, Any]:
        try:
            if kind == "begin":
                return True, self.begin(*args)
            if kind == "finish":
                self.finish(*args)
                return True, None
            return True, self.record(*args)
        except Exception as exc:
            return False, exc

    # -- checkpoints ------------------------------------------------------------------------

    def checkpoint_due(self) -> bool:
        """True when this writer has heads to checkpoint and its interval has passed."""
        dirty = self.dirty
        if not dirty:
            return False
        now = time.monotonic()
        if now < self._retry_at:
            return False
        return len(dirty) >= DIRTY_LIMIT or now >= self.next_checkpoint

    def checkpoint(
        self, heads: Sequence[tuple[str, int, str]] | None = None, *, always: bool = False
    ) -> Checkpoint | None:
        """Write a checkpoint over ``heads`` and the heads committed here since the last one
        (the later of the two for a turn in both); the checkpoint written, or None when there
        was nothing to cover (with ``always``, one over no heads then: it still chains to,
        and with a signer signs, every checkpoint before it).

        Numbered after the store's last checkpoint, whoever wrote it (a number
        another writer took first is re-read and the checkpoint re-made).
        """
        with self.lock:
            merged = {turn: (pos, hash_) for turn, pos, hash_ in heads or ()}
            # what this writer committed is covered too (it may be newer than ``heads``)
            for turn, (pos, hash_) in self.dirty.items():
                if turn not in merged or pos > merged[turn][0]:
                    merged[turn] = (pos, hash_)
            heads = [(turn, pos, hash_) for turn, (pos, hash_) in merged.items()]
            if not heads and not always:
                return None
            self.deadline = time.monotonic() + self.deadline_s
            try:
                made = self._write_checkpoint(heads)
            except BaseException:
                # the heads stay to cover, by a later checkpoint. Not at the next write: each
                # try runs on the writer thread, ahead of the calls' writes, and may wait out
                # the store's lock timeout (a lock on ``checkpoints``): retried at every write,
                # it made every call wait that long
                self._retry_at = time.monotonic() + max(
                    self.checkpoint_interval_s or 0.0, RETRY_CHECKPOINT_S
                )
                raise
            finally:
                self.deadline = None
            self._retry_at = 0.0
            self.dirty.clear()
            if self.checkpoint_interval_s is not None:
                self.next_checkpoint = time.monotonic() + self.checkpoint_interval_s
            return made

    def _write_checkpoint(self, heads: Sequence[tuple[str, int, str]]) -> Checkpoint:
        store_id = str(self.backend.store_id)  # type: ignore[attr-defined]
        ordered = sorted(heads)
        for _ in range(MAX_STALE_RETRIES):
            last = self._last_checkpoint
            if last is None:
                found = self.backend.last_checkpoint()  # type: ignore[attr-defined]
                number, prev = (found[0] + 1, found[1]) if found else (1, None)
            else:
                number, prev = last.number + 1, last.hash
            try:
                made = make_checkpoint(
                    number,
                    store_id,
                    prev or checkpoint_genesis(store_id),
                    ordered,
                    self.signer,
                    now_iso(),
                )
            except ValueError as exc:  # rfc8785's IntegerDomainError is a ValueError
                # the store's last checkpoint is numbered past what RFC 8785 encodes (no
                # writer numbers that far: it was changed outside SharedOS), so nothing can
                # chain after it; a store error the host reports (and close survives), never
                # an exception out of a host's close or an auditor's ``--take``
                self._last_checkpoint = None
                raise EvidenceStoreError(
                    f"cannot number a checkpoint after the store's last one ({exc}): the "
                    "checkpoints were changed outside SharedOS (`sharedos evidence verify` "
                    "reports them)",
                    "io",
                ) from None
            try:
                self.backend.execute_checkpoint(made, ordered)  # type: ignore[attr-defined]
            except CheckpointTaken:
                self._last_checkpoint = None  # another writer numbered it: re-read
                continue
            except CommitUnknown as lost:
                # the connection died with it in flight (a host's closing checkpoint is
                # tried once, and would leave its last rows uncovered): once the last
                # checkpoint is re-read on a new connection, it is written again, after
                # itself if it had landed
                self._last_checkpoint = None
                if self.deadline is None or time.monotonic() >= self.deadline:
                    raise lost.cause from None
                continue
            except BaseException:
                self._last_checkpoint = None
                raise
            self._last_checkpoint = made
            return made
        raise EvidenceStoreError(
            f"{MAX_STALE_RETRIES} other writers took the next checkpoint number first", "locked"
        )

    # -- the store's methods -------------------------------------------------------------

    def begin(self, attempt: EvidenceRecord) -> int:
        """Commit the attempt row (and the turn's opening when it is the first row); its seq."""
        values = self.attempt_values(attempt)
        seq, plan = self._commit(lambda: self._plan_attempt(values, None))
        if plan is not None:
            link = next(lk for lk in plan.links if lk.kind == "attempt")
            self.cache.begun(seq, plan.turn_id, link.hash)
        return seq

    def finish(self, seq: int, outcome: OutcomeRecord) -> None:
        """Commit the outcome row of attempt ``seq`` (cause ``conflict`` when it has one or none exists)."""
        self._commit(lambda: self._plan_outcome(int(seq), outcome))
        self.cache.finished(int(seq))

    def record(self, record: EvidenceRecord) -> int:
        """Commit attempt and outcome rows in one transaction; the attempt's seq."""
        outcome = record.outcome_record
        if outcome is None:
            raise ValueError("record() needs a record with an outcome; use begin() for an attempt")
        values = self.attempt_values(record)
        seq, _ = self._commit(lambda: self._plan_attempt(values, outcome))
        return seq

    def open_turn(self, opening: Opening) -> bool:
        """Write the turn's opening record unless it has one; True when this call wrote it."""
        opening = Opening(
            turn_id=self.text(opening.turn_id) or "",
            opened_at=opening.opened_at,
            catalog_hash=self.text(opening.catalog_hash),
            policy_hash=self.text(opening.policy_hash),
            policy_revision=self.text(opening.policy_revision),
            identity=self.text(opening.identity),
        )
        _, plan = self._commit(lambda: self._plan_open(opening))
        return plan is not None

    def append_approval(
        self,
        values: Sequence[Any],
        check: Callable[[], None] | None = None,
        fence: Fence | None = None,
    ) -> str:
        """Append one approval event to its turn's chain (``APPROVAL_FIELDS`` order, JSON
        columns as text); its link's hash. ``ApprovalTaken`` when the store already holds
        that step of that approval (another writer made it first). ``check`` reads the
        store and raises to refuse the append; it runs with nothing appended to the turn
        between its read and the append (re-run when another writer moved the head).
        ``fence`` (``Plan.fence``) raises to refuse it at its commit, once the store has
        let it in."""
        stored = [self.text(v) if type(v) is str else v for v in values]
        _, plan = self._commit(lambda: self._plan_approval(stored, check, fence))
        assert plan is not None
        return plan.links[-1].hash

    def seal_turn(
        self, turn_id: str, closed_at: str | None = None, check: Callable[[], None] | None = None
    ) -> str:
        """Append the turn's seal (signed when a signer is set); return the seal's hash.
        ``check`` as for ``append_approval``: it refuses the seal, atomically with it."""
        when = self.text(closed_at) or now_iso()
        turn_id = self.text(turn_id) or ""
        _, plan = self._commit(lambda: self._plan_seal(turn_id, when, check))
        assert plan is not None
        return plan.links[-1].hash


def _in_doubt(error: EvidenceStoreError, plan: Plan) -> EvidenceStoreError:
    """``error`` for a write whose fate could not be told in time, naming its first link
    (``EvidenceStoreError.in_doubt``): once the store answers, ``ChainAppender.landed``
    tells whether it committed."""
    doubt = EvidenceStoreError(str(error), error.cause)
    first = plan.links[0]
    attempt = next((lk.pos for lk in plan.links if lk.kind == "attempt"), None)
    doubt.in_doubt = (plan.turn_id, first.pos, first.hash, attempt)
    return doubt
