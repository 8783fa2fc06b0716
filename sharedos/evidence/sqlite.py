"""``SqliteEvidenceStore``: the default evidence backend (SQLite, WAL).

Durability choice: ``journal_mode=WAL`` with ``synchronous=NORMAL`` by default.
In WAL mode every commit appends the transaction to the ``-wal`` file with a
``write()`` before ``record`` returns, so a record survives the death of the
process (SIGKILL, crash, OOM kill): the data is in the kernel's page cache and
the next opener replays the WAL. What NORMAL gives up is an ``fsync`` per
commit, i.e. the last few records on an operating-system crash or power loss.
That is the threat model of a host process recording tool calls, and an fsync
per call would cost milliseconds on ordinary disks (the target is 100 us).
Pass ``synchronous="FULL"`` where power-loss durability is worth that price.

Concurrency: one connection per store, guarded by a lock (many threads and
asyncio tasks of one process); separate processes each open their own store,
and SQLite's file locking plus ``busy_timeout`` serializes their commits.
A store used after ``fork()`` reopens its connection in the child.

Cost per record: one autocommit INSERT (p50 about 20-30 us here) plus
encoding the row (one C-level attribute fetch and pre-built JSON encoders: a
few us). ``seq`` is the rowid rather than an AUTOINCREMENT column, which would
add a write to ``sqlite_sequence`` on every insert; the store never deletes
rows, so rowids only grow. SQLite's automatic WAL checkpoint (every 1,000
pages) runs inside the commit that crosses it and is what the p99 of
``record`` measures (a few ms); moving it to a background thread was tried and
was worse on this machine (the WAL outran passive checkpoints). Measured and
not adopted: ``page_size`` 1024/8192, ``cache_size``/``temp_store`` (no change
at p50), ``wal_autocheckpoint=4000`` (rarer but longer stalls, mean about the
same). Only dropping the two indexes moved p50 (about -7 us), and queries by
turn and call id need them.
"""

from __future__ import annotations

import json
import operator
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Literal

from sharedos.evidence.record import EvidenceRecord, encoded_text, storable_json_text
from sharedos.evidence.store import EvidenceCounts

SCHEMA_VERSION = 1

_COLUMNS = (
    "turn_id",
    "call_id",
    "tool",
    "outcome",
    "started_at",
    "finished_at",
    "duration_ms",
    "arguments_digest",
    "arguments",
    "reason",
    "effect",
    "resource",
    "namespace",
    "action",
    "rule_ids",
    "error",
    "catalog_hash",
    "policy_hash",
    "principal",
    "tenant",
    "diagnostics",
    "identity",
)
_JSON_COLUMNS = frozenset({"arguments", "rule_ids", "diagnostics", "identity"})
#: one C-level attribute fetch for the whole row, in column order
_ROW = operator.attrgetter(*_COLUMNS)
_ENUM_INDEXES = tuple(_COLUMNS.index(c) for c in ("outcome", "reason"))
_JSON_INDEXES = tuple(_COLUMNS.index(c) for c in sorted(_JSON_COLUMNS))
_RULE_IDS_INDEX = _COLUMNS.index("rule_ids")

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS evidence (
    seq              INTEGER PRIMARY KEY,  -- the rowid: rows are never deleted, so it only grows
    turn_id          TEXT NOT NULL,
    call_id          TEXT NOT NULL,
    tool             TEXT NOT NULL,
    outcome          TEXT NOT NULL CHECK (outcome IN ('succeeded','denied','failed','cancelled')),
    started_at       TEXT NOT NULL,
    finished_at      TEXT NOT NULL,
    duration_ms      REAL NOT NULL,
    arguments_digest TEXT NOT NULL,
    arguments        TEXT,
    reason           TEXT,
    effect           TEXT,
    resource         TEXT,
    namespace        TEXT,
    action           TEXT,
    rule_ids         TEXT NOT NULL DEFAULT '[]',
    error            TEXT,
    catalog_hash     TEXT,
    policy_hash      TEXT,
    principal        TEXT,
    tenant           TEXT,
    diagnostics      TEXT,
    identity         TEXT
)""",
    "CREATE INDEX IF NOT EXISTS evidence_turn ON evidence (turn_id, seq)",
    "CREATE INDEX IF NOT EXISTS evidence_call ON evidence (call_id)",
)

_INSERT = f"INSERT INTO evidence ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
_SELECT = f"SELECT seq, {', '.join(_COLUMNS)} FROM evidence"


class EvidenceStoreError(RuntimeError):
    """The evidence database cannot be opened or written."""


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


def _row(record: EvidenceRecord) -> list[Any]:
    """The INSERT parameters for ``record``, in ``_COLUMNS`` order."""
    row = list(_ROW(record))
    row[_RULE_IDS_INDEX] = list(row[_RULE_IDS_INDEX])
    for i in _JSON_INDEXES:
        row[i] = _dumps(row[i])
    for i in _ENUM_INDEXES:
        if row[i] is not None:
            row[i] = str(row[i])
    return row


#: bumped in a child process right after ``fork()``; a store opened before the fork
#: compares it with its own to know that its lock and connection are not its own.
#: (Reading a counter instead of calling ``os.getpid()`` spares a system call per record.)
_FORK_GENERATION = [0]


def _forked() -> None:
    _FORK_GENERATION[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _create_private(path: str) -> None:
    """Create a new database file with mode 0600; leave an existing one (and its mode) alone.

    Security: evidence holds every turn's arguments, resources and principals;
    created with the umask it would be world-readable. SQLite gives the -wal
    and -shm files the database file's mode, so they follow.
    """
    if path.startswith("file:"):
        return  # a SQLite URI: the caller manages that file
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise EvidenceStoreError(f"cannot create evidence database {path}: {exc.strerror}") from exc
    os.close(fd)


class SqliteEvidenceStore:
    """Evidence in one SQLite file (or ``":memory:"`` for tests: the same code on real SQLite)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        busy_timeout_s: float = 10.0,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError("synchronous must be 'NORMAL' or 'FULL'")
        self.path = str(path)
        self.synchronous = synchronous
        self._busy_timeout_s = busy_timeout_s
        self._lock = threading.Lock()
        self._generation = _FORK_GENERATION[0]
        self._conn = self._open()
        self._insert = self._conn.cursor()

    def _open(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            parent = Path(self.path).expanduser().resolve().parent
            if not parent.is_dir():
                raise EvidenceStoreError(f"evidence database directory {parent} does not exist")
            _create_private(self.path)
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout_s,
                isolation_level=None,  # autocommit: each INSERT is its own durable transaction
                check_same_thread=False,  # guarded by self._lock
            )
            if self.path != ":memory:":
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise EvidenceStoreError(f"could not enable WAL on {self.path} (got {mode})")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_s * 1000)}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise EvidenceStoreError(
                    f"{self.path} has evidence schema version {version}; this SharedOS "
                    f"reads version {SCHEMA_VERSION}"
                )
            if version == 0:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for stmt in _SCHEMA:
                        conn.execute(stmt)
                    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise EvidenceStoreError(f"cannot open evidence database {self.path}: {exc}") from exc
        return conn

    def _locked(self) -> threading.Lock:
        """The store's lock, after making sure this process owns its connection.

        Neither a SQLite connection nor a lock survives ``fork()``: the child
        may inherit a lock some other thread held at the moment of the fork
        (and would wait on it forever) and a connection in the middle of a
        transaction. The child therefore gets a fresh lock and connection.
        """
        if self._generation != _FORK_GENERATION[0]:
            self._lock = threading.Lock()
            self._generation = _FORK_GENERATION[0]
            self._conn = self._open()
            self._insert = self._conn.cursor()
        return self._lock

    def _connection(self) -> sqlite3.Connection:
        return self._conn

    def record(self, record: EvidenceRecord) -> int:
        """Insert ``record`` in its own transaction; return its ``seq`` once committed."""
        row = _row(record)
        with self._locked():
            try:
                # one reused cursor: conn.execute() would build a new one per record
                cur = self._insert.execute(_INSERT, row)
            except sqlite3.Error as exc:
                raise EvidenceStoreError(f"cannot write evidence to {self.path}: {exc}") from exc
            seq = cur.lastrowid
        assert seq is not None
        return int(seq)

    def query(
        self,
        turn_id: str | None = None,
        *,
        call_id: str | None = None,
        outcome: str | None = None,
        limit: int | None = None,
    ) -> list[EvidenceRecord]:
        """Records in ``seq`` order, filtered by turn, call id and outcome."""
        where, params = [], []
        for column, value in (("turn_id", turn_id), ("call_id", call_id), ("outcome", outcome)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = _SELECT + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._locked():
            rows = self._connection().execute(sql, params).fetchall()
        return [self._row_to_record(row) for row in rows]

    def counts(self, turn_id: str | None = None) -> EvidenceCounts:
        """Counts by outcome and by reason (``succeeded`` for a success), optionally for one turn."""
        where, params = ("WHERE turn_id = ?", [turn_id]) if turn_id is not None else ("", [])
        with self._locked():
            conn = self._connection()
            by_outcome = dict(
                conn.execute(
                    f"SELECT outcome, COUNT(*) FROM evidence {where} GROUP BY outcome ORDER BY outcome",
                    params,
                ).fetchall()
            )
            by_reason = dict(
                conn.execute(
                    f"SELECT COALESCE(reason, outcome), COUNT(*) FROM evidence {where} "
                    "GROUP BY 1 ORDER BY 1",
                    params,
                ).fetchall()
            )
        return EvidenceCounts(
            total=sum(by_outcome.values()), by_outcome=by_outcome, by_reason=by_reason
        )

    def turns(self) -> list[tuple[str, int]]:
        """Turn ids with their number of records, in order of first appearance."""
        with self._locked():
            rows = (
                self._connection()
                .execute(
                    "SELECT turn_id, COUNT(*) FROM evidence GROUP BY turn_id ORDER BY MIN(seq)"
                )
                .fetchall()
            )
        return [(str(t), int(n)) for t, n in rows]

    @staticmethod
    def _row_to_record(row: tuple[Any, ...]) -> EvidenceRecord:
        data: dict[str, Any] = {"seq": row[0]}
        for name, value in zip(_COLUMNS, row[1:], strict=True):
            data[name] = json.loads(value) if name in _JSON_COLUMNS and value is not None else value
        return EvidenceRecord.from_dict(data)

    def close(self) -> None:
        """Close the connection (further use raises ``EvidenceStoreError``)."""
        with self._locked():
            self._conn.close()

    def __enter__(self) -> SqliteEvidenceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
