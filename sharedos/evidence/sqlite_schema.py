"""The SQLite evidence schema, version 6: DDL, the migrations, and the one chained write.

Version 4 (``sharedos.evidence.chain_sql``) keeps every row of every turn in
one table, ``chain``, each row with its own link of the turn's hash chain;
``attempts``, ``outcomes``, ``turns``, ``seals``, ``links`` and ``evidence``
are views of it under the version-3 names. Every write is a ``Plan`` made by
``ChainAppender`` and committed by ``SqliteEvidenceStore``'s ``run_plan``: one ``INSERT`` (autocommit)
when the plan is one row — an attempt of an open turn, an outcome, a seal —
and one transaction when it is two (a turn's first row and its opening; a
refused call's attempt and outcome). Older files are migrated when opened
for writing: 1 -> 2 -> 3 (their rows chained) -> 4 -> 5 (the columns
``chain`` lacks added: ``sharedos.evidence.migrate.layout_step``) -> 6
(approvals: ``chain`` rebuilt with the kind ``approval``,
``sharedos.evidence.chain_sql.approvals_step``).
"""

from __future__ import annotations

from sharedos.evidence.chain import ATTEMPT_FIELDS, KINDS
from sharedos.evidence.chain_sql import (
    VIEWS,
    checkpoint_ddl,
    evidence_source,
    insert_sql,
    picked,
    table_ddl,
)
from sharedos.evidence.migrate import (
    LATER_ATTEMPT_FIELDS,
    SQLITE_V3,
    V3_ATTEMPT_FIELDS,
    v3_to_v4,
)
from sharedos.evidence.record import OUTCOME_FIELDS

SCHEMA_VERSION = 6

__all__ = [
    "INSERT",
    "INSERT_PROBE",
    "JSON_COLUMNS",
    "MIGRATE_FROM_1",
    "MIGRATE_FROM_2",
    "MIGRATE_FROM_3",
    "READ_COLUMNS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SELECT",
    "select_records",
]

_OUTCOME_COLUMNS = OUTCOME_FIELDS  # outcome, reason, finished_at, duration_ms, error
#: every column of the ``evidence`` view, in read order (version 4)
READ_COLUMNS = ATTEMPT_FIELDS + _OUTCOME_COLUMNS
#: the same for a file read as it is at version 1 to 3 (no ``context``)
READ_COLUMNS_V3 = V3_ATTEMPT_FIELDS + _OUTCOME_COLUMNS
JSON_COLUMNS = frozenset({"arguments", "rule_ids", "diagnostics", "identity", "context", "shadow"})
#: the attempt columns a file at version 1 to 3 lacks
MISSING_BEFORE_4 = frozenset(LATER_ATTEMPT_FIELDS)

_OUTCOMES_CHECK = "('succeeded','denied','failed','cancelled')"
# -- versions 2 and 3 (what the migrations pass through) -----------------------------------
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
_VIEW_V2_DDL = (
    "CREATE VIEW evidence AS SELECT a.seq AS seq, "
    + ", ".join(f"a.{c} AS {c}" for c in V3_ATTEMPT_FIELDS)
    + ", "
    + ", ".join(f"o.{c} AS {c}" for c in _OUTCOME_COLUMNS)
    + " FROM attempts AS a LEFT JOIN outcomes AS o ON o.seq = a.seq"
)
_META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)"
_V2 = (
    _ATTEMPTS_DDL,
    _OUTCOMES_DDL,
    _META,
    "CREATE INDEX attempts_turn ON attempts (turn_id, seq)",
    "CREATE INDEX attempts_call ON attempts (call_id)",
    _VIEW_V2_DDL,
)
#: the version-2 layout (what a version-2 SharedOS created; tests build old files with it)
SCHEMA_V2 = _V2
# -- version 4 ------------------------------------------------------------------------------
#: an empty file, straight to version 4
SCHEMA = (_META, *table_ddl("sqlite"), *VIEWS, *checkpoint_ddl("sqlite"))
#: version 1 -> 3 (its rows are then chained), then ``MIGRATE_FROM_3``
MIGRATE_FROM_1 = (
    *_V2[:3],
    f"INSERT INTO attempts (seq, {', '.join(V3_ATTEMPT_FIELDS)}) "
    f"SELECT seq, {', '.join(V3_ATTEMPT_FIELDS)} FROM evidence ORDER BY seq",
    f"INSERT INTO outcomes (seq, {', '.join(_OUTCOME_COLUMNS)}) "
    f"SELECT seq, {', '.join(_OUTCOME_COLUMNS)} FROM evidence ORDER BY seq",
    "DROP TABLE evidence",  # and its indexes evidence_turn, evidence_call
    *_V2[3:],
    *SQLITE_V3,
)
#: version 2 -> 3: the chain's tables (the rows already there are then chained)
MIGRATE_FROM_2 = SQLITE_V3
#: version 3 -> 4: one table
MIGRATE_FROM_3 = v3_to_v4("sqlite")

#: the INSERT of each kind of row
INSERT = {kind: insert_sql(kind, "sqlite") for kind in KINDS}


def select_records(missing: frozenset[str] = frozenset(), *, chained: bool = True) -> str:
    """The records' SELECT (every ``READ_COLUMNS``), ``missing`` columns read as null; from
    ``chain`` itself, not the ``evidence`` view, unless the file is older than schema 4
    (``chain_sql.evidence_source``)."""
    source = evidence_source(missing, chained=chained)
    return f"SELECT seq, {picked(READ_COLUMNS, missing)} FROM {source} AS evidence"


SELECT = select_records()
INSERT_PROBE = "INSERT OR REPLACE INTO meta (key, value) VALUES ('last_opened_at', ?)"
