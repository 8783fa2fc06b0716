"""Evidence: a durable, append-only, two-phase record of every tool-call attempt (SQLite by default)."""

from sharedos.evidence.dicts import record_dict
from sharedos.evidence.record import (
    MAX_STORED_ARGUMENTS,
    EncodedJson,
    EvidenceRecord,
    OutcomeRecord,
    arguments_digest,
    plain_json,
    storable_json_text,
)
from sharedos.evidence.sqlite import SCHEMA_VERSION, SqliteEvidenceStore
from sharedos.evidence.store import (
    CAUSES,
    INTERRUPTED,
    EvidenceCounts,
    EvidenceStore,
    EvidenceStoreError,
)
from sharedos.redaction import REDACTED

__all__ = [
    "CAUSES",
    "INTERRUPTED",
    "MAX_STORED_ARGUMENTS",
    "REDACTED",
    "SCHEMA_VERSION",
    "EncodedJson",
    "EvidenceCounts",
    "EvidenceRecord",
    "EvidenceStore",
    "EvidenceStoreError",
    "OutcomeRecord",
    "SqliteEvidenceStore",
    "arguments_digest",
    "plain_json",
    "record_dict",
    "storable_json_text",
]
