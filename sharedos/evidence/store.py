"""The ``EvidenceStore`` protocol (two-phase, write-ahead), its errors and the counts it reports.

The contract every backend implements (SQLite here; a PostgreSQL backend is
written against the same page, docs/contracts.md "evidence"):

* ``begin(attempt) -> seq`` commits one *attempt* row: everything known
  before a handler runs (call id, turn, raw tool name, redacted arguments,
  canonical resource, decision, rule ids, identity, hashes, diagnostics).
  ``attempt.outcome`` is ``None``. Durable when it returns; ``seq`` is the
  store's strictly increasing sequence number.
* ``finish(seq, outcome)`` commits the *outcome* row of that attempt.
  Durable when it returns. An outcome is written once: a second ``finish``
  of the same ``seq``, or one for a ``seq`` no attempt has, raises
  ``EvidenceStoreError`` (cause ``conflict``) and changes nothing.
* ``record(record) -> seq`` commits an attempt and its outcome in one
  transaction: a call refused before any handler (denied, invalid
  arguments, turn closed) needs one commit only.
* Rows are append-only: nothing is updated or deleted. An attempt with no
  outcome row is read back with ``outcome=None`` and ``status ==
  "interrupted"`` (the process stopped between the two commits, or the call
  is still running at the moment of reading). It is never missing and never
  read as succeeded.
* Every failure to make a row durable raises ``EvidenceStoreError`` with a
  ``cause`` from ``CAUSES``; nothing else may escape. A store that finds it is
  no longer the file it opened (deleted, replaced, moved) raises cause
  ``replaced`` from then on.
* The methods are synchronous and thread-safe. They may block (a lock, a slow
  disk): callers on an event loop go through ``sharedos.kernel.recorder``,
  which runs them on a writer thread with a bounded wait.

In PostgreSQL terms: two tables ``attempts(seq bigserial primary key, ...)``
and ``outcomes(seq bigint primary key references attempts, ...)``; ``begin``
is one ``INSERT ... RETURNING seq`` in its own transaction, ``finish`` one
``INSERT`` (a unique violation is cause ``conflict``), ``record`` both in one
transaction, and reads are the attempts ``LEFT JOIN`` the outcomes (of ``chain`` itself,
not its views, from schema 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from sharedos.errors import EvidenceError
from sharedos.evidence.record import EvidenceRecord, OutcomeRecord

#: Why a store could not make a row durable (``EvidenceStoreError.cause``).
CAUSES = frozenset(
    {
        "locked",  # another connection holds the write lock beyond the store's busy wait
        "disk_full",  # the filesystem is full
        "read_only",  # the database, its directory or the filesystem is not writable
        "replaced",  # the file at the path is no longer the one opened (deleted, replaced, moved)
        "io",  # any other I/O or database error
        "closed",  # the store was closed
        "conflict",  # finish() of an unknown attempt, or of one that already has an outcome
        "timeout",  # the store did not answer within the caller's bound (raised by the recorder)
        "overloaded",  # too many writes already waiting (raised by the recorder)
    }
)

#: The store-derived status of an attempt that has no outcome row.
INTERRUPTED = "interrupted"


class EvidenceStoreError(EvidenceError, RuntimeError):
    """A row could not be made durable (or the store cannot be opened); ``cause`` says why."""

    def __init__(self, message: str, cause: str = "io") -> None:
        super().__init__(message)
        self.cause = cause if cause in CAUSES else "io"
        #: a write whose connection was lost in flight, its fate not told before the bound:
        #: (turn id, position and hash of its first link, position of its attempt link),
        #: for ``ChainAppender.landed`` to tell once the store answers again
        self.in_doubt: tuple[str, int, str, int | None] | None = None


@dataclass(frozen=True, slots=True)
class EvidenceCounts:
    """Attempts by status and by reason; ``denied / total`` is the denial rate.

    ``by_outcome`` has one key per status present: the four outcomes and
    ``interrupted`` (attempts with no outcome row), so it sums to ``total``.
    ``by_reason`` counts the reason code, ``succeeded`` for a success and
    ``interrupted`` for an attempt with no outcome; it sums to ``total`` too.
    """

    total: int
    by_outcome: dict[str, int] = field(default_factory=dict)
    by_reason: dict[str, int] = field(default_factory=dict)

    @property
    def denied(self) -> int:
        """Attempts whose outcome was ``denied``."""
        return self.by_outcome.get("denied", 0)

    @property
    def interrupted(self) -> int:
        """Attempts that have no outcome (the process stopped between the two commits)."""
        return self.by_outcome.get(INTERRUPTED, 0)

    @property
    def denial_rate(self) -> float:
        """``denied / total`` (0.0 for an empty store)."""
        return self.denied / self.total if self.total else 0.0

    def to_dict(self) -> dict[str, object]:
        """JSON-ready mapping."""
        return {
            "total": self.total,
            "denied": self.denied,
            "interrupted": self.interrupted,
            "denial_rate": self.denial_rate,
            "by_outcome": dict(self.by_outcome),
            "by_reason": dict(self.by_reason),
        }


@runtime_checkable
class EvidenceStore(Protocol):
    """A durable, append-only record of every attempt (see the module docstring for the contract)."""

    def begin(self, attempt: EvidenceRecord) -> int:
        """Commit ``attempt`` (its ``outcome`` is None); return its ``seq``. Durable on return."""
        ...

    def finish(self, seq: int, outcome: OutcomeRecord) -> None:
        """Commit the outcome of attempt ``seq``, once. Durable on return."""
        ...

    def record(self, record: EvidenceRecord) -> int:
        """Commit a complete record (attempt and outcome) in one transaction; return its ``seq``."""
        ...

    def query(
        self,
        turn_id: str | None = None,
        *,
        call_id: str | None = None,
        outcome: str | None = None,
        limit: int | None = None,
    ) -> list[EvidenceRecord]:
        """Records in sequence order, filtered; ``outcome="interrupted"`` selects attempts without one."""
        ...

    def counts(self, turn_id: str | None = None) -> EvidenceCounts:
        """Counts by status and reason, optionally for one turn."""
        ...
