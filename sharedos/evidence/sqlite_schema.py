"""The SQLite evidence schema, version 3: DDL, the migrations, and the one chained write.

Table ``attempts`` holds the row committed before a handler runs, table
``outcomes`` the row that concludes it (``seq`` is its primary key and a
foreign key to ``attempts``), and the view ``evidence`` joins them under the
version-1 column names. Version 3 adds the tamper-evident chain
(``sharedos.evidence.chain``): ``turns`` (each turn's opening record),
``links`` (each row's place in its turn's chain) and ``seals``. Every write
is a ``Plan`` made by ``ChainAppender`` and committed by ``run_plan`` in one
transaction, on either of the store's connections.
"""

from __future__ import annotations

import sqlite3

from sharedos.evidence.appender import Plan, StaleHead
from sharedos.evidence.chain import ATTEMPT_FIELDS
from sharedos.evidence.migrate import SQLITE_V3
from sharedos.evidence.record import OUTCOME_FIELDS

SCHEMA_VERSION = 3

__all__ = [
    "INSERT_PROBE",
    "JSON_COLUMNS",
    "MIGRATE_FROM_1",
    "MIGRATE_FROM_2",
    "READ_COLUMNS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SELECT",
    "run_plan",
]

#: the attempt row's columns, in INSERT order (the chain hashes them in the same order)
_ATTEMPT_COLUMNS = ATTEMPT_FIELDS
_OUTCOME_COLUMNS = OUTCOME_FIELDS  # outcome, reason, finished_at, duration_ms, error
#: every column of the ``evidence`` view (and of the version-1 table), in read order
READ_COLUMNS = _ATTEMPT_COLUMNS + _OUTCOME_COLUMNS
JSON_COLUMNS = frozenset({"arguments", "rule_ids", "diagnostics", "identity"})

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
    *SQLITE_V3,  # the chain (sharedos.evidence.chain): turns, links, seals
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
#: version 2 -> 3: the chain's tables (the rows already there are chained by the migration)
MIGRATE_FROM_2 = SQLITE_V3
_INSERT_ATTEMPT = (
    f"INSERT INTO attempts ({', '.join(_ATTEMPT_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_ATTEMPT_COLUMNS))})"
)
_INSERT_OUTCOME = (
    f"INSERT INTO outcomes (seq, {', '.join(_OUTCOME_COLUMNS)}) "
    f"VALUES (?, {', '.join('?' * len(_OUTCOME_COLUMNS))})"
)
_INSERT_TURN = (
    "INSERT INTO turns (turn_id, opened_at, catalog_hash, policy_hash, policy_revision, identity) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_INSERT_SEAL = "INSERT INTO seals (turn_id, pos, closed_at, links, key_id, signature) VALUES (?, ?, ?, ?, ?, ?)"
_INSERT_LINK = (
    "INSERT INTO links (turn_id, pos, kind, seq, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?)"
)
SELECT = f"SELECT seq, {', '.join(READ_COLUMNS)} FROM evidence"
INSERT_PROBE = "INSERT OR REPLACE INTO meta (key, value) VALUES ('last_opened_at', ?)"


def run_plan(cur: sqlite3.Cursor, plan: Plan) -> int:
    """Commit ``plan`` (a turn's next chain links and their rows) in one transaction.

    Returns the attempt's seq (the plan's own for an outcome, -1 for an
    opening or a seal). Raises ``StaleHead`` when the first position is
    taken (another writer moved the turn's head) and ``sqlite3.Error`` for
    the rest (a second outcome is a constraint error: cause ``conflict``).
    """
    cur.execute("BEGIN IMMEDIATE")
    try:
        seq = plan.seq if plan.seq is not None else -1
        if plan.opening is not None:
            cur.execute(_INSERT_TURN, plan.opening.values())
        if plan.attempt is not None:
            rowid = cur.execute(_INSERT_ATTEMPT, plan.attempt).lastrowid
            assert rowid is not None
            seq = int(rowid)
        if plan.outcome is not None:
            cur.execute(_INSERT_OUTCOME, (seq, *plan.outcome))
        if plan.seal is not None:
            closed_at, links, key_id, signature = plan.seal
            pos = plan.links[-1].pos
            cur.execute(_INSERT_SEAL, (plan.turn_id, pos, closed_at, links, key_id, signature))
        for link in plan.links:
            link_seq = seq if link.kind in ("attempt", "outcome") else None
            try:
                cur.execute(
                    _INSERT_LINK,
                    (plan.turn_id, link.pos, link.kind, link_seq, link.prev, link.hash),
                )
            except sqlite3.IntegrityError as exc:
                if "links." in str(exc):
                    raise StaleHead() from None
                raise
        cur.execute("COMMIT")
    except BaseException:
        if cur.connection.in_transaction:
            cur.connection.execute("ROLLBACK")
        raise
    return seq
