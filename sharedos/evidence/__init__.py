"""Evidence: a durable record of every tool-call attempt (SQLite by default)."""

from sharedos.evidence.record import (
    REDACTED,
    EvidenceRecord,
    arguments_digest,
    redact_arguments,
)
from sharedos.evidence.sqlite import EvidenceStoreError, SqliteEvidenceStore
from sharedos.evidence.store import EvidenceCounts, EvidenceStore

__all__ = [
    "REDACTED",
    "EvidenceCounts",
    "EvidenceRecord",
    "EvidenceStore",
    "EvidenceStoreError",
    "SqliteEvidenceStore",
    "arguments_digest",
    "redact_arguments",
]
