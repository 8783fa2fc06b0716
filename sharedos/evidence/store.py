"""The ``EvidenceStore`` protocol and the counts it reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from sharedos.evidence.record import EvidenceRecord


@dataclass(frozen=True, slots=True)
class EvidenceCounts:
    """Attempts by outcome and by reason; ``denied / total`` is the denial rate."""

    total: int
    by_outcome: dict[str, int] = field(default_factory=dict)
    by_reason: dict[str, int] = field(default_factory=dict)

    @property
    def denied(self) -> int:
        """Attempts whose outcome was ``denied``."""
        return self.by_outcome.get("denied", 0)

    @property
    def denial_rate(self) -> float:
        """``denied / total`` (0.0 for an empty store)."""
        return self.denied / self.total if self.total else 0.0

    def to_dict(self) -> dict[str, object]:
        """JSON-ready mapping."""
        return {
            "total": self.total,
            "denied": self.denied,
            "denial_rate": self.denial_rate,
            "by_outcome": dict(self.by_outcome),
            "by_reason": dict(self.by_reason),
        }


@runtime_checkable
class EvidenceStore(Protocol):
    """A durable record of every attempt. Another backend implements these three methods."""

    def record(self, record: EvidenceRecord) -> int:
        """Store ``record``; return its sequence number. Durable before it returns."""
        ...

    def query(
        self,
        turn_id: str | None = None,
        *,
        call_id: str | None = None,
        outcome: str | None = None,
        limit: int | None = None,
    ) -> list[EvidenceRecord]:
        """Records in sequence order, filtered."""
        ...

    def counts(self, turn_id: str | None = None) -> EvidenceCounts:
        """Counts by outcome and reason, optionally for one turn."""
        ...
