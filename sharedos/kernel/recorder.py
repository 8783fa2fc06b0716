"""``EvidenceRecorder``: evidence writes off the event loop, with a bounded wait, failing closed.

Every write of ``RuntimeHost`` goes through here. When nothing is queued and
the store offers a commit that cannot wait (``SqliteEvidenceStore.try_now``:
NORMAL, no busy wait, no checkpoint), that is tried first; otherwise, and
whenever it declines, the store's synchronous methods run on one daemon writer
thread (``SerialLane``), so a locked, slow
or hung store never blocks the loop: other requests (401s, ``tools/list``,
pings, calls of other turns that need no write) keep being served. Each
write waits at most ``timeout_s`` (2 s by default); past it, or when the
store raises ``EvidenceStoreError``, the caller gets ``EvidenceUnavailable``
and fails the call closed (``evidence_unavailable``).

A write given up on is not forgotten: it stays queued, and when the store
answers, what is written is what the caller was told — an attempt given up
on becomes a complete ``failed`` / ``evidence_unavailable`` record (or
``cancelled``), and an attempt committed after its caller gave up gets that
outcome at once; such a record the store still refuses for a cause that passes
(the lock not gone yet) is kept and written later, like a refused call's. So the count of attempts stays honest after the store
recovers. A write the store refused for a cause that passes and that left
nothing behind (``locked``: it never got the write lock; ``disk_full``: its
transaction was rolled back; ``timeout``: the server cancelled its statement,
or no connection came in time; ``read_only``: the server refused the statement, a
database made read-only or a role without ``INSERT``, until it is writable again) is owed the same way: once a later write lands,
what its caller was told is written (up to ``max_pending`` such records). So is a write whose
connection was lost in flight and whose fate the store could not tell in time
(``EvidenceStoreError.in_doubt``): once it answers, the chain at the write's place tells
whether it landed (``_resolve``).
Once the writer has made no progress for ``timeout_s`` while
writes are waiting, new writes fail at once instead of each waiting the
full bound; more than ``max_pending`` waiting writes are refused outright.

Failures are reported on stderr (logger ``sharedos.evidence``) once per
cause until a write succeeds again, which is reported too, with the number
of calls that failed closed meanwhile — through the store's own reporter
(``store.failures``), which the turns' openings and seals share.

Group commit: when writes queue up behind one another (concurrent calls
while the writer is busy), the writer takes every queued write at once and
commits them in one transaction (``ChainAppender.commit_group``: one commit,
one fsync). Each caller is answered only after that commit, so each call's
promise holds as it would alone: its attempt durable before its handler
runs, its outcome durable before its answer. A group that cannot land whole
is not kept and its writes are committed one by one, so one call's failure
is never another's. A lone write is never delayed to wait for company.

Checkpoints: after a write, when the store says one is due
(``evidence_checkpoint_due``), the writer thread takes it
(``sharedos.evidence.checkpoint``), off the calls' path. One that fails (a lock on
``checkpoints``, the store down) is said once per cause and not tried again before the
store's retry pause (``RETRY_CHECKPOINT_S``): on the writer thread, each try may wait out
the store's lock timeout ahead of the calls' writes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import anyio

from sharedos.errors import EvidenceError
from sharedos.evidence.record import EvidenceRecord, OutcomeRecord
from sharedos.evidence.reporting import reporter_of
from sharedos.evidence.store import EvidenceStore, EvidenceStoreError
from sharedos.kernel.threads import LaneTask, SerialLane, await_task

__all__ = [
    "EvidenceRecorder",
    "EvidenceUnavailable",
    "GiveUp",
    "RecordOnlyStore",
    "unwritten_note",
]

logger = logging.getLogger("sharedos.evidence")

#: why a write was given up: its bound passed, its caller was cancelled, or the store
#: refused it for a cause that passes (``OWED_CAUSES``: written later, saying which)
GiveUp = Literal["timeout", "cancelled", "locked", "disk_full", "read_only", "io"]
#: the outcome to write instead, for a write given up on
Fallback = Callable[[GiveUp], OutcomeRecord]
#: causes of a refused write that pass, and after which nothing of the write is in the store
#: (the statement failed inside its own transaction, or never reached the server): what the
#: caller was told is owed. A write whose fate is unknown (a connection lost in flight and not
#: resolved in time: ``io``) is not: writing it again could write it twice. ``read_only`` is a
#: statement the server refused (a read-only transaction, no ``INSERT``): nothing of it landed,
#: and it passes when the database is made writable or the grant given back
OWED_CAUSES: frozenset[GiveUp] = frozenset({"locked", "disk_full", "timeout", "read_only"})


class EvidenceUnavailable(EvidenceError):
    """A write could not be made durable in time; ``cause`` is an ``EvidenceStoreError`` cause."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


class _Job:
    """One write and what to do if its waiter gives up before or after it lands."""

    __slots__ = (
        "abandoned",
        "compensate",
        "instead",
        "landed",
        "op",
        "primary",
        "refused",
        "why",
    )

    def __init__(
        self,
        primary: Callable[[], Any],
        instead: Callable[[GiveUp], None] | None,
        compensate: Callable[[Any, GiveUp], None] | None,
        op: tuple[str, tuple[Any, ...]] | None = None,
    ) -> None:
        self.primary = primary
        #: the write as (kind, args), so it can join a group commit
        self.op = op
        #: written instead of ``primary`` when the waiter gave up before it started
        self.instead = instead
        #: written after ``primary`` when the waiter gave up while it ran
        self.compensate = compensate
        self.abandoned = False
        self.why: GiveUp = "timeout"
        self.landed = False
        #: the error the store refused ``primary`` with (set on the writer thread)
        self.refused: EvidenceStoreError | None = None


class EvidenceRecorder:
    """Two-phase evidence writes for one store, on one writer thread, each bounded by ``timeout_s``."""

    def __init__(
        self, store: EvidenceStore, *, timeout_s: float = 2.0, max_pending: int = 1024
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("the evidence timeout must be positive")
        self.store = store
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        #: the store's group commit (``commit_group``), when it has one
        self._group: Callable[..., list[tuple[bool, Any]]] | None = getattr(
            store, "commit_group", None
        )
        self._lane = SerialLane(
            "sharedos-evidence", batch=self._batch if self._group is not None else None
        )
        self._lock = threading.Lock()
        self._inflight = 0
        #: how many of those are outcomes (``finish``): their attempts are in the store
        self._inflight_ran = 0
        self._progress_at = time.monotonic()
        self._report = reporter_of(store)
        #: the store's no-wait commit (``SqliteEvidenceStore.try_now``), when it has one
        self._try_now: Callable[..., tuple[bool, Any]] | None = getattr(store, "try_now", None)
        self._checkpoint: Callable[[], None] | None = getattr(store, "checkpoint", None)
        #: whether a write whose fate was in doubt committed (``ChainAppender.landed``)
        self._write_landed: Callable[..., tuple[bool, int | None]] | None = getattr(
            getattr(store, "appender", None), "landed", None
        )
        self._checkpoint_due: Callable[[], bool] | None = getattr(store, "checkpoint_due", None)
        #: the store-wide checkpoints (``sharedos.evidence.checkpoint``)
        self._heads_due: Callable[[], bool] | None = getattr(store, "evidence_checkpoint_due", None)
        self._take_checkpoint: Callable[[], Any] | None = getattr(store, "take_checkpoint", None)
        self._heads_queued = False
        #: what callers of refused writes were told, to be written once the store answers,
        #: each with whether it concludes an attempt in the store (an outcome)
        self._owed: list[tuple[Callable[[], Any], bool]] = []
        #: owed records not kept at all (past ``max_pending``), and how many were outcomes
        self._owed_dropped = 0
        self._dropped_ran = 0
        #: the seals of turns that closed while the store refused writes, by turn id: written
        #: after the owed records (those of the turn's calls among them), never before
        self._owed_seals: dict[str, Callable[[], Any]] = {}
        #: the seals owed while writes were queued on the writer thread (``owe``): due, in
        #: ``_owed_seals``, once the writer has run those writes (they may be the turn's)
        self._seals_behind: dict[str, Callable[[], Any]] = {}
        #: the turns whose owed seal the store refused for a cause that does not pass
        self._seals_lost: list[str] = []
        self._settling = False
        #: signalled when a pass over the owed records ends (``settle_unwritten`` waits on it)
        self._settled = threading.Condition(self._lock)

    # -- the three writes --------------------------------------------------------

    async def begin(self, attempt: EvidenceRecord, fallback: Fallback) -> int:
        """Commit ``attempt``; its seq. Given up on: the attempt is written concluded by ``fallback``."""
        store = self.store

        def instead(why: GiveUp) -> None:
            store.record(attempt.with_outcome(fallback(why)))

        def compensate(seq: Any, why: GiveUp) -> None:
            store.finish(int(seq), fallback(why))

        done, seq = self._now("begin", attempt)
        if not done:
            seq = await self._write(
                _Job(lambda: store.begin(attempt), instead, compensate, ("begin", (attempt,)))
            )
        return int(seq)

    async def finish(self, seq: int, outcome: OutcomeRecord, fallback: Fallback) -> int:
        """Commit the outcome of attempt ``seq``; the record's seq (``seq``, except for a
        record-only store). Given up on before it started: ``fallback`` is written instead."""
        store = self.store

        def instead(why: GiveUp) -> None:
            store.finish(seq, fallback(why))

        done, landed = self._now("finish", seq, outcome)
        if not done:
            landed = await self._write(
                _Job(lambda: store.finish(seq, outcome), instead, None, ("finish", (seq, outcome)))
            )
        return int(landed) if isinstance(landed, int) else seq

    async def record(self, record: EvidenceRecord, fallback: Fallback) -> int:
        """Commit a complete record. Given up on before it started: concluded by ``fallback``."""
        store = self.store

        def instead(why: GiveUp) -> None:
            store.record(record.with_outcome(fallback(why)))

        done, seq = self._now("record", record)
        if not done:
            seq = await self._write(
                _Job(lambda: store.record(record), instead, None, ("record", (record,)))
            )
        return int(seq)

    # -- machinery --------------------------------------------------------------

    def _now(self, kind: str, *args: Any) -> tuple[bool, Any]:
        """The store's no-wait commit, when the writer is idle; ``(False, None)`` to go the long way.

        Only taken when no write is queued (so writes stay in order) and the
        store says nothing would make it wait; see ``SqliteEvidenceStore.try_now``.
        """
        try_now = self._try_now
        if try_now is None or self._inflight:
            return False, None
        try:
            done, result = try_now(kind, *args)
        except EvidenceStoreError as exc:  # committed into a file that is no longer the store
            self._failed(exc.cause, str(exc))
            raise EvidenceUnavailable(exc.cause, str(exc)) from exc
        if done:
            self._progress_at = time.monotonic()
            if self._report.failing:
                self._report.succeeded()
            if self._owed or self._owed_seals:
                self._settle_owed()
            # a store that says when upkeep may be due is asked only then
            if getattr(self.store, "upkeep_due", True):
                due = self._checkpoint_due
                if due is not None and due() and self._checkpoint is not None:
                    self._lane.submit(LaneTask(self._quietly, self._checkpoint))
                self._heads_checkpoint()
        return done, result

    def _heads_checkpoint(self) -> None:
        """Queue a store-wide checkpoint on the writer thread when the store says one is due."""
        due = self._heads_due
        if due is None or self._heads_queued or not due():
            return
        take = self._take_checkpoint
        assert take is not None
        self._heads_queued = True

        def run() -> None:
            try:
                take()
            except Exception as exc:  # no call's record: the rows stand, uncovered for now
                cause = exc.cause if isinstance(exc, EvidenceStoreError) else "io"
                self._report.failed(
                    cause,
                    f"cannot write an evidence checkpoint ({cause}): {exc}; calls go on, the "
                    "rows written stand, and a later checkpoint covers them",
                )
            else:
                self._succeeded()
            finally:
                self._heads_queued = False

        self._lane.submit(LaneTask(run))

    async def _write(self, job: _Job) -> Any:
        task: LaneTask[Any] = LaneTask(self._run, job)
        now = time.monotonic()
        with self._lock:
            if self._inflight >= self.max_pending:
                refused = EvidenceUnavailable(
                    "overloaded", f"{self._inflight} evidence writes are already waiting"
                )
            elif self._inflight and now - self._progress_at > self.timeout_s:
                # the writer is stuck: queue this write for later, answer at once
                job.abandoned = True
                refused = EvidenceUnavailable(
                    "timeout",
                    f"the evidence store has completed no write for {now - self._progress_at:.1f} s",
                )
            else:
                refused = None
            if refused is None or job.abandoned:
                if not self._inflight:
                    self._progress_at = now
                self._inflight += 1
                self._inflight_ran += _ran(job)
        if refused is not None:
            if job.abandoned:
                self._lane.submit(task)
            self._failed(refused.cause, str(refused))
            raise refused
        try:
            landed = await await_task(task, self._lane.submit, self.timeout_s)
        except anyio.get_cancelled_exc_class():
            self._give_up(job, task, "cancelled")
            raise
        if not landed and self._give_up(job, task, "timeout"):
            error = EvidenceUnavailable(
                "timeout", f"the evidence store did not answer within {self.timeout_s:g} s"
            )
            self._failed(error.cause, str(error))
            raise error
        try:
            return task.outcome()
        except EvidenceStoreError as exc:
            self._failed(exc.cause, str(exc))
            self._owe(job, exc)
            raise EvidenceUnavailable(exc.cause, str(exc)) from exc
        except Exception as exc:  # a backend breaking its contract still fails closed
            self._failed("io", f"{type(exc).__name__}: {exc}")
            raise EvidenceUnavailable("io", f"{type(exc).__name__}: {exc}") from exc

    def _give_up(self, job: _Job, task: LaneTask[Any], why: GiveUp) -> bool:
        """Mark ``job`` abandoned; False when it had already landed (its result stands)."""
        with self._lock:
            done = task.done
            if done:
                landed = job.landed
            else:
                job.abandoned, job.why = True, why
                refused = job.refused
        if not done:
            if refused is not None:  # refused while running, before the waiter could hear it
                self._owe(job, refused, why)
            return True
        if why == "cancelled" and landed and job.compensate is not None:
            # committed, but the caller is going away: conclude it as cancelled, later
            compensate, result = job.compensate, task.result
            self._lane.submit(LaneTask(self._owing, lambda: compensate(result, why), True))
        return why == "cancelled"

    def _run(self, job: _Job) -> Any:
        """On the writer thread: the write, or what replaces it when its waiter gave up."""
        with self._lock:
            abandoned, why = job.abandoned, job.why
        try:
            if abandoned:
                if job.instead is not None:
                    self._owing(lambda: job.instead(why), _ran(job))  # type: ignore[misc]
                return None
            try:
                result = job.primary()
            except EvidenceStoreError as exc:
                self._refused(job, exc)
                raise
            self._landed(job, result)
            return result
        finally:
            with self._lock:
                self._inflight -= 1
                self._inflight_ran -= _ran(job)
            self._heads_checkpoint()

    def _refused(self, job: _Job, error: EvidenceStoreError) -> None:
        """On the writer thread: the store refused ``job``'s write. Its waiter hears it and
        owes the record (``_write``); a waiter that gave up meanwhile cannot, so it is owed
        from here, or from ``_give_up`` when that sees this mark first (under the lock)."""
        with self._lock:
            job.refused = error
            abandoned, why = job.abandoned, job.why
        if abandoned:
            self._owe(job, error, why)

    def _landed(self, job: _Job, result: Any) -> None:
        """``job``'s write is durable: conclude it as cancelled if its waiter went away meanwhile."""
        with self._lock:
            job.landed = True
            abandoned, why = job.abandoned, job.why
        if abandoned and job.compensate is not None:
            self._owing(lambda: job.compensate(result, why), True)  # type: ignore[misc]
        self._succeeded()

    def _batch(self, tasks: list[LaneTask[Any]]) -> None:
        """On the writer thread: every queued task, consecutive writes committed as one group."""
        group: list[LaneTask[Any]] = []
        for task in tasks:
            job = task.args[0] if task.fn == self._run and task.args else None
            if isinstance(job, _Job) and job.op is not None:
                group.append(task)
                continue
            self._commit_group(group)
            group = []
            task.run()
        self._commit_group(group)

    def _commit_group(self, tasks: list[LaneTask[Any]]) -> None:
        """Commit the writes of ``tasks`` together (one at a time when fewer than two are live)."""
        live: list[tuple[LaneTask[Any], _Job]] = []
        for task in tasks:
            job: _Job = task.args[0]
            with self._lock:
                abandoned = job.abandoned
            if abandoned:  # written as what its waiter was told instead
                task.run()
            else:
                live.append((task, job))
        if len(live) < 2:
            for task, _ in live:
                task.run()
            return
        group = self._group
        assert group is not None
        try:
            results = group([job.op for _, job in live])
        except BaseException as exc:  # a backend breaking its contract: each waiter is told
            results = [(False, exc)] * len(live)
        for (task, job), (ok, value) in zip(live, results, strict=True):
            try:
                if ok:
                    self._landed(job, value)
                    task.complete(value)
                else:
                    if isinstance(value, EvidenceStoreError):
                        self._refused(job, value)
                    task.complete(None, value)
            finally:
                with self._lock:
                    self._inflight -= 1
                    self._inflight_ran -= _ran(job)
        self._heads_checkpoint()

    def _owe(self, job: _Job, error: EvidenceStoreError, told: GiveUp | None = None) -> None:
        """Keep what ``job``'s caller was told, to write once the store answers again.

        For a cause that passes and leaves nothing of the write in the store
        (``OWED_CAUSES``): the caller was answered ``evidence_unavailable``, and
        that answer deserves its record as much as one whose write was still
        queued when the caller gave up (which ``_run`` writes the same way). And
        for a write whose connection was lost in flight, its fate not told in time
        (``EvidenceStoreError.in_doubt``): once the store answers, what did not land
        is written as for those, and an attempt that did is concluded with what its
        caller was told (``_resolve``).
        """
        cause = error.cause
        if job.instead is None:
            return
        instead = job.instead
        if cause in OWED_CAUSES:
            # each cause that passes is also what its caller was told, when not told otherwise
            why: GiveUp = told or cause
            self._keep_owed(lambda: instead(why), _ran(job))
        elif error.in_doubt is not None and self._write_landed is not None:
            doubt, told_as = error.in_doubt, told or "io"
            self._keep_owed(lambda: self._resolve(job, doubt, told_as), _ran(job))

    def _resolve(self, job: _Job, doubt: tuple[str, int, str, int | None], why: GiveUp) -> None:
        """Written when the store answers again: ``job``'s write, in doubt, landed or not (see
        ``_owe``). A store that still cannot tell keeps it owed (cause ``timeout``)."""
        assert self._write_landed is not None and job.instead is not None
        try:
            landed, seq = self._write_landed(doubt)
        except EvidenceStoreError as exc:
            raise EvidenceStoreError(
                f"cannot tell yet whether a write landed: {exc}", "timeout"
            ) from exc
        if not landed:
            job.instead(why)
        elif job.compensate is not None and seq is not None:
            job.compensate(seq, why)  # an attempt that landed, its call not run

    def _keep_owed(self, write: Callable[[], Any], ran: bool = False) -> None:
        """Keep ``write`` until the store answers (``_settle_owed``); past ``max_pending``
        it is only counted (``unwritten``). ``ran``: it concludes an attempt in the store
        (an outcome: the call ran, or its attempt landed after its caller gave up), rather
        than recording a call that did not run."""
        with self._lock:
            if len(self._owed) < self.max_pending:
                self._owed.append((write, ran))
            else:
                self._owed_dropped += 1
                self._dropped_ran += int(ran)

    def owe(self, write: Callable[[], Any], turn_id: str | None = None) -> None:
        """Keep ``write``, a record the store refused for a cause that passes, to write with
        the refused calls' records: after the next write that lands, or by
        ``settle_unwritten``; its own failure is reported. With ``turn_id`` it is that turn's
        seal (refused as the turn closed): written after every other owed record, so the
        records of the turn's calls the store refused with it precede it in the chain, and
        told apart from them (``unsealed``): a seal is not a call that did not run."""
        if turn_id is None:
            self._keep_owed(write)
            return
        with self._lock:
            if turn_id in self._owed_seals or turn_id in self._seals_behind:
                return
            queued = self._inflight
            if queued:
                self._seals_behind[turn_id] = write
            else:
                self._owed_seals[turn_id] = write
        if queued:
            # writes still queued (given up on as the turn closed: the turn's calls among
            # them) go first: the seal is due once the writer thread has run them
            self._lane.submit(LaneTask(self._seal_due, turn_id))

    def _seal_due(self, turn_id: str) -> None:
        """On the writer thread, behind the writes queued when the seal was owed: the seal
        joins the owed seals (written after the owed records), at once if the store answers."""
        with self._lock:
            write = self._seals_behind.pop(turn_id, None)
            if write is not None:
                self._owed_seals.setdefault(turn_id, write)
        if write is not None and not self._report.failing:
            self._settle_owed()

    def queued(self) -> int:
        """How many writes wait for the writer thread or are being written (given up on by
        their callers or not): not in the store yet."""
        with self._lock:
            return self._inflight

    def drain(self, wait_s: float) -> bool:
        """Wait (at most ``wait_s``; never on the writer thread) until the writer thread has
        run every write queued before now; True when it has."""
        with self._lock:
            if not self._inflight:
                return True
        ran = threading.Event()
        self._lane.submit(LaneTask(ran.set))
        return ran.wait(max(wait_s, 0.0))

    def unwritten(self) -> int:
        """How many records of refused calls (``OWED_CAUSES``) are still not in the store,
        with the writes still queued on the writer thread (``queued``)."""
        with self._lock:
            return len(self._owed) + self._owed_dropped + self._inflight

    def unwritten_outcomes(self) -> int:
        """How many of those (``unwritten``) are outcomes: their attempts are in the store,
        without an outcome (``interrupted``)."""
        with self._lock:
            return sum(ran for _, ran in self._owed) + self._dropped_ran + self._inflight_ran

    def owing(self) -> int:
        """How many records owed to refused calls are kept, waiting for the store (those
        past ``max_pending``, never kept, are not: nothing will write them)."""
        with self._lock:
            return len(self._owed)

    def unsealed(self) -> list[str]:
        """The turns whose seal, refused as they closed, is still not in the store (owed
        still, or lost to a fault that does not pass)."""
        with self._lock:
            return [*self._seals_lost, *self._seals_behind, *self._owed_seals]

    def settle_unwritten(self, wait_s: float | None = None) -> int:
        """Try once more, now and on this thread, to write what refused calls are owed (a
        process about to exit); how many are still not in the store.

        When the writer thread is already writing them, wait for it (at most ``wait_s``,
        by default five times ``timeout_s``) before trying the rest: returning at once let
        a host exit while the writer was half-way, taking the other records with it.
        Writes still queued on the writer thread (given up on by their callers: what those
        were told) are waited for first, within the same bound; those not written by then
        are counted too."""
        deadline = time.monotonic() + (self.timeout_s * 5 if wait_s is None else wait_s)
        self.drain(deadline - time.monotonic())
        with self._settled:
            while self._settling:
                left = deadline - time.monotonic()
                if left <= 0:
                    return len(self._owed) + self._owed_dropped + self._inflight
                self._settled.wait(left)
            self._settling = True
        self._write_owed()
        return self.unwritten()

    def _settle_owed(self) -> None:
        """Queue the owed records on the writer thread (after a write landed: the store answers)."""
        with self._lock:
            if not (self._owed or self._owed_seals) or self._settling:
                return
            self._settling = True
        self._lane.submit(LaneTask(self._write_owed))

    def _write_owed(self) -> None:
        """On the writer thread: each owed record, then each owed seal (only once no record
        is left owed); those the store still refuses stay owed."""
        try:
            while True:
                turn_id: str | None = None
                with self._lock:
                    if self._owed:
                        owed = self._owed.pop(0)
                        write = owed[0]
                    elif self._owed_seals:
                        turn_id = next(iter(self._owed_seals))
                        write = self._owed_seals.pop(turn_id)
                    else:
                        return
                try:
                    write()
                except EvidenceStoreError as exc:
                    if exc.cause in OWED_CAUSES:
                        with self._lock:
                            if turn_id is None:
                                self._owed.insert(0, owed)
                            else:
                                self._owed_seals = {turn_id: write, **self._owed_seals}
                        return
                    self._lost(turn_id, exc.cause, str(exc))
                except Exception as exc:
                    self._lost(turn_id, "io", f"{type(exc).__name__}: {exc}")
        finally:
            with self._settled:
                self._settling = False
                self._settled.notify_all()

    def _lost(self, turn_id: str | None, cause: str, message: str) -> None:
        """An owed record (a call's, or the seal of ``turn_id``) the store refused for a
        cause that does not pass: said, and a seal kept among the turns left unsealed."""
        what = "a record nobody waits for" if turn_id is None else f"the seal of turn {turn_id}"
        self._failed(cause, f"{message} ({what} was lost)")
        if turn_id is not None:
            with self._lock:
                self._seals_lost.append(turn_id)

    def _owing(self, write: Callable[[], Any], ran: bool = False) -> None:
        """A record nobody waits for that says what a caller was told (written instead of a
        write given up on, or concluding one that landed late): refused for a cause that
        passes (``OWED_CAUSES``: a lock still held), it is kept and written once the store
        answers, like a refused call's; otherwise as ``_quietly``."""
        try:
            write()
        except EvidenceStoreError as exc:
            if exc.cause not in OWED_CAUSES:
                self._failed(exc.cause, f"{exc} (a record nobody waits for was lost)")
                return
            self._failed(exc.cause, str(exc))
            self._keep_owed(write, ran)
        except Exception as exc:
            self._failed("io", f"{type(exc).__name__}: {exc} (a record nobody waits for was lost)")
        else:
            self._succeeded()

    def _quietly(self, write: Callable[[], Any]) -> None:
        """A write nobody waits for: a failure is reported, never raised."""
        try:
            write()
        except EvidenceStoreError as exc:
            self._failed(exc.cause, f"{exc} (a record nobody waits for was lost)")
        except Exception as exc:
            self._failed("io", f"{type(exc).__name__}: {exc} (a record nobody waits for was lost)")
        else:
            self._succeeded()

    # -- reporting ----------------------------------------------------------------

    def _failed(self, cause: str, message: str) -> None:
        self._report.failed(
            cause,
            f"evidence store unavailable ({cause}): {message}; calls fail closed "
            "(evidence_unavailable) until it recovers",
        )

    def _succeeded(self) -> None:
        # a failed write is no progress: a store that fails every write slowly is stuck
        self._progress_at = time.monotonic()
        if self._report.failing:
            self._report.succeeded()
        if self._owed or self._owed_seals:
            self._settle_owed()


def unwritten_note(missing: int, unsealed: Sequence[str] = (), ran: int = 0) -> str | None:
    """What a host says on exit when ``missing`` records of refused calls
    (``RuntimeHost.settle_unwritten``), ``ran`` of them outcomes of attempts in the store
    (``RuntimeHost.unwritten_outcomes``), or the seals of the turns ``unsealed``
    (``RuntimeHost.unsealed_turns``) could not be written; None when nothing is missing."""
    lines: list[str] = []
    refused = missing - ran
    if refused > 0:
        lines.append(
            f"sharedos: {refused} record{'s' if refused != 1 else ''} the evidence store "
            "refused (a full disk, a lock) could not be written before exit: the calls they "
            "record did not run, and the store has no record of them"
        )
    if ran > 0:
        lines.append(
            f"sharedos: the outcome{'s' if ran != 1 else ''} of {ran} call"
            f"{'s' if ran != 1 else ''} whose attempt is in the store could not be written "
            "before exit (the evidence store refused them: a full disk, a lock): those "
            "attempts stay without an outcome, shown as interrupted"
        )
    for turn_id in unsealed:
        lines.append(
            f"sharedos: the seal of turn {turn_id}, refused by the evidence store (a full "
            "disk, a lock) as the turn closed, could not be written before exit: its records "
            "stand, unsealed, and `sharedos evidence verify --require-seal` reports it "
            "unsealed"
        )
    return "\n".join(lines) or None


def _ran(job: _Job) -> bool:
    """Whether what ``job``'s waiter is owed concludes an attempt in the store (an outcome)."""
    return job.op is not None and job.op[0] == "finish"


class RecordOnlyStore:
    """Adapts a store of the version-1 protocol (``record`` only) to the two-phase one.

    Such a store cannot write an attempt ahead of its effect: ``begin`` keeps
    the attempt in memory and ``finish`` records it complete. It is accepted so
    that older backends (and benchmarks' evidence-off baselines) keep working,
    and RuntimeHost says at construction, once, that the guarantee is gone.
    """

    def __init__(self, store: Any) -> None:
        self.inner = store
        self._pending: dict[int, EvidenceRecord] = {}
        self._next = -2  # provisional seqs are negative: never a store's
        self._lock = threading.Lock()
        logger.warning(
            "sharedos: evidence store %s has no begin()/finish(): attempts are not written "
            "ahead of their effect (no write-ahead guarantee)",
            type(store).__name__,
        )

    def begin(self, attempt: EvidenceRecord) -> int:
        """Keep ``attempt`` until its outcome is known (nothing durable)."""
        with self._lock:
            seq = self._next
            self._next -= 1
            self._pending[seq] = attempt
        return seq

    def finish(self, seq: int, outcome: OutcomeRecord) -> int:
        """Record the kept attempt with ``outcome``; the store's seq."""
        with self._lock:
            attempt = self._pending.pop(seq, None)
        if attempt is None:
            raise EvidenceStoreError(f"no pending attempt {seq}", "conflict")
        return int(self.inner.record(attempt.with_outcome(outcome)))

    def record(self, record: EvidenceRecord) -> int:
        """Record a complete record."""
        return int(self.inner.record(record))

    def query(self, *args: Any, **kwargs: Any) -> list[EvidenceRecord]:
        """The inner store's records."""
        return list(self.inner.query(*args, **kwargs))

    def counts(self, turn_id: str | None = None) -> Any:
        """The inner store's counts."""
        return self.inner.counts(turn_id)
