"""Evidence: a durable record of every tool-call attempt (SQLite by default)."""

from sharedos.evidence.dicts import record_dict
from sharedos.evidence.record import (
    MAX_STORED_ARGUMENTS,
    REDACTED,
    EncodedJson,
    EvidenceRecord,
    arguments_digest,
    plain_json,
    redact_arguments,
    storable_json_text,
)
from sharedos.evidence.sqlite import EvidenceStoreError, SqliteEvidenceStore
from sharedos.evidence.store import EvidenceCounts, EvidenceStore

__all__ = [
    "MAX_STORED_ARGUMENTS",
    "REDACTED",
    "EncodedJson",
    "EvidenceCounts",
    "EvidenceRecord",
    "EvidenceStore",
    "EvidenceStoreError",
    "SqliteEvidenceStore",
    "arguments_digest",
    "plain_json",
    "record_dict",
    "redact_arguments",
    "storable_json_text",
]
