"""``SqliteEvidenceStore``: the default evidence backend (SQLite, WAL, append-only, two phases).

Layout (schema version 2, ``sharedos.evidence.sqlite_schema``): table ``attempts`` (one row committed before a
handler runs), table ``outcomes`` (one row per concluded attempt, primary key
and foreign key ``seq``), and a view ``evidence`` = ``attempts LEFT JOIN
outcomes`` with the version-1 column names, so ``SELECT * FROM evidence``
reads both versions. An attempt without an outcome row reads as
``interrupted``. Version-1 files (one ``evidence`` table) are migrated in one
transaction when opened for writing, and read as they are when opened
read-only.

Durability: ``journal_mode=WAL`` with ``synchronous=NORMAL`` by default. Every
commit appends its frames to the ``-wal`` file with ``write()`` before the
method returns, so a committed row survives the death of the process
(SIGKILL, crash, OOM kill): the data is in the kernel's page cache and the
next opener replays the WAL. NORMAL does not ``fsync`` per commit, so an
operating-system crash or power loss can lose the last commits (never
corrupt the file: the WAL's checksums cut it at the last complete frame).
``synchronous="FULL"`` fsyncs the WAL on every commit and survives power
loss as well, at the price of an fsync per commit (two per allowed call).

The store knows it is the store: a writable open commits a probe row (a
read-only file, directory or filesystem, or a full disk, fails at open with
one line), and every commit is followed by a check that the database and its
``-wal`` at the path are still the files this connection writes (device and
inode): a file deleted, replaced or moved fails that commit and every later
one with cause ``replaced`` (rows written into an unlinked file are not
evidence anyone can read).

Concurrency: one connection per store, guarded by a lock (many threads of
one process); separate processes each open their own store, and SQLite's file
locking plus ``busy_timeout`` serializes their commits. A store used after
``fork()`` reopens its connection in the child. The busy wait (1.5 s by
default) is below the recorder's 2 s bound, so a locked store is reported as
``locked`` by the store itself rather than as a timeout.

Cost per commit: one autocommit INSERT (about 10-30 us here) plus two
``stat`` calls (about 1 us each). ``seq`` is the rowid rather than an
AUTOINCREMENT column, which would add a write to ``sqlite_sequence`` on every
insert; rows are never deleted, so rowids only grow. SQLite's automatic WAL
checkpoint (every 1,000 pages) runs inside the commit that crosses it and is
what a p99 measures (a few ms); it runs on the recorder's writer thread, never
on an event loop. ``try_now`` commits on a second connection with no busy wait
and no automatic checkpoint, for callers that must not wait (see its
docstring); ``checkpoint`` folds the WAL those commits grow, off the loop.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import struct
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from sharedos.evidence.appender import (
    ATTEMPT_SEQ,
    DEFAULT_CHECKPOINT_INTERVAL_S,
    DIRTY_LIMIT,
    ChainAppender,
    Fence,
    Opening,
    Plan,
    StaleHead,
)
from sharedos.evidence.chain import Link, Signer
from sharedos.evidence.chain_sql import (
    CHAIN_COLUMNS,
    GUARD_INDEXES,
    TURNS_SQL,
    TURNS_SQL_BEFORE_4,
    approval_row,
    approval_rows_sql,
    approvals_step,
    chain_rows_sql,
    checkpoint_heads_sql,
    checkpoint_insert_sql,
    checkpoint_values,
    counts_sql,
    fold_counts,
    heads_of,
    lookup_sql,
    missing_guards,
    reader_sql,
    require_approvals,
)
from sharedos.evidence.checkpoint import Checkpoint, CheckpointTaken
from sharedos.evidence.migrate import (
    layout_step,
    refuse_unreadable,
    sqlite_chain_columns,
    sqlite_chain_existing,
)
from sharedos.evidence.record import EvidenceRecord, OutcomeRecord, now_iso
from sharedos.evidence.reporting import FailureReporter
from sharedos.evidence.rows import (
    link_from_row,
    record_from_row,
    sqlite_attempt_values,
    sqlite_text,
)
from sharedos.evidence.sqlite_schema import (
    INSERT,
    INSERT_PROBE,
    MIGRATE_FROM_1,
    MIGRATE_FROM_2,
    MIGRATE_FROM_3,
    MISSING_BEFORE_4,
    READ_COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    select_records,
)
from sharedos.evidence.store import INTERRUPTED, EvidenceCounts, EvidenceStoreError

__all__ = ["SCHEMA_VERSION", "EvidenceStoreError", "SqliteEvidenceStore"]


_T = TypeVar("_T")

_NOT_NOW: tuple[bool, Any] = (False, None)
#: no-wait commits between two looks at the WAL's size. A commit with its chain
#: link writes several pages (~16 KiB of WAL), so 50 commits grow the WAL by
#: under 1 MiB between looks.
_CHECKPOINT_EVERY = 50
#: the WAL size past which ``checkpoint`` folds it back (SQLite's own default: 1,000 pages)
_CHECKPOINT_BYTES = 1000 * 4096
#: the WAL size past which no-wait commits stop until ``checkpoint`` has folded it:
#: commits then go through the writer thread, queued behind that checkpoint, so
#: a checkpoint that is late (its thread not scheduled) cannot let the WAL run away
_PAUSE_BYTES = 6 * 1024 * 1024
#: how long ``checkpoint`` waits for the write lock and for readers (ms) before it
#: leaves what it could not fold to the next one
_CHECKPOINT_WAIT_MS = 50
#: how long a writable open waits for another process's write lock (seconds): the
#: creation or migration of the file by a host started at the same moment
_OPEN_WAIT_S = 30.0
#: a WAL file left larger than this after a checkpoint reset is truncated to it
#: (``journal_size_limit``): the file's size is a high-water mark otherwise
_WAL_SIZE_LIMIT = 1024 * 1024


#: SQLite primary result codes -> ``EvidenceStoreError.cause``
_CAUSE_BY_CODE = {
    5: "locked",  # SQLITE_BUSY
    6: "locked",  # SQLITE_LOCKED
    8: "read_only",  # SQLITE_READONLY
    13: "disk_full",  # SQLITE_FULL
    19: "conflict",  # SQLITE_CONSTRAINT
    21: "closed",  # SQLITE_MISUSE
}


#: SQLITE_IOERR_WRITE: a write() of the file failed. SQLite says SQLITE_FULL only for ENOSPC;
#: a file-size limit (EFBIG) is this, "disk I/O error"
_IOERR_WRITE = 778
#: SQLITE_IOERR_SHMSIZE: the -shm file (the WAL's index, grown 32 KiB at a time) could not
#: be made larger, "disk I/O error": the filesystem has no room for it. Said ``disk_full``
#: at open only; a write it fails may have put its frames in the WAL already (fate unknown)
_IOERR_SHMSIZE = 4874


def _file_size_limited() -> bool:
    """True when this process may not grow a file past a size (``RLIMIT_FSIZE``)."""
    import resource

    return resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY


def _roll_back(conn: sqlite3.Connection) -> None:
    """End a failed transaction, if SQLite has not ended it already: on a full disk (and
    some other errors) it rolls back by itself, and a ROLLBACK then raises 'no transaction
    is active', which would replace the error that says what went wrong."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _cause(exc: BaseException) -> str:
    """The ``EvidenceStoreError`` cause for a SQLite or OS error."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and (code & 0xFF) in _CAUSE_BY_CODE:
        return _CAUSE_BY_CODE[code & 0xFF]
    if code == _IOERR_WRITE and _file_size_limited():
        # a write refused for the file's size, as for a full disk: nothing was committed
        # (the transaction's frames were not all written), and it passes when room returns
        return "disk_full"
    if isinstance(exc, sqlite3.ProgrammingError):
        return "closed"  # "Cannot operate on a closed database"
    if isinstance(exc, sqlite3.IntegrityError):
        return "conflict"
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            return "disk_full"
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return "read_only"
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return "locked"
    if "readonly" in text or "read-only" in text:
        return "read_only"
    if "full" in text:
        return "disk_full"
    return "io"


#: SQLite's primary codes for a file that is not what it should be: SQLITE_CORRUPT
#: ("database disk image is malformed"), SQLITE_NOTADB
_DAMAGED_CODES = frozenset({11, 26})


def _damaged(exc: BaseException) -> bool:
    """True when SQLite found the file damaged (not a passing cause: it stays damaged)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and (code & 0xFF) in _DAMAGED_CODES


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
    and -shm files the database file's mode, so they follow. A symlink at the
    path whose target does not exist yet is followed (SQLite would create the
    target, with the umask): ``O_EXCL`` refuses any symlink, so the file made
    here is the one the path resolves to.
    """
    try:
        fd = os.open(
            os.path.realpath(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600
        )
    except FileExistsError:
        return
    except OSError as exc:
        raise EvidenceStoreError(
            f"cannot create evidence database {path}: {exc.strerror}", _cause(exc)
        ) from exc
    os.close(fd)


def _may_open(path: str, *, writing: bool) -> None:
    """Fail with the system's reason when this process may not open the file as it must.

    SQLite says only "unable to open database file" for a file this user may not read
    (another user's 0600 store), and a reader then took the refusal for read-only media
    and blamed the ``-wal``; a writer on a file it may only read opened it read-only and
    failed at its first write instead.
    """
    flags = (os.O_RDWR if writing else os.O_RDONLY) | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        what = "write" if writing else "read"
        raise EvidenceStoreError(
            f"cannot {what} evidence database {path}: {exc.strerror}", _cause(exc)
        ) from None
    os.close(fd)


def _insert(cur: sqlite3.Cursor, kind: str, params: list[object]) -> int:
    try:
        cur.execute(INSERT[kind], params)
    except sqlite3.IntegrityError as exc:
        if "chain.turn_id, chain.pos" in str(exc):
            raise StaleHead() from None  # another writer took the position: re-plan
        if "chain.approval_id" in str(exc):
            from sharedos.evidence.approvals import ApprovalTaken

            # an approval requested, decided or closed a second time (another host won)
            raise ApprovalTaken(f"approval write refused: {exc}") from None
        raise
    rowid = cur.lastrowid
    assert rowid is not None
    return int(rowid)


def run_plan(cur: sqlite3.Cursor, plan: Plan, *, nested: bool = False) -> int:
    """Commit ``plan`` (a turn's next chain links and their rows) atomically.

    Returns the attempt's seq (the plan's own for an outcome, -1 for an
    opening or a seal). Raises ``StaleHead`` when the first position is
    taken (another writer moved the turn's head) and ``sqlite3.Error`` for
    the rest (a second outcome or an unknown attempt is a constraint error:
    cause ``conflict``). ``nested``: inside the caller's transaction (group
    commit), which commits or rolls back.
    """
    rows = plan.rows
    seq = plan.seq if plan.seq is not None else -1
    # one autocommitted INSERT is atomic by itself, but a fence must run before its commit
    if (len(rows) == 1 and plan.fence is None) or nested:
        for kind, params in rows:
            if kind == "outcome" and params[5] is ATTEMPT_SEQ:
                params = [*params[:5], seq, *params[6:]]  # the plan's rows stay as planned
            rowid = _insert(cur, kind, params)
            if kind == "attempt":
                seq = rowid
        if plan.fence is not None:
            plan.fence()  # the caller's transaction rolls back
        return seq
    cur.execute("BEGIN IMMEDIATE")
    try:
        for kind, params in rows:
            if kind == "outcome" and params[5] is ATTEMPT_SEQ:
                params = [*params[:5], seq, *params[6:]]
            rowid = _insert(cur, kind, params)
            if kind == "attempt":
                seq = rowid
        if plan.fence is not None:
            plan.fence()
        cur.execute("COMMIT")
    except BaseException:
        _roll_back(cur.connection)
        raise
    return seq


#: the columns of a records SELECT (``select_records``): seq, then ``READ_COLUMNS``
_RECORD_COLUMNS = ("seq", *READ_COLUMNS)

FileId = tuple[int, int]
#: the first fields of SQLite's WAL index header (each of its two copies is 48 bytes at the
#: start of the -shm, native byte order): version, unused, change counter, is-init,
#: big-endian checksums, page size (1 for 65536), frames in the WAL
_WAL_INDEX_HEADER = struct.Struct("=IIIBBHI28x")

_INSERT_CHECKPOINT = checkpoint_insert_sql("sqlite")
_INSERT_CHECKPOINT_HEAD = checkpoint_heads_sql("sqlite")
#: each turn's head past the furthest position its checkpoints covered
_UNCOVERED_SQL = lookup_sql("uncovered", "sqlite")
_HEAD_SQL = lookup_sql("head", "sqlite")
_ATTEMPT_LINK_SQL = lookup_sql("attempt_link", "sqlite")
_LINK_AT_SQL = lookup_sql("link_at", "sqlite")
_LAST_CHECKPOINT_SQL = lookup_sql("last_checkpoint", "sqlite")
_STORE_ID_SQL = lookup_sql("store_id", "sqlite")
#: each turn's furthest checkpointed head (and the checkpoint that recorded it)
#: every distinct head the checkpoints recorded (the first checkpoint that did), by turn
_COVERAGE_SQL = (
    "SELECT turn_id, pos, hash, min(number) FROM checkpoint_heads "
    "GROUP BY turn_id, pos, hash ORDER BY turn_id, pos, 4"
)


def _undecodable_text(data: bytes) -> str:
    """Stored text read for a verification: its bytes that are not UTF-8 as lone
    surrogates (``_verify_stream``), which no text SharedOS writes holds."""
    return data.decode("utf-8", "surrogateescape")


def stored_int(value: Any) -> int:
    """A stored count or position of a checkpoint; -1 (which matches nothing) when it is
    not an integer (SQLite keeps whatever it is given): reported, never a crash."""
    return value if type(value) is int else -1


def stored_text(value: Any) -> str:
    """A stored hash, id or time of a checkpoint; another type as its ``repr`` (which
    matches nothing), so the checkpoint is reported, not a crash."""
    return value if isinstance(value, str) else repr(value)


def _optional_text(value: Any) -> str | None:
    return None if value is None else stored_text(value)


def iter_checkpoint_rows(
    stream: Callable[[str, list[Any], int], Any],
) -> Iterator[tuple[Checkpoint, list[tuple[str, int, str]]]]:
    """Checkpoints with their heads, in number order, from one ordered join (both stores).

    Every stored value is read as it is (``stored_int``, ``stored_text``): a value of
    the wrong type gives a checkpoint that does not verify, never an exception."""
    sql = lookup_sql("checkpoint_rows", "sqlite")  # no placeholders: either dialect
    current: Checkpoint | None = None
    heads: list[tuple[str, int, str]] = []
    for row in stream(sql, [], 5000):
        if current is None or row[0] != current.number:
            if current is not None:
                yield current, heads
            current = Checkpoint(
                number=int(row[0]),  # the primary key: an integer in both stores
                store_id=stored_text(row[1]),
                taken_at=stored_text(row[2]),
                prev=stored_text(row[3]),
                heads=stored_int(row[4]),
                heads_hash=stored_text(row[5]),
                key_id=_optional_text(row[6]),
                signature=_optional_text(row[7]),
                hash=stored_text(row[8]),
            )
            heads = []
        if row[9] is not None:
            heads.append((stored_text(row[9]), stored_int(row[10]), stored_text(row[11])))
    if current is not None:
        yield current, heads


def _store_id(conn: sqlite3.Connection, *, create: bool) -> str:
    """The file's ``meta.store_id`` (given one when it has none and ``create``).

    Read only (``create`` False: ``evidence verify``), the value is read as it is stored:
    text that is not UTF-8 (SQLite keeps the bytes it is given, cast to text) with its
    bad bytes as lone surrogates, an id no checkpoint names (each is then a finding), and
    a null as no id at all (``""``) -- not 'cannot open', exit 2, nothing verified."""
    if create:
        row = conn.execute(_STORE_ID_SQL).fetchone()
        if row is not None:
            return str(row[0])
    else:
        factory = conn.text_factory
        conn.text_factory = _undecodable_text
        try:
            row = conn.execute(_STORE_ID_SQL).fetchone()
        finally:
            conn.text_factory = factory
        return "" if row is None or row[0] is None else str(row[0])
    import uuid

    made = str(uuid.uuid4())
    conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', ?)", (made,))
    row = conn.execute(_STORE_ID_SQL).fetchone()
    return str(row[0])


def _enter_wal(conn: sqlite3.Connection, deadline: float) -> str:
    """``PRAGMA journal_mode=WAL``; the mode the file is in afterwards.

    Switching a new file to WAL needs the file to itself, and SQLite answers
    "database is locked" at once, without its busy wait (waiting could deadlock),
    while another process is opening it too: hosts started together on a new file
    then all but one failed. The switch is retried until ``deadline``.
    """
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if _cause(exc) != "locked" or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


#: a table every SharedOS store at each schema version holds (what ``_refuse_foreign`` looks
#: for: a file at a version whose table is not there is another program's)
_TABLE_AT = {1: "evidence", 2: "attempts", 3: "links", 4: "chain", 5: "chain", 6: "chain"}


def _refuse_foreign(conn: sqlite3.Connection, path: str, *, writing: bool) -> None:
    """Refuse, before anything is written to it, a file this SharedOS must not write (or
    read as a store): one newer than it; one with no schema version that already holds
    tables (or anything else); one whose schema version is not a SharedOS store's, or
    that lacks the table a store at that version holds. Another program's database (many
    set ``user_version`` themselves) is not a store: a writable open switched it to WAL,
    and at versions 1 to 5 tried to migrate it ("no such table: attempts"). A SharedOS
    store always has its version: it is set in the transaction that creates it.

    The version and the tables are read in one transaction: another process may have
    created or migrated the store since the caller read its version (hosts started
    together), and its tables beside that stale version would look like another
    program's.
    """
    conn.execute("BEGIN")
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        names = [
            str(row[0])
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        anything = conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is not None
    finally:
        conn.execute("COMMIT")
    if version > SCHEMA_VERSION:
        refuse_unreadable(path, version, writing=writing)
    if version == 0 and not anything and writing:
        return  # an empty file: a new store
    if _TABLE_AT.get(version) in names:
        return
    holds = f"{', '.join(names[:3])}{', ...' if len(names) > 3 else ''}" or "no table"
    said = "no schema version" if version == 0 else f"schema version {version}"
    raise EvidenceStoreError(
        f"{path} is not a SharedOS evidence database ({said}, and it holds {holds}); "
        f"refusing to {'write evidence into' if writing else 'read evidence from'} it",
        "io",
    )


def _file_id(path: str) -> FileId | None:
    """(st_dev, st_ino) of ``path``, or None when nothing is there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class SqliteEvidenceStore:
    """Evidence in one SQLite file (or ``":memory:"`` for tests: the same code on real SQLite).

    ``read_only=True`` opens an existing file for reading only (the CLI): no
    probe, no migration, nothing created; any write raises cause
    ``read_only``. Every row is a link of its turn's hash chain
    (``sharedos.evidence.chain``); ``signer`` signs each turn's seal.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        busy_timeout_s: float = 1.5,
        read_only: bool = False,
        signer: Signer | None = None,
        checkpoint_interval_s: float | None = DEFAULT_CHECKPOINT_INTERVAL_S,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError("synchronous must be 'NORMAL' or 'FULL'")
        if busy_timeout_s < 0:
            raise ValueError("busy_timeout_s must not be negative")
        # ``~`` as everywhere else a store's path is read (``evidence.url``), not a directory
        # named ``~`` under the current one
        self.path = str(path) if str(path) == ":memory:" else os.path.expanduser(path)
        self.synchronous = synchronous
        self.read_only = read_only
        self._busy_timeout_s = busy_timeout_s
        self._lock = threading.Lock()
        self._generation = _FORK_GENERATION[0]
        #: why every further write fails (set once the file was found replaced, or on close)
        self._broken: EvidenceStoreError | None = None
        #: (db, wal) identities this connection writes; None for ":memory:" and readers
        self._ids: tuple[FileId, FileId | None] | None = None
        #: the ``-wal`` SQLite writes: beside the file the path resolves to (SQLite follows
        #: symlinks), not beside a symlink at the path; set when the file is opened
        self._wal = self.path + "-wal"
        #: the ``-shm`` (the WAL index every connection to the file shares) and its identity
        #: at open: a connection left with one that was deleted or replaced writes its frames
        #: where other processes' index says theirs are, overwriting them
        self._shm = self.path + "-shm"
        self._shm_id: FileId | None = None
        #: set when that ``-shm`` was found deleted or replaced: close without a checkpoint
        self._stale_index = False
        #: a descriptor of that ``-shm``, to read the WAL index header (``_wal_whole``)
        self._shm_fd: int | None = None
        self.schema_version = SCHEMA_VERSION
        #: the columns this SharedOS reads that the file (read as it is) lacks: null
        self._missing: frozenset[str] = frozenset()
        #: the no-wait connection (``try_now``), opened on first use
        self._fast: sqlite3.Connection | None = None
        self._fast_cur: sqlite3.Cursor | None = None
        self._fast_lock = threading.Lock()
        self._fast_generation = -1
        self._fast_commits = 0
        self._fast_paused = False
        #: set by ``try_now`` after a commit: upkeep (``checkpoint_due`` / ``checkpoint``,
        #: ``evidence_checkpoint_due`` / ``take_checkpoint``) may be due; writers that
        #: commit through ``try_now`` look at it instead of asking after every commit
        self.upkeep_due = False
        #: (turns, rows) the opening migration chained (``sharedos evidence migrate`` reports it)
        self.migrated_rows = (0, 0)
        #: the schema version the file had when opened (a writable open migrates it)
        self.opened_version = 0
        #: the store's identity (``meta.store_id``), named by its checkpoints
        self.store_id = ""
        #: failures to write a turn's opening or seal (or a checkpoint), said once per cause
        self.failures = FailureReporter()
        self._conn = self._open()
        self._cur = self._conn.cursor()
        self.appender = ChainAppender(
            self,
            sqlite_attempt_values,
            text=sqlite_text,
            signer=signer,
            checkpoint_interval_s=checkpoint_interval_s,
        )

    # -- opening ---------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        memory = self.path == ":memory:"
        if not memory:
            parent = Path(self.path).resolve().parent
            if not parent.is_dir():
                raise EvidenceStoreError(
                    f"evidence database directory {parent} does not exist", "io"
                )
            if not self.read_only:
                _create_private(self.path)
            elif not os.path.isfile(self.path):
                raise EvidenceStoreError(f"no evidence database at {self.path}", "io")
            _may_open(self.path, writing=not self.read_only)
        try:
            if self.read_only and not memory:
                conn = self._connect_read_only()
            else:
                conn = sqlite3.connect(
                    self.path,
                    timeout=self._busy_timeout_s,
                    isolation_level=None,  # autocommit: each INSERT is its own transaction
                    check_same_thread=False,  # guarded by self._lock
                )
            conn.isolation_level = None
            # Opening waits longer for the write lock than a call does: hosts started
            # together (a fleet's units, a host and its stdio bridges) queue behind the one
            # creating or migrating the file, which on a busy machine (or a large file)
            # takes longer than a call may wait.
            wait_s = (
                self._busy_timeout_s if self.read_only else max(self._busy_timeout_s, _OPEN_WAIT_S)
            )
            conn.execute(f"PRAGMA busy_timeout={int(wait_s * 1000)}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            self.opened_version = int(version)
            if self.read_only:
                _refuse_foreign(conn, self.path, writing=False)
                if version not in range(1, SCHEMA_VERSION + 1):
                    raise EvidenceStoreError(
                        f"{self.path} is not a SharedOS evidence database (schema version "
                        f"{version}; this SharedOS reads versions 1 to {SCHEMA_VERSION})",
                        "io",
                    )
                self.schema_version = int(version)
                if version >= 4:
                    self._missing = frozenset(CHAIN_COLUMNS) - sqlite_chain_columns(conn)
                    self.store_id = _store_id(conn, create=False)
                else:
                    self._missing = MISSING_BEFORE_4
                return conn
            _refuse_foreign(conn, self.path, writing=True)
            if not memory:
                mode = _enter_wal(conn, time.monotonic() + wait_s)
                if str(mode).lower() != "wal":
                    raise EvidenceStoreError(
                        f"could not enable WAL on {self.path} (got {mode})", "io"
                    )
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT}")
            conn.execute("PRAGMA foreign_keys=ON")  # an outcome needs its attempt
            while True:
                if version > SCHEMA_VERSION:
                    refuse_unreadable(self.path, int(version), writing=True)
                if version not in range(0, SCHEMA_VERSION + 1):
                    raise EvidenceStoreError(
                        f"{self.path} has evidence schema version {version}; this SharedOS "
                        f"reads versions 1 to {SCHEMA_VERSION}",
                        "io",
                    )
                if version == SCHEMA_VERSION:
                    break
                # a writable open migrates (all of it in one transaction)
                steps = {0: SCHEMA, 1: MIGRATE_FROM_1, 2: MIGRATE_FROM_2, 3: (), 4: (), 5: ()}[
                    int(version)
                ]
                # the step to 6 rebuilds a version-4/5 ``chain``: SQLite's procedure runs it
                # with foreign keys off (switchable only outside a transaction)
                rebuild = version in (4, 5)
                if rebuild:
                    conn.execute("PRAGMA foreign_keys=OFF")
                try:
                    chained = self._install(
                        conn,
                        int(version),
                        steps,
                        chain=version in (1, 2),
                        then=() if version in (0, 4, 5) else MIGRATE_FROM_3,
                    )
                finally:
                    if rebuild:
                        conn.execute("PRAGMA foreign_keys=ON")
                if chained is not None:
                    self.migrated_rows = chained
                    break
                # another process (a host starting beside this one, `sharedos evidence
                # migrate`) changed the schema between the read and the write lock
                version = conn.execute("PRAGMA user_version").fetchone()[0]
            self._restore_guards(conn)
            self.store_id = _store_id(conn, create=True)
            # The probe: a committed write, so that a store that cannot be written
            # fails here, with one line, and not at the first call.
            conn.execute(INSERT_PROBE, (now_iso(),))
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_s * 1000)}")
        except sqlite3.Error as exc:
            cause = _cause(exc)
            if getattr(exc, "sqlite_errorcode", None) == _IOERR_SHMSIZE:
                cause = "disk_full"  # no room for the -shm: opening wrote nothing owed
            what = "write" if cause in ("read_only", "disk_full", "locked") else "open"
            raise EvidenceStoreError(
                f"cannot {what} evidence database {self.path}: {exc} ({cause})", cause
            ) from exc
        if not memory:
            db_id = _file_id(self.path)
            if db_id is None:
                raise EvidenceStoreError(
                    f"evidence database {self.path} vanished while it was opened", "replaced"
                )
            real = os.path.realpath(self.path)
            self._wal, self._shm = real + "-wal", real + "-shm"
            self._shm_id = _file_id(self._shm)
            self._ids = (db_id, _file_id(self._wal))
        return conn

    def _restore_guards(self, conn: sqlite3.Connection) -> None:
        """Make again the unique indexes (``GUARD_INDEXES``) the file lacks, under the write
        lock: without them a second writer of a turn forks its chain instead of colliding.
        A file whose rows already break one (two rows at one place) is refused, not written."""

        def missing() -> list[str]:
            listed = conn.execute("PRAGMA index_list(chain)").fetchall()
            return missing_guards((str(row[1]), bool(row[2])) for row in listed)

        if not missing():
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            for name in missing():
                conn.execute(f"DROP INDEX IF EXISTS {name}")  # one there but not unique
                try:
                    conn.execute(GUARD_INDEXES[name])
                except sqlite3.IntegrityError as exc:
                    raise EvidenceStoreError(
                        f"evidence database {self.path} lacks its unique index {name}, and its "
                        f"rows no longer allow it ({exc}): two rows hold one place "
                        "(`sharedos evidence verify` names them); nothing is written to it",
                        "io",
                    ) from None
            conn.execute("COMMIT")
        except BaseException:
            _roll_back(conn)
            raise

    def _connect_read_only(self) -> sqlite3.Connection:
        """A read-only connection; on read-only media, an ``immutable`` one.

        A WAL database needs its ``-shm`` file to be read; on a read-only
        filesystem nobody can create it, and nobody can be writing either, so
        the file is opened as immutable.
        """
        base = f"file:{urllib.parse.quote(os.path.abspath(self.path))}?mode=ro"
        try:
            conn = sqlite3.connect(
                base, uri=True, timeout=self._busy_timeout_s, check_same_thread=False
            )
            conn.execute("PRAGMA user_version").fetchone()
            return conn
        except sqlite3.OperationalError:
            if os.access(os.path.dirname(os.path.abspath(self.path)), os.W_OK) and not (
                os.statvfs(self.path).f_flag & os.ST_RDONLY
            ):
                raise
        # ``immutable`` ignores the -wal: rows committed there (a host that died before
        # checkpointing) would be silently missing from every read and from ``verify``
        with contextlib.suppress(OSError):
            if os.path.getsize(self.path + "-wal") > 0:
                raise EvidenceStoreError(
                    f"cannot read evidence database {self.path}: its {self.path}-wal may hold "
                    "committed rows, and without its -shm it cannot be read where nothing can "
                    "be written; copy the database with its -wal to writable storage to read it",
                    "read_only",
                )
        return sqlite3.connect(
            base + "&immutable=1", uri=True, timeout=self._busy_timeout_s, check_same_thread=False
        )

    @staticmethod
    def _install(
        conn: sqlite3.Connection,
        version: int,
        statements: tuple[str, ...],
        *,
        chain: bool = False,
        then: tuple[str, ...] = (),
    ) -> tuple[int, int] | None:
        """Create (or migrate to) the schema in one transaction, from ``version``; with
        ``chain``, chain the rows there (the version-3 layout), then run ``then`` (3 -> 4).

        Returns (turns, rows) chained; None, having changed nothing, when the file is no
        longer at ``version`` once the write lock is held (another process created or
        migrated it meanwhile: the caller reads the version again). Ends with
        ``approvals_step`` (5 -> 6: a table whose kind check lacks ``approval`` is
        rebuilt) and ``layout_step``: every column this SharedOS writes that ``chain``
        lacks is added (4 -> 5), the views made again.
        """
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] != version:
                conn.execute("ROLLBACK")
                return None
            for stmt in statements:
                conn.execute(stmt)
            chained = sqlite_chain_existing(conn) if chain else (0, 0)
            for stmt in then:
                conn.execute(stmt)
            table = conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'chain'"
            ).fetchone()
            for stmt in approvals_step("sqlite", sqlite_chain_columns(conn), str(table[0])):
                conn.execute(stmt)
            for stmt in layout_step(sqlite_chain_columns(conn), "sqlite"):
                conn.execute(stmt)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            _roll_back(conn)
            raise
        return chained

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
            self._cur = self._conn.cursor()
        return self._lock

    # -- writing ---------------------------------------------------------------

    def _shm_intact(self) -> None:
        """Before a write: fail (for good) when the ``-shm`` at the path is not the one this
        connection maps (deleted, replaced). Its WAL index would then miss the frames other
        processes append, and this connection's next frames would overwrite them."""
        if self._ids is None or _file_id(self._shm) == self._shm_id:
            return
        self._stale_index = True
        self._broken = EvidenceStoreError(
            f"the WAL index {self._shm} of evidence database {self.path} was deleted or "
            "replaced while in use; refusing to write through a stale index (it would "
            "overwrite other connections' records): restart to reopen the store",
            "replaced",
        )
        raise self._broken

    def _before_write(self) -> None:
        """Before a commit: the ``-shm`` (``_shm_intact``) and the database at the path must be
        the ones this connection uses, and the ``-wal`` must still hold every frame the
        index counts (``_wal_whole``). A database replaced at the path (a backup restored)
        is paired by SQLite with the ``-wal`` left there: a commit now would put this
        store's pages into the file that replaced it."""
        self._shm_intact()
        if self._ids is not None:
            if _file_id(self.path) != self._ids[0]:
                self._verify()  # raises: deleted, moved or replaced
            self._wal_whole()

    def _wal_whole(self) -> None:
        """Fail (for good) when the ``-wal`` is shorter than the frames its index counts.

        A ``-wal`` truncated in place keeps its inode, so ``_verify`` cannot see it;
        a commit would then write its frames past a hole where the WAL header was,
        and every reader (and the next open) would find the file malformed, the
        truncated rows gone. SQLite itself never leaves the file shorter than the
        index says: a checkpoint or a restart resets the index before it truncates,
        so a size read between two identical index headers that falls short is a
        truncation from outside.
        """
        fd = self._shm_fd
        if fd is None:
            try:
                fd = self._shm_fd = os.open(self._shm, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return  # no index to compare with (_shm_intact judges its absence)
        half = _WAL_INDEX_HEADER.size
        for _ in range(3):
            try:
                head = os.pread(fd, 2 * half, 0)
                size = os.stat(self._wal).st_size
            except OSError:
                # a -wal gone from the path (deleted): judged now, before the commit, which
                # would land in the deleted file and be kept by the close's checkpoint
                self._verify()
                return
            if len(head) < 2 * half or head[:half] != head[half:]:
                continue  # a writer is updating the index: look again
            _, _, _, _, _, page, frames = _WAL_INDEX_HEADER.unpack_from(head)
            page = 65536 if page == 1 else page
            if not frames or size >= 32 + frames * (24 + page):
                return  # the common case: one read of the index, one stat
            try:
                again = os.pread(fd, 2 * half, 0)
            except OSError:
                return
            if again == head:  # the index did not move while the size was read: truncated
                self._broken = EvidenceStoreError(
                    f"the write-ahead log {self._wal} of evidence database {self.path} was "
                    f"truncated while in use ({size} bytes, its index counts {frames} "
                    "frames); refusing to write past the hole (restart to reopen the store)",
                    "replaced",
                )
                raise self._broken

    def _verify(self) -> None:
        """Fail (for good) when the files at the path are not the ones this connection writes."""
        ids = self._ids
        if ids is None:
            return
        self._shm_intact()
        db_id, wal_id = ids
        now_db = _file_id(self.path)
        now_wal = _file_id(self._wal)
        if wal_id is None and now_wal is not None:
            # the first commit after open created the WAL: remember it
            self._ids = (db_id, now_wal)
            wal_id = now_wal
        if now_db != db_id or now_wal != wal_id:
            what = "deleted or moved" if now_db is None or now_wal is None else "replaced"
            self._broken = EvidenceStoreError(
                f"evidence database {self.path} was {what} while in use; "
                "refusing to write evidence into a file nobody can read",
                "replaced",
            )
            raise self._broken

    def _write(self, what: str, op: Callable[[sqlite3.Cursor], _T]) -> _T:
        """Run ``op`` (one committed transaction) under the lock, then verify the files."""
        with self._locked():
            if self._broken is not None:
                raise self._broken
            if self.read_only:
                raise EvidenceStoreError(
                    f"evidence database {self.path} was opened read-only", "read_only"
                )
            self._before_write()
            try:
                result = op(self._cur)
            except sqlite3.Error as exc:
                if _damaged(exc):
                    raise self._found_damaged(exc) from exc
                cause = _cause(exc)
                raise EvidenceStoreError(
                    f"cannot {what} evidence in {self.path}: {exc} ({cause})", cause
                ) from exc
            self._verify()
            return result

    def _found_damaged(self, exc: BaseException) -> EvidenceStoreError:
        """The error of a write (or of a read made for one) that found the file damaged; from
        then on every write fails with it. Writes whose pages happen to be whole would still
        land, in a file whose readers (``list``, ``export``, ``verify``) fail on it."""
        self._broken = EvidenceStoreError(
            f"evidence database {self.path} is damaged ({exc}); refusing to write more "
            "evidence into a file that cannot be read back: restart to reopen it "
            "(`sharedos evidence verify` says what is damaged)",
            "io",
        )
        return self._broken

    def begin(self, attempt: EvidenceRecord) -> int:
        """Commit ``attempt`` as an attempt row (its outcome fields are ignored); return its seq."""
        self._writable()
        return self.appender.begin(attempt)

    def finish(self, seq: int, outcome: OutcomeRecord) -> None:
        """Commit the outcome row of attempt ``seq`` (once; cause ``conflict`` otherwise)."""
        self._writable()
        self.appender.finish(int(seq), outcome)

    def record(self, record: EvidenceRecord) -> int:
        """Commit a complete record (attempt and outcome rows) in one transaction; return its seq."""
        if record.outcome_record is None:
            raise ValueError("record() needs a record with an outcome; use begin() for an attempt")
        self._writable()
        return self.appender.record(record)

    def commit_group(self, ops: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[bool, Any]]:
        """Several ``begin``/``finish``/``record`` writes in one transaction (``ChainAppender.
        commit_group``): one (ok, result or error) per op, in order."""
        self._writable()
        return self.appender.commit_group(ops)

    def open_turn(self, opening: Opening) -> bool:
        """Write the turn's opening record (the anchor of its chain) unless it has one."""
        self._writable()
        return self.appender.open_turn(opening)

    def seal_turn(
        self, turn_id: str, closed_at: str | None = None, check: Callable[[], None] | None = None
    ) -> str:
        """Append the turn's seal (signed when the store has a signer); the seal's hash."""
        self._writable()
        return self.appender.seal_turn(turn_id, closed_at, check)

    def append_approval(
        self,
        values: Sequence[Any],
        check: Callable[[], None] | None = None,
        fence: Fence | None = None,
    ) -> str:
        """Append one approval event (``chain.APPROVAL_FIELDS`` order) to its turn's chain
        (``sharedos.evidence.approvals``); the link's hash. ``ApprovalTaken`` when that
        step of that approval is already in the store (``check``, ``fence``: as for
        ``ChainAppender.append_approval``)."""
        self._writable()
        require_approvals(self.schema_version, str(self.path))
        return self.appender.append_approval(values, check, fence)

    def has_seal(self, turn_id: str) -> bool:
        """True when the turn's chain holds a seal (one indexed lookup, no row's content)."""
        sql = "SELECT 1 FROM chain WHERE turn_id = ? AND kind = 'seal' LIMIT 1"
        return bool(self._read(sql, [sqlite_text(turn_id)]))

    def approval_rows(
        self,
        *,
        turn_id: str | None = None,
        approval_id: str | None = None,
        arguments_digest: str | None = None,
    ) -> list[tuple[int, int | None, list[Any]]]:
        """Approval events as (seq, pos, values in ``APPROVAL_FIELDS`` order), each turn's in
        chain order (none before schema 6)."""
        if self.schema_version < 6:
            return []
        wanted = (turn_id, approval_id, arguments_digest)
        params = [sqlite_text(v) for v in wanted if v is not None]
        sql = approval_rows_sql(
            "sqlite",
            by_turn=turn_id is not None,
            by_approval=approval_id is not None,
            by_digest=arguments_digest is not None,
        )
        return [approval_row(row) for row in self._read(sql, params)]

    def _writable(self) -> None:
        if self._broken is not None:
            raise self._broken
        if self.read_only:
            raise EvidenceStoreError(
                f"evidence database {self.path} was opened read-only", "read_only"
            )

    # -- the appender's backend (called under its lock) ----------------------------

    def head(self, turn_id: str) -> tuple[int, str] | None:
        """The turn's last link (pos, hash) as the file has it."""
        rows = self._read(_HEAD_SQL, [turn_id])
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    def attempt_link(self, seq: int) -> tuple[str, str] | None:
        """(turn_id, hash) of the attempt link of ``seq``."""
        rows = self._read(_ATTEMPT_LINK_SQL, [seq])
        return (str(rows[0][0]), str(rows[0][1])) if rows else None

    def link_at(self, turn_id: str, pos: int) -> tuple[int | None, str] | None:
        """(seq of the attempt it is or concludes, hash) of the turn's link at ``pos``."""
        rows = self._read(_LINK_AT_SQL, [turn_id, pos])
        if not rows:
            return None
        seq, hash_ = rows[0]
        return (int(seq) if seq is not None else None, str(hash_))

    def execute(self, plan: Plan) -> int:
        """Commit ``plan`` atomically on the store's connection (``ChainBackend``)."""
        return self._write(f"write {_written_by(plan)}", lambda cur: run_plan(cur, plan))

    def execute_many(self, plans: list[Plan]) -> list[int]:
        """Commit ``plans`` in one transaction (group commit); their seqs, in order."""

        def run(cur: sqlite3.Cursor) -> list[int]:
            cur.execute("BEGIN IMMEDIATE")
            try:
                seqs = [run_plan(cur, plan, nested=True) for plan in plans]
                cur.execute("COMMIT")
            except BaseException:
                _roll_back(cur.connection)
                raise
            return seqs

        return self._write("write a group of records", run)

    # -- checkpoints (sharedos.evidence.checkpoint) ----------------------------------------

    def last_checkpoint(self) -> tuple[int, str] | None:
        """(number, hash) of the store's last checkpoint."""
        rows = self._read(_LAST_CHECKPOINT_SQL, [])
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    def execute_checkpoint(self, cp: Checkpoint, heads: list[tuple[str, int, str]]) -> None:
        """Commit checkpoint ``cp`` and its heads in one transaction (``CheckpointTaken``
        when its number is taken)."""

        def run(cur: sqlite3.Cursor) -> None:
            cur.execute("BEGIN IMMEDIATE")
            try:
                try:
                    cur.execute(_INSERT_CHECKPOINT, checkpoint_values(cp))
                except sqlite3.IntegrityError:
                    raise CheckpointTaken() from None
                cur.executemany(
                    _INSERT_CHECKPOINT_HEAD, [(cp.number, t, p, h) for t, p, h in heads]
                )
                cur.execute("COMMIT")
            except BaseException:
                _roll_back(cur.connection)
                raise

        self._write("write a checkpoint", run)

    def evidence_checkpoint_due(self) -> bool:
        """True when this store has committed heads to checkpoint and its interval passed."""
        return self.appender.checkpoint_due()

    def take_checkpoint(
        self, *, everything: bool = False, always: bool = False
    ) -> Checkpoint | None:
        """Write a checkpoint now: over the heads committed here since the last one, or with
        ``everything`` over every turn head no checkpoint covers yet; None when nothing to
        cover, unless ``always`` (then one over no heads, chained after the last)."""
        self._writable()
        heads = self.uncovered_heads() if everything else None
        return self.appender.checkpoint(heads, always=always)

    def uncovered_heads(self) -> list[tuple[str, int, str]]:
        """Every turn's head that is past what the store's checkpoints cover."""
        return heads_of(self._read(_UNCOVERED_SQL, []))

    def file_damage(self, *, limit: int = 20) -> list[str]:
        """What SQLite's own ``PRAGMA integrity_check`` finds wrong with the file (at most
        ``limit`` lines; none when it is sound).

        ``verify`` reads each turn in order through the ``(turn_id, pos)`` index,
        and SQLite takes those two columns from the index, not the row: a file
        whose index and table disagree (a byte changed in a row's turn or
        position, a row put in the table alone) would verify clean while
        ``list`` and ``export``, which read the table, show other rows.
        """
        lines: list[str] = []
        for (text,) in self._stream(f"PRAGMA integrity_check({int(limit)})", [], 100):
            if text == "ok":
                continue
            lines.extend(
                line for line in str(text).splitlines() if line and not line.startswith("***")
            )
        return lines

    def iter_checkpoints(self) -> Iterator[tuple[Checkpoint, list[tuple[str, int, str]]]]:
        """Every checkpoint in number order, with the heads it lists (one at a time in memory)."""
        yield from iter_checkpoint_rows(self._verify_stream)

    def iter_coverage(self) -> Iterator[tuple[str, int, str, int]]:
        """(turn_id, pos, hash, checkpoint) of every head a checkpoint recorded (each once,
        with the first checkpoint that did), ordered by turn id as ``iter_links`` orders
        them, then position: a turn's furthest head comes last."""
        for turn, pos, hash_, number in self._verify_stream(_COVERAGE_SQL, [], 5000):
            yield stored_text(turn), stored_int(pos), stored_text(hash_), stored_int(number)

    # -- the no-wait path ----------------------------------------------------------

    def try_now(self, kind: str, *args: Any) -> tuple[bool, Any]:
        """Commit ``begin``/``finish``/``record`` at once if nothing makes it wait: ``(True, result)``;
        ``(False, None)`` when it would have to wait (a lock, FULL's fsync) or failed.

        This is how ``EvidenceRecorder`` spares the writer-thread round trip when
        the store is idle: a second connection with no busy wait and no automatic
        checkpoint, used only when its own lock is free. So the caller never
        waits on a lock, a busy wait, an fsync or a checkpoint; a commit it
        makes is a ``write()`` into the page cache. Anything that goes wrong
        here is left to the caller's ordinary (waiting) path, which retries and
        reports it; only a file found replaced after a commit raises.
        """
        if self.synchronous != "NORMAL" or self._ids is None or self.read_only or self._fast_paused:
            return _NOT_NOW
        if self._broken is not None:
            raise self._broken
        appender = self.appender
        done, result = appender.try_now(kind, args, self._run_now)
        if done:
            # read by the recorder after the commit: a WAL look or a checkpoint is due
            self.upkeep_due = self._fast_commits >= _CHECKPOINT_EVERY or bool(
                appender.dirty
                and (
                    len(appender.dirty) >= DIRTY_LIMIT
                    or time.monotonic() >= appender.next_checkpoint
                )
            )
        return done, result

    def _run_now(self, plan: Plan) -> int | None:
        """Commit ``plan`` on the no-wait connection; None when it would wait or failed."""
        if not self._fast_lock.acquire(blocking=False):
            return None
        try:
            cur = self._fast_cursor()
            if cur is None:
                return None
            self._before_write()
            try:
                result = run_plan(cur, plan)
            except sqlite3.Error as exc:
                if _damaged(exc):
                    raise self._found_damaged(exc) from exc
                return None
            except StaleHead:
                return None
            self._verify()
            self._fast_commits += 1
            return result
        finally:
            self._fast_lock.release()

    def _files_unchanged(self) -> bool:
        """True when the database, ``-wal`` and ``-shm`` at the path are the ones this store
        opened (a ``-wal`` not made yet may appear)."""
        ids = self._ids
        if ids is None or _file_id(self.path) != ids[0]:
            return False
        if ids[1] is not None and _file_id(self._wal) != ids[1]:
            return False
        return _file_id(self._shm) == self._shm_id

    def _fast_cursor(self) -> sqlite3.Cursor | None:
        """The no-wait connection's cursor (opened on first use and after ``fork()``)."""
        if self._fast is not None and self._fast_generation == _FORK_GENERATION[0]:
            return self._fast_cur
        # Opened by path, later than the store: only onto the files the store opened, and
        # never creating one (``mode=rw``). With the database moved away or deleted
        # meanwhile, a plain connect made an empty file at the path (with the umask's mode)
        # and SQLite deleted the store's ``-wal`` beside it, with every row not yet
        # checkpointed; with the ``-wal`` deleted, it made a new one, and the store's close
        # then left a file that could not be read, instead of checkpointing the rows the
        # store's own connection still holds. Those faults are the ordinary path's to report.
        if not self._files_unchanged():
            return None
        try:
            conn = sqlite3.connect(
                f"file:{urllib.parse.quote(os.path.abspath(self.path))}?mode=rw",
                uri=True,
                timeout=0,
                isolation_level=None,
                check_same_thread=False,
            )
            if not self._files_unchanged():  # changed while connecting
                conn.close()
                return None
            conn.execute("PRAGMA busy_timeout=0")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run on the writer thread
            conn.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT}")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error:
            return None
        self._fast, self._fast_cur = conn, conn.cursor()
        self._fast_generation = _FORK_GENERATION[0]
        return self._fast_cur

    def checkpoint_due(self) -> bool:
        """True when, at one of its looks every ``_CHECKPOINT_EVERY`` no-wait commits, the
        WAL has grown past about 1,000 pages: time to call ``checkpoint`` (off-loop).

        Past ``_PAUSE_BYTES`` the no-wait path also stops until that checkpoint ran.
        """
        if self._fast_commits < _CHECKPOINT_EVERY:
            return False
        self._fast_commits = 0
        try:
            size = os.stat(self._wal).st_size
        except OSError:
            return False
        if size >= _PAUSE_BYTES:
            self._fast_paused = True
        return size >= _CHECKPOINT_BYTES

    def checkpoint(self) -> None:
        """Fold the WAL back into the database once it holds more than about 1,000 pages.

        ``RESTART`` makes writers wait while it runs (no-wait commits go to the
        writer thread meanwhile), so a steady stream of commits cannot outrun
        it and the WAL stays bounded; ``journal_size_limit`` then trims the
        file. It waits at most ``_CHECKPOINT_WAIT_MS`` for the lock and for
        readers: a long reader keeps the WAL growing until it ends (nothing can
        restart it), never the writers waiting. Blocking: call it from a writer
        thread.
        """
        try:
            try:
                size = os.stat(self._wal).st_size
            except OSError:
                return
            if size < _CHECKPOINT_BYTES:
                return
            with self._locked():
                if self._broken is not None:
                    return
                # a checkpoint that cannot run now runs at the next one. It waits for the
                # write lock and for readers briefly, not the store's busy timeout: a
                # reader that keeps its transaction open (an export piped into a pager)
                # pins the WAL for as long as it likes, and a RESTART waiting it out holds
                # the write lock meanwhile, stalling this host's and every other host's
                # commits at each checkpoint due. Given up on, it still folds in what no
                # reader needs, as a passive checkpoint does.
                conn = self._conn
                conn.execute(f"PRAGMA busy_timeout={_CHECKPOINT_WAIT_MS}")
                try:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
                finally:
                    conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_s * 1000)}")
        finally:
            self._fast_paused = False

    # -- reading ---------------------------------------------------------------

    def _read(self, sql: str, params: list[Any]) -> list[Any]:
        with self._locked():
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                if _damaged(exc) and not self.read_only:
                    raise self._found_damaged(exc) from exc
                raise EvidenceStoreError(
                    f"cannot read evidence from {self.path}: {exc}", _cause(exc)
                ) from exc

    @staticmethod
    def _where(
        turn_id: str | None, call_id: str | None = None, outcome: str | None = None
    ) -> tuple[str, list[Any]]:
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("turn_id", turn_id), ("call_id", call_id)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if outcome == INTERRUPTED:
            where.append("outcome IS NULL")
        elif outcome is not None:
            where.append("outcome = ?")
            params.append(outcome)
        return (f" WHERE {' AND '.join(where)}" if where else ""), params

    def query(
        self,
        turn_id: str | None = None,
        *,
        call_id: str | None = None,
        outcome: str | None = None,
        limit: int | None = None,
    ) -> list[EvidenceRecord]:
        """Records in ``seq`` order, filtered by turn, call id and status (``interrupted`` too)."""
        where, params = self._where(turn_id, call_id, outcome)
        sql = self._select + where + " ORDER BY seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [self._row_to_record(row) for row in self._read(sql, params)]

    @contextlib.contextmanager
    def _reader(self) -> Any:
        """A connection of its own for a long read (an export, a verification).

        Reading through a cursor of its own never holds the store's lock, so
        writers are not kept waiting by a long export; WAL readers see one
        consistent snapshot. An in-memory store has only its one connection.
        """
        if self.path == ":memory:":
            with self._locked():
                yield self._conn
            return
        try:
            conn = self._connect_read_only()
        except (sqlite3.Error, OSError) as exc:
            # opened by path: the file may have gone since the store opened it (moved,
            # deleted); every reader is told as for any other read, never SQLite's own error
            raise EvidenceStoreError(
                f"cannot read evidence from {self.path}: {exc}", _cause(exc)
            ) from exc
        try:
            yield conn
        finally:
            conn.close()

    def _stream(self, sql: str, params: list[Any], batch: int) -> Any:
        with self._reader() as conn:
            try:
                cur = conn.execute(sql, params)
                rows = cur.fetchmany(batch)
                while rows:
                    yield from rows
                    rows = []  # let the batch go before the next is read: one in memory
                    rows = cur.fetchmany(batch)
            except sqlite3.Error as exc:
                raise EvidenceStoreError(
                    f"cannot read evidence from {self.path}: {exc}", _cause(exc)
                ) from exc

    def _verify_stream(self, sql: str, params: list[Any], batch: int) -> Any:
        """``_stream`` for a verification: text that is not UTF-8 (SQLite keeps the bytes
        it is given, cast to text; SharedOS never writes such text) is read with its bad
        bytes as lone surrogates, so the row it is in is a finding (its hash no longer
        matches), not the end of the whole walk (``cannot read``, exit 2, every other
        turn unverified). Rows read the fast way until one is not UTF-8; the statement
        is then read again, in the same snapshot, past the rows already given."""
        with self._reader() as conn:
            in_memory = conn is self._conn
            given = 0
            try:
                if not in_memory and not conn.in_transaction:
                    conn.execute("BEGIN")  # one snapshot, should the statement be read again
                try:
                    cur = conn.execute(sql, params)
                    rows = cur.fetchmany(batch)
                    while rows:
                        yield from rows
                        given += len(rows)
                        rows = []
                        rows = cur.fetchmany(batch)
                    return
                except sqlite3.OperationalError as exc:
                    if not str(exc).startswith("Could not decode to UTF-8"):
                        raise
                factory = conn.text_factory
                conn.text_factory = _undecodable_text
                try:
                    cur = conn.execute(sql, params)
                    skipped = 0
                    while skipped < given:
                        skipped += len(cur.fetchmany(min(batch, given - skipped)) or [None])
                    rows = cur.fetchmany(batch)
                    while rows:
                        yield from rows
                        rows = []
                        rows = cur.fetchmany(batch)
                finally:
                    conn.text_factory = factory
            except sqlite3.Error as exc:
                raise EvidenceStoreError(
                    f"cannot read evidence from {self.path}: {exc}", _cause(exc)
                ) from exc
            finally:
                if not in_memory and conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")

    def iter_records(
        self,
        turn_id: str | None = None,
        *,
        outcome: str | None = None,
        limit: int | None = None,
        batch: int = 2000,
    ) -> Iterator[EvidenceRecord]:
        """Every record in ``seq`` order, streamed (memory holds one batch); filtered as
        ``query`` filters."""
        where, params = self._where(turn_id, None, outcome)
        sql = self._select + where + " ORDER BY seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        for row in self._stream(sql, params, batch):
            yield self._row_to_record(row)

    @property
    def _select(self) -> str:
        """The records' SELECT for this file as it is (columns it lacks read as null: 1 to 3
        have no context, 1 to 4 no shadow decision)."""
        return select_records(self._missing, chained=self.schema_version >= 4)

    def iter_links(self, turn_id: str | None = None, *, batch: int = 5000) -> Iterator[Link]:
        """Every link with its content, ordered by turn and position (``sharedos.evidence.verify``)."""
        where = " WHERE c.turn_id = ?" if turn_id is not None else ""
        params: list[Any] = [turn_id] if turn_id is not None else []
        sql = reader_sql(self._missing) + where + " ORDER BY c.turn_id, c.pos, c.seq"
        for row in self._verify_stream(sql, params, batch):
            yield link_from_row(row)

    def iter_chain_rows(
        self, turn_id: str | None = None, *, batch: int = 2000
    ) -> Iterator[tuple[Any, ...]]:
        """Every stored row as (seq, *``CHAIN_COLUMNS``), by turn and position (``copy``)."""
        where = " WHERE turn_id = ?" if turn_id is not None else ""
        params: list[Any] = [turn_id] if turn_id is not None else []
        sql = f"{chain_rows_sql(self._missing)}{where} ORDER BY turn_id, pos, seq"
        for row in self._stream(sql, params, batch):
            yield tuple(row)

    def import_rows(self, rows: list[tuple[Any, ...]], attempts: dict[int, int]) -> dict[int, int]:
        """Append rows read from another store (``iter_chain_rows``) in one transaction.

        Each keeps its place, hashes and content; it gets a seq here, and an
        outcome's ``attempt`` is mapped through ``attempts`` (source seq -> seq
        here) as it grows. Returns that map. ``StaleHead`` when a position is taken.
        """
        mapping = dict(attempts)
        placeholders = ", ".join("?" * len(CHAIN_COLUMNS))
        sql = f"INSERT INTO chain ({', '.join(CHAIN_COLUMNS)}) VALUES ({placeholders})"
        at = CHAIN_COLUMNS.index("attempt")

        def run(cur: sqlite3.Cursor) -> None:
            cur.execute("BEGIN IMMEDIATE")
            try:
                for row in rows:
                    values = list(row[1:])
                    if values[at] is not None:
                        values[at] = mapping.get(int(values[at]), values[at])
                    try:
                        cur.execute(sql, values)
                    except sqlite3.IntegrityError as exc:
                        if "chain.turn_id, chain.pos" in str(exc):
                            raise StaleHead() from None
                        raise
                    if values[CHAIN_COLUMNS.index("kind")] == "attempt":
                        mapping[int(row[0])] = int(cur.lastrowid or 0)
                cur.execute("COMMIT")
            except BaseException:
                _roll_back(cur.connection)
                raise

        self._write("copy rows into", run)
        return mapping

    def counts(self, turn_id: str | None = None) -> EvidenceCounts:
        """Counts by status (the outcomes and ``interrupted``) and by reason, optionally for one turn."""
        chained = self.schema_version >= 4
        if turn_id is None:
            return fold_counts(
                self._read(counts_sql("sqlite", one_turn=False, chained=chained), [])
            )
        sql = counts_sql("sqlite", one_turn=True, chained=chained)
        return fold_counts(self._read(sql, [turn_id]))

    def turns(self) -> list[tuple[str, int]]:
        """Turn ids with their number of attempts, in order of first appearance."""
        sql = TURNS_SQL if self.schema_version >= 4 else TURNS_SQL_BEFORE_4
        return [(str(t), int(n)) for t, n in self._read(sql, [])]

    def _row_to_record(self, row: tuple[Any, ...]) -> EvidenceRecord:
        return record_from_row(_RECORD_COLUMNS, row, self.path)

    def close(self) -> None:
        """Write a last checkpoint over what was committed here, then close the connection
        (further writes raise cause ``closed``)."""
        if self._broken is None and not self.read_only and self.appender.dirty:
            try:
                self.appender.checkpoint()
            except EvidenceStoreError as exc:  # the rows stand; only their checkpoint is late
                self.failures.failed(exc.cause, f"cannot write a checkpoint: {exc}")
        if self._shm_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._shm_fd)
            self._shm_fd = None
        pin = self._pin() if self._stale_index else None
        try:
            with self._locked():
                if self._broken is None:
                    self._broken = EvidenceStoreError(
                        f"evidence store {self.path} is closed", "closed"
                    )
                self._conn.close()
            with self._fast_lock:
                if self._fast is not None:
                    self._fast.close()
                    self._fast = None
        finally:
            if pin is not None:
                pin.close()

    def _pin(self) -> sqlite3.Connection | None:
        """A read-only connection held while a store whose ``-shm`` went stale closes.

        The last connection to close checkpoints the WAL and deletes it; through a
        stale WAL index that checkpoint misses the frames other processes appended,
        and deleting the WAL drops them. With this connection open (same process,
        same file) the store's connections cannot take the exclusive lock that
        needs, and a read-only connection never checkpoints when it closes last:
        the WAL stays, and the next opener rebuilds its index from it.
        """
        try:
            pin = sqlite3.connect(
                f"file:{urllib.parse.quote(os.path.abspath(self.path))}?mode=ro", uri=True
            )
            pin.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error:
            return None
        return pin

    def __enter__(self) -> SqliteEvidenceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _written_by(plan: Plan) -> str:
    """What ``plan`` writes, as its error names it (a seal or an opening refused as a turn
    closes or opens was called an outcome)."""
    if plan.attempt is not None:
        return "the attempt"
    if plan.outcome is not None:
        return "the outcome"
    if plan.seal is not None:
        return "the seal"
    if plan.approval is not None:
        return "the approval event"
    return "the opening record"
