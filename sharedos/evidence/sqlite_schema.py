"""The SQLite evidence schema, version 2: DDL, the version-1 migration, and row encoding.

Table ``attempts`` holds the row committed before a handler runs, table
``outcomes`` the row that concludes it (``seq`` is its primary key and a
foreign key to ``attempts``), and the view ``evidence`` joins them under the
version-1 column names. Each write is one of three operations (``OPS``), a
function of a cursor that commits one transaction; the store runs them on
either of its connections.
"""

from __future__ import annotations

import json
import operator
import sqlite3
from collections.abc import Callable
from typing import Any

from sharedos.evidence.record import (
    OUTCOME_FIELDS,
    EvidenceRecord,
    OutcomeRecord,
    encoded_text,
    storable_json_text,
)

SCHEMA_VERSION = 2

__all__ = [
    "INSERT_PROBE",
    "JSON_COLUMNS",
    "MIGRATE_FROM_1",
    "OPS",
    "READ_COLUMNS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SELECT",
    "begin_op",
    "finish_op",
    "record_op",
]

#: the attempt row's columns, in INSERT order
_ATTEMPT_COLUMNS = (
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
)
_OUTCOME_COLUMNS = OUTCOME_FIELDS  # outcome, reason, finished_at, duration_ms, error
#: every column of the ``evidence`` view (and of the version-1 table), in read order
READ_COLUMNS = _ATTEMPT_COLUMNS + _OUTCOME_COLUMNS
JSON_COLUMNS = frozenset({"arguments", "rule_ids", "diagnostics", "identity"})
#: one C-level attribute fetch for the whole attempt row, in column order
_ATTEMPT_ROW = operator.attrgetter(*_ATTEMPT_COLUMNS)
_OUTCOME_ROW = operator.attrgetter(*_OUTCOME_COLUMNS)
_JSON_INDEXES = tuple(_ATTEMPT_COLUMNS.index(c) for c in sorted(JSON_COLUMNS))
_RULE_IDS_INDEX = _ATTEMPT_COLUMNS.index("rule_ids")

_OUTCOMES_CHECK = "('succeeded','denied','failed','cancelled')"
_ATTEMPTS_DDL = """CREATE TABLE attempts (
    seq              INTEGER PRIMARY KEY,  -- the rowid: rows are never deleted, so it only grows
    turn_id          TEXT NOT NULL,
    call_id          TEXT NOT NULL,
    tool             TEXT NOT NULL,
    started_at       TEXT NOT NULL,
    arguments_digest TEXT NOT NULL,
    arguments        TEXT,
    effect           TEXT,
    resource         TEXT,
    namespace        TEXT,
    action           TEXT,
    rule_ids         TEXT NOT NULL DEFAULT '[]',
    catalog_hash     TEXT,
    policy_hash      TEXT,
    principal        TEXT,
    tenant           TEXT,
    diagnostics      TEXT,
    identity         TEXT
)"""
_OUTCOMES_DDL = f"""CREATE TABLE outcomes (
    seq              INTEGER PRIMARY KEY REFERENCES attempts (seq),  -- written once per attempt
    outcome          TEXT NOT NULL CHECK (outcome IN {_OUTCOMES_CHECK}),
    reason           TEXT,
    finished_at      TEXT NOT NULL,
    duration_ms      REAL NOT NULL,
    error            TEXT
)"""
_VIEW_DDL = (
    "CREATE VIEW evidence AS SELECT a.seq AS seq, "
    + ", ".join(f"a.{c} AS {c}" for c in _ATTEMPT_COLUMNS)
    + ", "
    + ", ".join(f"o.{c} AS {c}" for c in _OUTCOME_COLUMNS)
    + " FROM attempts AS a LEFT JOIN outcomes AS o ON o.seq = a.seq"
)
SCHEMA = (
    _ATTEMPTS_DDL,
    _OUTCOMES_DDL,
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE INDEX attempts_turn ON attempts (turn_id, seq)",
    "CREATE INDEX attempts_call ON attempts (call_id)",
    _VIEW_DDL,
)
MIGRATE_FROM_1 = (
    *SCHEMA[:3],
    f"INSERT INTO attempts (seq, {', '.join(_ATTEMPT_COLUMNS)}) "
    f"SELECT seq, {', '.join(_ATTEMPT_COLUMNS)} FROM evidence ORDER BY seq",
    f"INSERT INTO outcomes (seq, {', '.join(_OUTCOME_COLUMNS)}) "
    f"SELECT seq, {', '.join(_OUTCOME_COLUMNS)} FROM evidence ORDER BY seq",
    "DROP TABLE evidence",  # and its indexes evidence_turn, evidence_call
    *SCHEMA[3:],
)
_INSERT_ATTEMPT = (
    f"INSERT INTO attempts ({', '.join(_ATTEMPT_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_ATTEMPT_COLUMNS))})"
)
_INSERT_OUTCOME = (
    f"INSERT INTO outcomes (seq, {', '.join(_OUTCOME_COLUMNS)}) "
    f"VALUES (?, {', '.join('?' * len(_OUTCOME_COLUMNS))})"
)
SELECT = f"SELECT seq, {', '.join(READ_COLUMNS)} FROM evidence"
INSERT_PROBE = "INSERT OR REPLACE INTO meta (key, value) VALUES ('last_opened_at', ?)"


def _dumps(value: Any) -> str | None:
    if value is None:
        return None
    text = encoded_text(value)  # encoded once on the call path (compact, ASCII-safe)
    if text is not None:
        return text
    try:
        return storable_json_text(value)
    except Exception:  # too deep or hostile: the record is still written
        return json.dumps({"$unstorable": type(value).__name__})


def _attempt_row(record: EvidenceRecord) -> list[Any]:
    """The INSERT parameters of ``record``'s attempt row, in ``_ATTEMPT_COLUMNS`` order."""
    row = list(_ATTEMPT_ROW(record))
    row[_RULE_IDS_INDEX] = list(row[_RULE_IDS_INDEX])
    for i in _JSON_INDEXES:
        row[i] = _dumps(row[i])
    return row


def _outcome_row(seq: int, outcome: OutcomeRecord) -> tuple[Any, ...]:
    """The INSERT parameters of an outcome row."""
    out, reason, finished_at, duration_ms, error = _OUTCOME_ROW(outcome)
    return (
        seq,
        str(out),
        str(reason) if reason is not None else None,
        finished_at,
        float(duration_ms),
        error,
    )


def begin_op(attempt: EvidenceRecord) -> Callable[[sqlite3.Cursor], int]:
    """The write of an attempt row; the op returns its seq."""
    row = _attempt_row(attempt)

    def op(cur: sqlite3.Cursor) -> int:
        seq = cur.execute(_INSERT_ATTEMPT, row).lastrowid
        assert seq is not None
        return int(seq)

    return op


def finish_op(seq: int, outcome: OutcomeRecord) -> Callable[[sqlite3.Cursor], None]:
    """The write of the outcome row of attempt ``seq``."""
    row = _outcome_row(int(seq), outcome)

    def op(cur: sqlite3.Cursor) -> None:
        cur.execute(_INSERT_OUTCOME, row)

    return op


def record_op(record: EvidenceRecord) -> Callable[[sqlite3.Cursor], int]:
    """Both rows of a complete record, in one transaction; the op returns the seq."""
    outcome = record.outcome_record
    if outcome is None:
        raise ValueError("record() needs a record with an outcome; use begin() for an attempt")
    row = _attempt_row(record)

    def op(cur: sqlite3.Cursor) -> int:
        cur.execute("BEGIN")
        try:
            seq = cur.execute(_INSERT_ATTEMPT, row).lastrowid
            assert seq is not None
            cur.execute(_INSERT_OUTCOME, _outcome_row(int(seq), outcome))
            cur.execute("COMMIT")
        except BaseException:
            if cur.connection.in_transaction:
                cur.connection.execute("ROLLBACK")
            raise
        return int(seq)

    return op


OPS: dict[str, Callable[..., Callable[[sqlite3.Cursor], Any]]] = {
    "begin": begin_op,
    "finish": finish_op,
    "record": record_op,
}
