"""``PostgresEvidenceStore``: the evidence store many hosts share (psycopg 3 and its pool).

The same contract as the SQLite store (``sharedos.evidence.store``), on
schema 3 (``sharedos.evidence.pg_schema``):

* ``begin`` is one statement — ``INSERT`` of the attempt row and of its link
  in one data-modifying ``WITH`` — committed (autocommit, ``synchronous_commit
  = on``: WAL flushed) before it returns; ``finish`` is one statement (the
  outcome row and its link), ``record`` one statement with both rows. A turn's
  first row also writes its opening record, in the same statement. One round
  trip per commit.
* Rows are append-only; reads are ``chain``'s attempts ``LEFT JOIN`` its outcomes
  (never the views, which a writer of the database can redefine); an attempt
  without an outcome reads as ``interrupted``.
* Every failure raises ``EvidenceStoreError`` with a cause: ``conflict``
  (second outcome, unknown attempt), ``read_only`` (read-only transaction or
  no INSERT privilege), ``disk_full``, ``locked`` (lock timeout), ``timeout``
  (statement timeout, or no connection within ``connect_timeout_s``),
  ``replaced`` (the database at the URL is no longer the store that was
  opened: its ``store_id`` changed, or its tables are gone), ``closed``,
  ``io`` (anything else, a lost connection that could not be re-made).

Lost connections: the pool replaces a dead connection (a killed backend, a
restarted server) on the next use. A write whose connection died in flight
is resolved by the chain (``ChainAppender``): after reconnecting, the link
at the position it planned either carries its hash (it committed; not
written twice) or not (it is written once more, on the new connection).
All of it within ``write_deadline_s`` (1.5 s by default, below the
recorder's 2 s bound); past it the call fails closed. A server that stops
answering with the connection open (its processes stopped) is such a loss
too: a statement it has not answered a second past its own timeout has its
connection cut (``_Watchdog``). Nothing here runs on
an event loop: the methods are synchronous and thread-safe, and the kernel
calls them from its writer thread.

Schema: an empty database is given the latest schema when a host opens it
for writing (under an advisory lock, so hosts starting together create it
once). A database at an older version is refused with the command that
migrates it (``sharedos evidence migrate --db URL``): in a fleet, hosts of
the old version may still be writing, so an operator migrates, not the
first host to restart. A newer version is refused too.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sharedos.evidence.appender import (
    ATTEMPT_SEQ,
    DEFAULT_CHECKPOINT_INTERVAL_S,
    ChainAppender,
    CommitUnknown,
    Fence,
    Opening,
    Plan,
    StaleHead,
)
from sharedos.evidence.chain import ATTEMPT_FIELDS, Link, Signer
from sharedos.evidence.chain_sql import (
    CHAIN_COLUMNS,
    TURNS_SQL,
    TURNS_SQL_BEFORE_4,
    approval_row,
    approval_rows_sql,
    attempts_source,
    chain_rows_sql,
    checkpoint_heads_sql,
    checkpoint_insert_sql,
    checkpoint_values,
    counts_sql,
    fold_counts,
    guarded_insert_parts,
    heads_of,
    lookup_sql,
    missing_guards,
    outcomes_source,
    picked,
    reader_sql,
    require_approvals,
)
from sharedos.evidence.checkpoint import Checkpoint, CheckpointTaken
from sharedos.evidence.record import EvidenceRecord, OutcomeRecord
from sharedos.evidence.reporting import FailureReporter
from sharedos.evidence.rows import (
    link_from_row,
    pg_attempt_values,
    pg_text,
    record_from_row,
)
from sharedos.evidence.store import INTERRUPTED, EvidenceCounts, EvidenceStoreError

__all__ = ["PostgresEvidenceStore", "redacted_url"]

_OUTCOME_COLUMNS = ("outcome", "reason", "finished_at", "duration_ms", "error")
_READ_COLUMNS = ("seq", *ATTEMPT_FIELDS, *_OUTCOME_COLUMNS)


def _select_records(missing: frozenset[str] = frozenset(), *, chained: bool = True) -> str:
    """The records' SELECT (every ``_READ_COLUMNS``), ``missing`` columns read as null; from
    ``chain`` itself, not the views, unless the database is older than schema 4
    (``chain_sql.evidence_source``)."""
    return (
        "SELECT a.seq, "
        + picked(ATTEMPT_FIELDS, missing, "a.")
        + ", "
        + ", ".join(f"o.{c}" for c in _OUTCOME_COLUMNS)
        + f" FROM {attempts_source(missing, chained=chained)} a"
        + f" LEFT JOIN {outcomes_source(chained=chained)} o ON o.seq = a.seq"
    )


#: each turn's head past the furthest position its checkpoints covered
_UNCOVERED_SQL = lookup_sql("uncovered", "postgresql")
_HEAD_SQL = lookup_sql("head", "postgresql")
_ATTEMPT_LINK_SQL = lookup_sql("attempt_link", "postgresql")
_LINK_AT_SQL = lookup_sql("link_at", "postgresql")
_LAST_CHECKPOINT_SQL = lookup_sql("last_checkpoint", "postgresql")
_STORE_ID_SQL = lookup_sql("store_id", "postgresql")
#: a checkpoint and its heads in one statement (the heads from three arrays)
_WRITE_CHECKPOINT_SQL = (
    f"WITH c AS ({checkpoint_insert_sql('postgresql')}) {checkpoint_heads_sql('postgresql')}"
)
#: each turn's furthest checkpointed head, in the binary order of turn ids
#: every distinct head the checkpoints recorded (the first checkpoint that did), by turn
_COVERAGE_SQL = (
    "SELECT k.turn_id, k.pos, k.hash, min(k.number) FROM checkpoint_heads k "
    'GROUP BY k.turn_id, k.pos, k.hash ORDER BY k.turn_id COLLATE "C", k.pos, 4'
)
#: the tables whose rows are the record (and ``meta``, the store's id every host checks):
#: a host only ever adds to them
REWRITE_TABLES = ("chain", "checkpoints", "checkpoint_heads", "meta")
#: which of them the current role may change or empty, with how (``rewrite_grants``)
_REWRITE_GRANTS_SQL = (
    "SELECT t, string_agg(p, ', ' ORDER BY o) FROM unnest(%s::text[]) AS t, "
    "unnest(ARRAY['UPDATE', 'DELETE', 'TRUNCATE']) WITH ORDINALITY AS q(p, o) "
    "WHERE CASE WHEN to_regclass(t) IS NULL THEN false ELSE has_table_privilege(t, p) END "
    "GROUP BY t "
    "ORDER BY min(array_position(%s::text[], t))"
)
#: an advisory lock key shared by every SharedOS process creating or migrating a schema
SCHEMA_LOCK = 0x5348_4F53_4556  # "SHOSEV"

_FORK_GENERATION = [0]


def _forked() -> None:
    _FORK_GENERATION[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def redacted_url(url: str) -> str:
    """``url`` (a libpq URL or key=value string) without its password, in any spelling."""
    from sharedos.evidence.url import redacted_location

    return redacted_location(url)


#: SQLSTATE -> cause (the class is looked up when the full code is not here)
_CAUSE_BY_SQLSTATE = {
    "23505": "conflict",
    "23503": "conflict",
    "25006": "read_only",  # read_only_sql_transaction
    "42501": "read_only",  # insufficient_privilege
    "53100": "disk_full",
    "55P03": "locked",  # lock_not_available (lock_timeout)
    "40P01": "locked",  # deadlock_detected
    "57014": "timeout",  # query_canceled (statement_timeout)
    "42P01": "replaced",  # undefined_table: the schema is gone
}
_LOST_SQLSTATE_CLASSES = ("08", "57P")  # connection exceptions; admin/crash shutdown
#: the session ended as its transaction idled too long (a fenced write's bound, passed
#: while the server was frozen before it read the COMMIT: ``PostgresEvidenceStore._fenced``)
_IDLE_IN_TRANSACTION_TIMEOUT = "25P03"


def _cause(exc: BaseException) -> str:
    state = getattr(exc, "sqlstate", None) or ""
    if state in _CAUSE_BY_SQLSTATE:
        return _CAUSE_BY_SQLSTATE[state]
    if state.startswith("53"):
        return "disk_full"  # insufficient resources
    return "io"


def _lost(exc: BaseException, conn: Any) -> bool:
    """True when ``exc`` means the connection is gone (the write's fate is unknown)."""
    import psycopg

    state = getattr(exc, "sqlstate", None) or ""
    if state.startswith(_LOST_SQLSTATE_CLASSES) or state == _IDLE_IN_TRANSACTION_TIMEOUT:
        return True
    return isinstance(exc, psycopg.OperationalError) and (conn is None or conn.broken or not state)


#: how often the watchdog looks at the statements it bounds (s): a statement is cut at most
#: this long after its bound
_WATCH_TICK_S = 0.1
#: how long past the server's own ``statement_timeout`` a statement the server has not
#: answered is given before its connection is cut (s): a live server answers by its timeout
_WATCH_MARGIN_S = 1.0
#: the least time given to the empty query that checks a pooled connection (s)
_CHECK_FLOOR_S = 0.25


class _Watchdog:
    """Cuts the connection of a statement its server has not answered within its bound.

    ``statement_timeout`` and ``lock_timeout`` are enforced by the server's own process:
    a server that stops answering (its processes stopped, a VM paused, a disk hung under
    its WAL) enforces neither, and a socket to it stays open (its kernel still acknowledges
    what is sent, so neither TCP keepalives nor ``tcp_user_timeout`` end it; on a Unix
    socket there are none). The statement then waited for ever: the writer thread holding
    the appender's lock, and with it the store's ``close`` (its closing checkpoint, its
    wait for the writer), so a ``sharedos run`` whose harness had exited never ended. Here
    a statement is armed with a bound; one still running past it has its socket shut
    down (``shutdown(2)`` on the connection's own descriptor, under the lock ``disarm``
    takes, so never once the statement is over), the driver sees the connection lost, and
    the write is resolved as any write cut off in flight is (``ChainAppender._execute``:
    through the chain, within the write's deadline, else in doubt). One daemon thread
    serves every store of the process; arming and disarming cost a lock and a dict entry.
    A forked child starts with a watchdog of its own (``_after_fork``).
    """

    def __init__(self) -> None:
        self._after_fork()

    def _after_fork(self) -> None:
        """Forget everything: run at construction, and in a child after ``fork()``.

        A child inherited its parent's armed statements, whose descriptors it shares:
        once their bound passed, its own watchdog shut the parent's socket down (the
        parent's connection cut, maybe under a statement it was running, long after that
        statement was answered). And the lock, held at the fork by the parent's writer
        arming or its watchdog's round, stayed held in the child for good: its first write
        waited on it for ever, no timeout bounding that wait."""
        self._lock = threading.Lock()
        #: token -> (deadline, connection, its descriptor when armed)
        self._armed: dict[int, tuple[float, Any, int]] = {}
        self._tokens = iter(range(1, 1 << 62))
        #: tokens whose connection was cut (read once by ``disarm``, then forgotten)
        self._cut: set[int] = set()
        self._thread: threading.Thread | None = None

    def arm(self, conn: Any, seconds: float) -> int | None:
        """Bound what ``conn`` runs from now by ``seconds``; the token ``disarm`` takes."""
        try:
            fd = int(conn.fileno())
        except Exception:  # a closed connection: nothing to bound
            return None
        with self._lock:
            token = next(self._tokens)
            self._armed[token] = (time.monotonic() + seconds, conn, fd)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="sharedos-evidence-watchdog", daemon=True
                )
                self._thread.start()
        return token

    def disarm(self, token: int | None) -> bool:
        """End the bound of ``token``; True when it had already passed and the connection
        was cut."""
        if token is None:
            return False
        with self._lock:
            if self._armed.pop(token, None) is not None:
                return False
            if token in self._cut:
                self._cut.discard(token)
                return True
            return False

    def renew(self, token: int | None, seconds: float) -> None:
        """Give ``token``'s connection ``seconds`` from now (its next statement)."""
        with self._lock:
            armed = self._armed.get(token) if token is not None else None
            if armed is not None:
                self._armed[token] = (time.monotonic() + seconds, armed[1], armed[2])  # type: ignore[index]

    @contextlib.contextmanager
    def bounded(self, conn: Any, seconds: float) -> Iterator[Callable[[], None]]:
        """``conn``'s statements in this block, cut past ``seconds``; a statement cut fails
        with a ``psycopg.OperationalError`` saying so (the connection is then lost, as for
        any cut: its write's fate is resolved through the chain). It yields what gives
        the block's next statement ``seconds`` afresh (each statement of a group commit is
        bounded, as the server bounds each by its own timeout)."""
        token = self.arm(conn, seconds)
        try:
            yield lambda: self.renew(token, seconds)
        except Exception as exc:
            import psycopg

            # a driver error of a cut connection; a fence's own refusal stays what it is
            if isinstance(exc, psycopg.Error) and self.disarm(token):
                raise psycopg.OperationalError(
                    f"the server did not answer within {seconds:.1f} s (not even with its "
                    "own statement timeout: its process stopped or hung); the connection "
                    "was cut"
                ) from exc
            raise
        finally:
            self.disarm(token)

    def _run(self) -> None:
        import socket

        while True:
            time.sleep(_WATCH_TICK_S)
            now = time.monotonic()
            with self._lock:
                due = [t for t, (at, _, _) in self._armed.items() if at <= now]
                for token in due:
                    _, conn, fd = self._armed.pop(token)
                    with contextlib.suppress(Exception):
                        # the connection's socket still: one libpq dropped meanwhile (its
                        # descriptor closed, maybe reused by the process) is left alone
                        if conn.closed or conn.pgconn.socket != fd:
                            continue
                        # a second socket object on a duplicate descriptor: shutting it down
                        # ends the connection's socket itself; closing it leaves the
                        # connection's descriptor to the driver, which finds it lost
                        cut = socket.socket(fileno=os.dup(fd))
                        try:
                            cut.shutdown(socket.SHUT_RDWR)
                            self._cut.add(token)
                        finally:
                            cut.close()


_WATCHDOG = _Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WATCHDOG._after_fork)


class _Fenced(Exception):
    """A plan's fence refused its commit (``Plan.fence``): ``refusal`` is raised as it is."""

    def __init__(self, refusal: Exception) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal


class PostgresEvidenceStore:
    """Evidence in a PostgreSQL database, shared by any number of hosts.

    ``url`` is a libpq URL (``postgresql://user@host:port/db``, or a Unix
    socket: ``postgresql://user@/db?host=/run/postgresql``). ``signer`` signs
    each turn's seal. ``read_only`` opens for reading (the CLI): nothing is
    created, every write fails with cause ``read_only``. ``create`` (default
    True) lets a writable open give an empty database the latest schema.
    """

    def __init__(
        self,
        url: str,
        *,
        signer: Signer | None = None,
        read_only: bool = False,
        create: bool = True,
        min_connections: int = 1,
        max_connections: int = 4,
        connect_timeout_s: float = 1.0,
        statement_timeout_s: float = 1.5,
        write_deadline_s: float = 1.5,
        check_schema: bool = True,
        checkpoint_interval_s: float | None = DEFAULT_CHECKPOINT_INTERVAL_S,
    ) -> None:
        try:
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401
        except ImportError as exc:  # pragma: no cover - a dependency of the package
            raise EvidenceStoreError(
                f"the PostgreSQL evidence store needs psycopg and psycopg_pool ({exc})", "io"
            ) from None
        from sharedos.evidence.url import location_secrets

        self.url = url
        self.shown = redacted_url(url)
        #: every spelling of the location's password: scrubbed from any driver message
        self._secrets = location_secrets(url)
        self.read_only = read_only
        self.synchronous = "FULL"  # PostgreSQL commits are WAL-flushed (synchronous_commit=on)
        self._create = create
        self._min, self._max = min_connections, max_connections
        self._connect_timeout_s = connect_timeout_s
        self._statement_timeout_s = statement_timeout_s
        #: past this, a statement on the call path whose server has not answered (not even
        #: with its own timeout) has its connection cut (``_Watchdog``)
        self._answer_bound_s = statement_timeout_s + _WATCH_MARGIN_S
        self._broken: EvidenceStoreError | None = None
        self._store_id: str | None = None
        self._lock = threading.Lock()
        self._generation = _FORK_GENERATION[0]
        self._writer: Any = None
        self._sql: dict[tuple[str, ...], str] = {}
        self.schema_version = 0
        self._missing: frozenset[str] = frozenset()
        #: a checkpoint over every uncovered head (``take_checkpoint(everything=True)``) is
        #: being written: off every call's path, not bounded by the writes' statement timeout
        self._whole_store_checkpoint = False
        #: failures to write a turn's opening or seal (or a checkpoint), said once per cause
        self.failures = FailureReporter()
        self._pool = self._open_pool()
        try:
            if check_schema:
                self._check_schema()
        except BaseException:
            self._pool.close()
            raise
        self.appender = ChainAppender(
            self,
            pg_attempt_values,
            text=pg_text,
            signer=signer,
            deadline_s=write_deadline_s,
            checkpoint_interval_s=checkpoint_interval_s,
        )

    # -- connections -------------------------------------------------------------------

    def _open_pool(self) -> Any:
        from psycopg_pool import ConnectionPool

        pool_log = logging.getLogger("psycopg.pool")
        if pool_log.level == logging.NOTSET:
            # the pool warns at every reconnection attempt; the kernel's recorder already
            # says once per cause that evidence is unavailable, and when it is back
            pool_log.setLevel(logging.ERROR)

        options = (
            f"-c statement_timeout={int(self._statement_timeout_s * 1000)} "
            f"-c lock_timeout={int(self._statement_timeout_s * 1000)} "
            "-c idle_in_transaction_session_timeout=10000 "
            "-c synchronous_commit=on "
            # the chain's head race is written for read committed: a role or database
            # defaulting to serializable would fail some commits with 40001
            "-c default_transaction_isolation=read\\ committed"
        )
        if self.read_only:
            options += " -c default_transaction_read_only=on"
        try:
            from psycopg.conninfo import conninfo_to_dict

            given_params = conninfo_to_dict(self.url)
            given = given_params.get("options")
        except Exception as exc:
            # libpq's parse errors quote the text around the fault, which may be the password
            why = "" if self._secrets else f" ({self._say(exc)})"
            raise EvidenceStoreError(
                f"not a PostgreSQL URL or connection string: {self.shown}{why}", "io"
            ) from None
        if given:
            options = f"{given} {options}"  # the URL's own settings, then the store's
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, round(self._connect_timeout_s)),
            # the URL's own name wins: it tells an operator which host a backend serves
            "application_name": given_params.get("application_name") or "sharedos-evidence",
            "options": options,
            # bound a half-open TCP connection (ignored on a Unix socket)
            "keepalives": 1,
            "keepalives_idle": 5,
            "keepalives_interval": 2,
            "keepalives_count": 2,
            "tcp_user_timeout": 3000,
        }
        # one connection first: a server that is not there fails at once, with libpq's
        # reason (the pool would retry until its bound and say only that it timed out)
        import psycopg

        try:
            psycopg.connect(self.url, **kwargs).close()
        except Exception as exc:
            raise EvidenceStoreError(
                f"cannot connect to the evidence database {self.shown}: {self._say(exc)}",
                "io",
            ) from None
        pool = ConnectionPool(
            self.url,
            kwargs=kwargs,
            min_size=self._min,
            max_size=self._max,
            open=False,
            timeout=self._connect_timeout_s,
            # a connection the pool cannot make is retried after 1 s, 2 s, 4 s, ... until this
            # bound, then given up, and the next write asks for one at once: a long bound
            # kept a host refusing calls for up to half as long again as its server was down
            reconnect_timeout=max(2.0, 2 * self._connect_timeout_s),
            configure=self._configure,
            # no ``check``: the pool's own waits, after a dead connection, as long as the
            # whole bound; ``_getconn`` checks each connection it hands out instead
            name="sharedos-evidence",
        )
        try:
            pool.open(wait=True, timeout=max(self._connect_timeout_s, 2.0))
        except Exception as exc:
            with contextlib.suppress(Exception):
                pool.close(timeout=0)
            raise EvidenceStoreError(
                f"cannot connect to the evidence database {self.shown}: {self._say(exc)}",
                "io",
            ) from None
        return pool

    def _configure(self, conn: Any) -> None:
        """Runs on every new connection: the database must still be the store that was opened.

        Only an answer proves another store: a ``meta`` without this store's id, or no
        such table. A check that fails otherwise (a lock held on ``meta``, a statement
        timeout, the connection cut) proves nothing: it raises, the pool discards the
        connection and makes another later, and meanwhile writes fail with their cause.
        """
        expected = self._store_id
        if expected is None:
            return
        try:
            row = conn.execute(_STORE_ID_SQL).fetchone()
        except Exception as exc:
            if _cause(exc) != "replaced":
                raise
            row = None
        if row is None or row[0] != expected:
            self._broken = EvidenceStoreError(
                f"the evidence database {self.shown} is no longer the store that was opened "
                "(its store id changed or its tables are gone); refusing to write evidence into it",
                "replaced",
            )

    def _getconn(self, timeout: float) -> Any:
        """A live connection out of the pool within ``timeout`` s (``PoolTimeout`` past it).

        Each connection handed out is checked (one empty query): the others may have
        died while idle, all at once (a restarted server, ``idle_session_timeout``, a
        cut network). A dead one is discarded at once and the next one taken — the
        pool makes new ones meanwhile — with no wait between them: the pool's own
        ``check`` waits about a second after the second dead connection, so two of
        them made every write fail by its bound though the server was there.
        """
        from psycopg_pool import ConnectionPool, PoolTimeout

        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PoolTimeout(f"couldn't get a live connection after {timeout:.2f} sec")
            conn = self._pool.getconn(timeout=left)
            try:
                # a server that does not answer at all is a dead connection too (_Watchdog)
                with _WATCHDOG.bounded(conn, max(left, _CHECK_FLOOR_S)):
                    ConnectionPool.check_connection(conn)
            except Exception:
                with contextlib.suppress(Exception):
                    conn.close()  # returned closed: the pool discards it and makes another
                with contextlib.suppress(Exception):
                    self._pool.putconn(conn)
                continue
            return conn

    @contextlib.contextmanager
    def _conn(self) -> Iterator[Any]:
        """A pooled connection; a failure to get one within the bound is cause ``timeout``."""
        from psycopg_pool import PoolClosed, PoolTimeout

        self._check_fork()
        try:
            conn = self._getconn(self._connect_timeout_s)
        except PoolTimeout:
            raise EvidenceStoreError(
                f"no connection to the evidence database {self.shown} within "
                f"{self._connect_timeout_s:g} s",
                "timeout",
            ) from None
        except PoolClosed:
            raise EvidenceStoreError(f"evidence store {self.shown} is closed", "closed") from None
        try:
            yield conn
        finally:
            with contextlib.suppress(Exception):
                self._pool.putconn(conn)

    @contextlib.contextmanager
    def _writer_conn(self) -> Iterator[Any]:
        """The store's write connection, held out of the pool between writes.

        Checking a connection out of the pool per commit costs about half a
        millisecond here (its locks and the return-path checks), more than the
        commit itself; the writer keeps one, under the appender's lock. A
        connection found broken goes back to the pool, which discards it, and
        the next write takes a fresh one: that is the reconnection.
        """
        from psycopg_pool import PoolClosed, PoolTimeout

        self._check_fork()
        conn = self._writer
        if conn is not None and (conn.closed or conn.broken):
            self._release_writer()
            conn = None
        if conn is None:
            try:
                conn = self._getconn(self._wait_bound())
            except PoolTimeout:
                raise EvidenceStoreError(
                    f"no connection to the evidence database {self.shown} within "
                    f"{self._connect_timeout_s:g} s",
                    "timeout",
                ) from None
            except PoolClosed:
                raise EvidenceStoreError(
                    f"evidence store {self.shown} is closed", "closed"
                ) from None
            self._writer = conn
        try:
            yield conn
        finally:
            if conn.closed or conn.broken:
                self._release_writer()

    def _wait_bound(self) -> float:
        """How long a write may wait for a connection: the pool's bound, within the write's deadline."""
        deadline = self.appender.deadline if hasattr(self, "appender") else None
        if deadline is None:
            return self._connect_timeout_s
        return max(0.05, min(self._connect_timeout_s, deadline - time.monotonic()))

    def _release_writer(self) -> None:
        conn, self._writer = self._writer, None
        if conn is not None:
            with contextlib.suppress(Exception):
                self._pool.putconn(conn)

    def _check_fork(self) -> None:
        if self._generation != _FORK_GENERATION[0]:
            # neither the pool's threads nor its sockets are this process's after fork()
            with self._lock:
                if self._generation != _FORK_GENERATION[0]:
                    self._generation = _FORK_GENERATION[0]
                    self._writer = None
                    self._pool = self._open_pool()

    def _say(self, exc: BaseException) -> str:
        """The first line of a driver error, scrubbed of every spelling of the password."""
        from sharedos.evidence.url import scrub

        return scrub(_first_line(exc), self._secrets)

    def _error(self, what: str, exc: BaseException) -> EvidenceStoreError:
        cause = _cause(exc)
        return EvidenceStoreError(
            f"cannot {what} evidence in {self.shown}: {self._say(exc)} ({cause})", cause
        )

    # -- schema ------------------------------------------------------------------------

    def _check_schema(self) -> None:
        """Read (or create) the schema, the store id and the columns; probe a write.

        Every statement's failure is an ``EvidenceStoreError`` with its cause (a
        connection cut at any of them — a restart, a proxy — included), never the
        driver's own exception.
        """
        with self._conn() as conn:
            try:
                self._read_schema(conn)
            except EvidenceStoreError:
                raise
            except Exception as exc:
                raise EvidenceStoreError(
                    f"cannot open evidence database {self.shown}: {self._say(exc)}", _cause(exc)
                ) from None
            if not self.read_only and self._store_id is None:
                # each write is guarded on the id (``_guarded_statement``): without one,
                # a replaced store could not be told from this one
                raise EvidenceStoreError(
                    f"evidence database {self.shown} has no store_id in its meta table; "
                    f"run `sharedos evidence migrate --db {self.shown}` to give it one",
                    "io",
                )
            if not self.read_only and self.schema_version >= 6:
                self._check_guards(conn)
            if not self.read_only:
                try:
                    # the probe: a store that cannot be written fails here, with one line.
                    # An INSERT rolled back: it needs the INSERT a host has, not an UPDATE
                    # of meta, with which a host could change the store's id under every
                    # other host (each then refuses to write: "replaced")
                    with conn.transaction(force_rollback=True):
                        conn.execute(
                            "INSERT INTO meta (key, value) VALUES (%s, now()::text)",
                            (f"probe-{uuid.uuid4()}",),
                        )
                except Exception as exc:
                    cause = _cause(exc)
                    raise EvidenceStoreError(
                        f"cannot write evidence database {self.shown}: {self._say(exc)} ({cause})",
                        cause,
                    ) from None

    def _check_guards(self, conn: Any) -> None:
        """Refuse to write a store that lacks one of the unique indexes (``GUARD_INDEXES``)
        that make a second writer of a turn collide instead of forking its chain; a host
        cannot make them (it holds SELECT and INSERT), ``sharedos evidence migrate`` does."""
        from sharedos.evidence import migrate

        try:
            missing = missing_guards(migrate.pg_chain_indexes(conn))
        except Exception as exc:
            raise EvidenceStoreError(
                f"cannot open evidence database {self.shown}: {self._say(exc)}", _cause(exc)
            ) from None
        if missing:
            raise EvidenceStoreError(
                f"evidence database {self.shown} lacks the unique index "
                f"{', '.join(missing)} on chain, without which a second writer is not refused "
                "(a turn's chain forks, an outcome or an approval step is written twice); run "
                f"`sharedos evidence migrate --db {self.shown}` to make it again",
                "io",
            )

    def _read_schema(self, conn: Any) -> None:
        from sharedos.evidence import migrate

        version = migrate.pg_version(conn)
        if version == 0 and not self.read_only and self._create:
            migrate.pg_migrate(conn, migrate.LATEST)
            version = migrate.pg_version(conn)
        migrate.refuse_unreadable(self.shown, version, writing=not self.read_only)
        self.schema_version = version
        # the columns this SharedOS reads that the database (read as it is) lacks
        if version >= 4:
            self._missing = frozenset(CHAIN_COLUMNS) - migrate.pg_chain_columns(conn)
        else:
            self._missing = migrate.LATER_ATTEMPT_FIELDS
        row = conn.execute(_STORE_ID_SQL).fetchone()
        self._store_id = row[0] if row else None

    # -- the appender's backend ----------------------------------------------------------

    def _guarded(self) -> None:
        if self._broken is not None:
            raise self._broken
        if self.read_only:
            raise EvidenceStoreError(
                f"evidence database {self.shown} was opened read-only", "read_only"
            )

    def head(self, turn_id: str) -> tuple[int, str] | None:
        """The turn's last link as the database has it."""
        row = self._fetchone(_HEAD_SQL, (pg_text(turn_id),))
        return (int(row[0]), str(row[1])) if row else None

    def attempt_link(self, seq: int) -> tuple[str, str] | None:
        """(turn_id, hash) of the attempt link of ``seq``."""
        row = self._fetchone(_ATTEMPT_LINK_SQL, (seq,))
        return (str(row[0]), str(row[1])) if row else None

    def link_at(self, turn_id: str, pos: int) -> tuple[int | None, str] | None:
        """(seq of the attempt it is or concludes, hash) of the turn's link at ``pos``."""
        row = self._fetchone(_LINK_AT_SQL, (turn_id, pos))
        return (int(row[0]) if row[0] is not None else None, str(row[1])) if row else None

    def _fetchone(self, sql: str, params: tuple[Any, ...]) -> Any:
        """One row, on the writer's connection (called under the appender's lock)."""
        for retry in (True, False):
            with self._writer_conn() as conn:
                try:
                    with _WATCHDOG.bounded(conn, self._answer_bound_s):
                        return conn.execute(sql, params, prepare=True).fetchone()
                except Exception as exc:
                    if retry and _lost(exc, conn):
                        # a read can be repeated: once more, on a new connection (the
                        # server may have said goodbye before the socket shows it closed)
                        with contextlib.suppress(Exception):
                            conn.close()
                        continue
                    raise self._error("read", exc) from None
        raise AssertionError("unreachable")

    def _statement(self, plan: Plan) -> tuple[str, list[Any]]:
        """The one SQL statement that commits ``plan``, and its parameters.

        Every statement is guarded on the store's id (``_guarded_statement``): no row
        back means the database at the URL is another store. Two rows (a turn's
        opening and its first row; a refused call's attempt and outcome) are one
        statement, the outcome naming the attempt's new seq through the part that
        inserted it. The text is built once per shape.
        """
        rows = plan.rows
        kinds = tuple(kind for kind, _ in rows)
        params: list[Any] = [self._store_id]  # a writable store has one (``_open``)
        for _, values in rows:
            params += [v for v in values if v is not ATTEMPT_SEQ]
        sql = self._sql.get(kinds)
        if sql is None:
            sql = self._sql[kinds] = _guarded_statement(rows)
        return sql, params

    def _raise_write_error(self, exc: BaseException, conn: Any, plan: Plan | None) -> None:
        """Map a failed write to ``CommitUnknown``, ``StaleHead`` or ``EvidenceStoreError``."""
        if _lost(exc, conn):
            raise CommitUnknown(
                self._say(exc),
                EvidenceStoreError(
                    f"lost the connection to the evidence database {self.shown}: {self._say(exc)}",
                    "io",
                ),
            ) from None
        state = getattr(exc, "sqlstate", None)
        constraint = getattr(getattr(exc, "diag", None), "constraint_name", None)
        seq = plan.seq if plan is not None else None
        if state == "23505" and constraint == "chain_place":
            raise StaleHead() from None
        if state == "23505" and str(constraint or "").startswith("chain_approval_"):
            from sharedos.evidence.approvals import ApprovalTaken

            raise ApprovalTaken(f"approval write refused by {constraint}") from None
        if state == "23505" and constraint == "chain_attempt":
            raise EvidenceStoreError(f"attempt {seq} already has an outcome", "conflict") from None
        if state == "23503":
            raise EvidenceStoreError(f"no attempt with seq {seq} to conclude", "conflict") from None
        self._read_only_session(exc, conn)
        raise self._error("write", exc) from None

    def _read_only_session(self, exc: BaseException, conn: Any) -> None:
        """After a write refused as a read-only transaction (SQLSTATE 25006): replace this
        connection and the pool's idle ones. The database's or role's
        ``default_transaction_read_only`` is read once, when a connection is made, and
        holds for its life: kept, they would refuse every write after the database was made
        writable again. The next write asks the server on a new connection."""
        if getattr(exc, "sqlstate", None) != "25006":
            return
        with contextlib.suppress(Exception):
            conn.close()  # closed: ``_writer_conn`` hands it back, and the pool discards it
        with contextlib.suppress(Exception):
            self._pool.drain()

    def _replaced(self) -> EvidenceStoreError:
        """The store at the URL is not the one opened (a write found another ``store_id``)."""
        self._broken = EvidenceStoreError(
            f"the evidence database {self.shown} is no longer the store that was opened "
            "(its store id changed or its tables were recreated); refusing to write evidence "
            "into it",
            "replaced",
        )
        return self._broken

    def execute(self, plan: Plan) -> int:
        """Commit ``plan`` in one statement (see ``ChainBackend.execute``)."""
        self._guarded()
        sql, params = self._statement(plan)
        with self._writer_conn() as conn:
            try:
                with _WATCHDOG.bounded(conn, self._answer_bound_s):
                    if plan.fence is None:
                        row = conn.execute(sql, params, prepare=True).fetchone()
                    else:
                        # the fence between the statement and its commit: one transaction
                        with conn.transaction():
                            row = conn.execute(sql, params, prepare=True).fetchone()
                            try:
                                self._fenced(conn, plan.fence)
                            except Exception as refused:
                                raise _Fenced(refused) from refused
            except _Fenced as fenced:
                raise fenced.refusal from None  # the plan rolled back
            except Exception as exc:
                self._raise_write_error(exc, conn, plan)
        if row is None:  # the guard found another store
            raise self._replaced()
        if plan.attempt is None:
            return plan.seq if plan.seq is not None else -1
        return int(row[0]) if row is not None and row[0] is not None else -1

    @staticmethod
    def _fenced(conn: Any, fence: Fence) -> None:
        """Run a plan's fence in its open transaction, just before the commit.

        The fence passed, the server could still be frozen (its processes stopped, a
        hung host) before it reads the COMMIT: thawed after the fence's caller gave the
        write up, it committed a write reported failed (an approval spent on a call refused
        "nothing ran"). So the session is told to end itself should it idle in this
        transaction past the time the fence leaves (``idle_in_transaction_session_timeout``,
        rolling the transaction back), and the fence is asked again once the server has
        answered that: a server frozen before it, then thawed, finds the write given up."""
        left = fence()
        if left is None:
            return
        ms = str(max(1, math.ceil(left * 1000)))
        conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, true)", (ms,))
        fence()

    def execute_many(self, plans: list[Plan]) -> list[int]:
        """Commit ``plans`` in one transaction (group commit: one commit, one WAL flush).

        A connection lost in flight is resolved like a single write's: the
        group landed as a whole when its first link is there with its hash.
        """
        self._guarded()
        statements = [self._statement(plan) for plan in plans]
        seqs: list[int] = []
        with self._writer_conn() as conn:
            try:
                with (
                    _WATCHDOG.bounded(conn, self._answer_bound_s) as renew,
                    conn.transaction(),
                ):
                    for plan, (sql, params) in zip(plans, statements, strict=True):
                        renew()
                        row = conn.execute(sql, params, prepare=True).fetchone()
                        if row is None:
                            raise _OtherStore()  # rolls the group back
                        if plan.attempt is None:
                            seqs.append(plan.seq if plan.seq is not None else -1)
                        else:
                            seqs.append(int(row[0]) if row is not None else -1)
                    renew()  # the COMMIT
            except _OtherStore:
                raise self._replaced() from None
            except Exception as exc:
                self._raise_write_error(exc, conn, None)
        return seqs

    def rewrite_grants(self) -> list[str]:
        """What the store's role may do to rows already written, which a host never needs
        (``UPDATE``, ``DELETE``, ``TRUNCATE`` on ``chain`` and the checkpoint tables, as a
        grant, an ownership or a superuser's); one entry per table, e.g. ``"UPDATE, DELETE
        on chain"``. Empty when it has none, or when it cannot be asked."""
        try:
            with self._conn() as conn:
                tables = list(REWRITE_TABLES)
                rows = conn.execute(_REWRITE_GRANTS_SQL, (tables, tables)).fetchall()
        except Exception:  # a question, not a write: no answer is no warning
            return []
        return [f"{privileges} on {table}" for table, privileges in rows]

    # -- checkpoints (sharedos.evidence.checkpoint) ----------------------------------------
    # -- checkpoints (sharedos.evidence.checkpoint) ----------------------------------------

    @property
    def store_id(self) -> str:
        """The database's ``meta.store_id``, named by its checkpoints."""
        return self._store_id or ""

    def last_checkpoint(self) -> tuple[int, str] | None:
        """(number, hash) of the store's last checkpoint."""
        row = self._fetchone(_LAST_CHECKPOINT_SQL, ())
        return (int(row[0]), str(row[1])) if row else None

    def execute_checkpoint(self, cp: Checkpoint, heads: list[tuple[str, int, str]]) -> None:
        """Commit checkpoint ``cp`` and its heads in one statement (``CheckpointTaken`` when
        another writer took its number)."""
        self._guarded()
        params = (
            *checkpoint_values(cp),
            cp.number,
            [pg_text(t) for t, _, _ in heads],
            [p for _, p, _ in heads],
            [h for _, _, h in heads],
        )
        with self._writer_conn() as conn:
            try:
                if self._whole_store_checkpoint:
                    with conn.transaction():
                        _unbounded_read(conn)
                        conn.execute(_WRITE_CHECKPOINT_SQL, params)
                else:
                    with _WATCHDOG.bounded(conn, self._answer_bound_s):
                        conn.execute(_WRITE_CHECKPOINT_SQL, params)
            except Exception as exc:
                state = getattr(exc, "sqlstate", None)
                constraint = getattr(getattr(exc, "diag", None), "constraint_name", None)
                # the number is another writer's: its checkpoint row collides, or first
                # (the heads are inserted before the checkpoint's ``WITH`` part runs) the
                # head row of a turn both list — heads are unique per turn within one write
                if state == "23505" and constraint in ("checkpoints_pkey", "checkpoint_heads_pkey"):
                    raise CheckpointTaken() from None
                if _lost(exc, conn):
                    # unknown whether it landed: the appender re-reads the last one and
                    # writes it again (the same heads twice in a row are harmless)
                    raise CommitUnknown(
                        self._say(exc),
                        EvidenceStoreError(
                            f"lost the connection to the evidence database {self.shown} "
                            f"while writing a checkpoint: {self._say(exc)}",
                            "io",
                        ),
                    ) from None
                self._read_only_session(exc, conn)
                raise self._error("write a checkpoint of", exc) from None

    def evidence_checkpoint_due(self) -> bool:
        """True when this store has committed heads to checkpoint and its interval passed."""
        return self.appender.checkpoint_due()

    def take_checkpoint(
        self, *, everything: bool = False, always: bool = False
    ) -> Checkpoint | None:
        """Write a checkpoint now: over the heads committed here since the last one, or with
        ``everything`` over every turn head no checkpoint covers yet; None when nothing to
        cover, unless ``always`` (then one over no heads, chained after the last)."""
        self._guarded()
        if not everything:
            return self.appender.checkpoint(None, always=always)
        # every head no checkpoint covers: a read and a write of the whole store (an
        # auditor's ``checkpoint --take``, the end of a ``copy``), off every call's path,
        # which the writes' statement timeout would cut short on a store of some size
        heads = self.uncovered_heads()
        self._whole_store_checkpoint = True
        try:
            return self.appender.checkpoint(heads, always=always)
        finally:
            self._whole_store_checkpoint = False

    def uncovered_heads(self) -> list[tuple[str, int, str]]:
        """Every turn's head that is past what the store's checkpoints cover.

        A read of the whole store (an auditor's ``checkpoint --take``, the end of a
        ``copy``), off every call's path: streamed without the writes' statement timeout,
        which it outlasts on a store of some size."""
        return heads_of(self._stream(_UNCOVERED_SQL, [], 5000))

    def iter_checkpoints(self) -> Iterator[tuple[Checkpoint, list[tuple[str, int, str]]]]:
        """Every checkpoint in number order, with the heads it lists (one at a time in memory)."""
        from sharedos.evidence.sqlite import iter_checkpoint_rows

        yield from iter_checkpoint_rows(self._stream)

    def iter_coverage(self) -> Iterator[tuple[str, int, str, int]]:
        """(turn_id, pos, hash, checkpoint) of every head a checkpoint recorded (each once,
        with the first checkpoint that did), ordered by turn id (binary order, as
        ``iter_links``), then position: a turn's furthest head comes last."""
        from sharedos.evidence.sqlite import stored_int, stored_text

        for turn, pos, hash_, number in self._stream(_COVERAGE_SQL, [], 5000):
            yield stored_text(turn), stored_int(pos), stored_text(hash_), stored_int(number)

    def _stream(self, sql: str, params: list[Any], batch: int) -> Iterator[Any]:
        """Rows of ``sql`` through a server-side cursor (bounded memory). Cut off by a lost
        connection before its first row, it is repeated once on a new connection (``_read``)."""
        for retry in (True, False):
            started = False
            with self._conn() as conn:
                try:
                    with conn.transaction(), conn.cursor(name="sharedos_stream") as cur:
                        _unbounded_read(conn)
                        cur.itersize = batch
                        cur.execute(sql, params)
                        for row in cur:
                            started = True
                            yield row
                    return
                except EvidenceStoreError:
                    raise
                except Exception as exc:
                    if retry and not started and _lost(exc, conn):
                        with contextlib.suppress(Exception):
                            conn.close()  # the pool discards it
                        continue
                    raise self._error("read", exc) from None

    # -- the store's writes ------------------------------------------------------------

    def begin(self, attempt: EvidenceRecord) -> int:
        """Commit ``attempt`` as an attempt row (its outcome fields are ignored); return its seq."""
        self._guarded()
        return self.appender.begin(attempt)

    def finish(self, seq: int, outcome: OutcomeRecord) -> None:
        """Commit the outcome row of attempt ``seq`` (once; cause ``conflict`` otherwise)."""
        self._guarded()
        self.appender.finish(int(seq), outcome)

    def record(self, record: EvidenceRecord) -> int:
        """Commit a complete record (attempt and outcome rows) in one statement; return its seq."""
        self._guarded()
        return self.appender.record(record)

    def commit_group(self, ops: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[bool, Any]]:
        """Several ``begin``/``finish``/``record`` writes in one transaction (``ChainAppender.
        commit_group``): one (ok, result or error) per op, in order."""
        self._guarded()
        return self.appender.commit_group(ops)

    def open_turn(self, opening: Opening) -> bool:
        """Write the turn's opening record unless it has one; True when this call wrote it."""
        self._guarded()
        return self.appender.open_turn(opening)

    def seal_turn(
        self, turn_id: str, closed_at: str | None = None, check: Callable[[], None] | None = None
    ) -> str:
        """Append the turn's seal (signed when the store has a signer); the seal's hash."""
        self._guarded()
        return self.appender.seal_turn(turn_id, closed_at, check)

    def append_approval(
        self,
        values: Sequence[Any],
        check: Callable[[], None] | None = None,
        fence: Fence | None = None,
    ) -> str:
        """Append one approval event (``chain.APPROVAL_FIELDS`` order) to its turn's chain
        (``sharedos.evidence.approvals``); the link's hash. ``ApprovalTaken`` when that
        step of that approval is already in the store (another host wrote it first;
        ``check``, ``fence``: as for ``ChainAppender.append_approval``)."""
        self._guarded()
        require_approvals(self.schema_version, str(self.shown))
        return self.appender.append_approval(values, check, fence)

    def has_seal(self, turn_id: str) -> bool:
        """True when the turn's chain holds a seal (one indexed lookup, no row's content)."""
        sql = "SELECT 1 FROM chain WHERE turn_id = %s AND kind = 'seal' LIMIT 1"
        return bool(self._read(sql, [pg_text(turn_id)]))

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
        params = [pg_text(v) for v in wanted if v is not None]
        sql = approval_rows_sql(
            "postgresql",
            by_turn=turn_id is not None,
            by_approval=approval_id is not None,
            by_digest=arguments_digest is not None,
        )
        whole = turn_id is None and approval_id is None and arguments_digest is None
        return [approval_row(row) for row in self._read(sql, params, whole_store=whole)]

    # -- reading -----------------------------------------------------------------------

    @staticmethod
    def _where(
        turn_id: str | None, call_id: str | None = None, outcome: str | None = None
    ) -> tuple[str, list[Any]]:
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("a.turn_id", turn_id), ("a.call_id", call_id)):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(pg_text(value))
        if outcome == INTERRUPTED:
            where.append("o.seq IS NULL")
        elif outcome is not None:
            where.append("o.outcome = %s")
            params.append(outcome)
        return (f" WHERE {' AND '.join(where)}" if where else ""), params

    def _read(self, sql: str, params: list[Any], *, whole_store: bool = False) -> list[Any]:
        """Every row of ``sql``. ``whole_store``: a read over the whole store (the CLI's
        ``counts``, ``turns``, ``list``), off every call's path, runs without the writes'
        statement timeout, which it outlasts on a store of a few million rows.

        A read cut off by a lost connection (a terminated backend, a restarted server) is
        repeated once on a new connection, as the writer's lookups are (``_fetchone``)."""
        for retry in (True, False):
            with self._conn() as conn:
                try:
                    if not whole_store:
                        with _WATCHDOG.bounded(conn, self._answer_bound_s):
                            return list(conn.execute(sql, params).fetchall())
                    with conn.transaction():
                        _unbounded_read(conn)
                        return list(conn.execute(sql, params).fetchall())
                except Exception as exc:
                    if retry and _lost(exc, conn):
                        with contextlib.suppress(Exception):
                            conn.close()  # the pool discards it
                        continue
                    raise self._error("read", exc) from None
        raise AssertionError("unreachable")

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
        sql = self._select + where + " ORDER BY a.seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        whole = turn_id is None and call_id is None
        return [
            _row_to_record(row, self.shown) for row in self._read(sql, params, whole_store=whole)
        ]

    def iter_records(
        self,
        turn_id: str | None = None,
        *,
        outcome: str | None = None,
        limit: int | None = None,
        batch: int = 2000,
    ) -> Iterator[EvidenceRecord]:
        """Every record in ``seq`` order, streamed through a server-side cursor (bounded
        memory); filtered as ``query`` filters."""
        where, params = self._where(turn_id, None, outcome)
        sql = self._select + where + " ORDER BY a.seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._conn() as conn:
            try:
                with conn.transaction(), conn.cursor(name="sharedos_export") as cur:
                    _unbounded_read(conn)
                    cur.itersize = batch
                    cur.execute(sql, params)
                    rows = cur.fetchmany(batch)
                    while rows:  # one batch in memory (iterating the cursor holds two)
                        for row in rows:
                            yield _row_to_record(row, self.shown)
                        rows = []
                        rows = cur.fetchmany(batch)
            except EvidenceStoreError:
                raise
            except Exception as exc:
                raise self._error("read", exc) from None

    @property
    def _select(self) -> str:
        return _select_records(self._missing, chained=self.schema_version >= 4)

    def iter_links(self, turn_id: str | None = None, *, batch: int = 5000) -> Iterator[Link]:
        """Every link with its content, ordered by turn (binary order) and position."""
        where = " WHERE c.turn_id = %s" if turn_id is not None else ""
        params: list[Any] = [pg_text(turn_id)] if turn_id is not None else []
        # the binary order of turn ids, the same as SQLite's
        sql = reader_sql(self._missing) + where + ' ORDER BY c.turn_id COLLATE "C", c.pos, c.seq'
        for row in self._stream(sql, params, batch):
            yield link_from_row(row)

    def iter_chain_rows(
        self, turn_id: str | None = None, *, batch: int = 2000
    ) -> Iterator[tuple[Any, ...]]:
        """Every stored row as (seq, *``CHAIN_COLUMNS``), by turn and position (``copy``)."""
        where = " WHERE turn_id = %s" if turn_id is not None else ""
        params: list[Any] = [pg_text(turn_id)] if turn_id is not None else []
        sql = f'{chain_rows_sql(self._missing)}{where} ORDER BY turn_id COLLATE "C", pos, seq'
        for row in self._stream(sql, params, batch):
            yield tuple(row)

    def import_rows(self, rows: list[tuple[Any, ...]], attempts: dict[int, int]) -> dict[int, int]:
        """Append rows read from another store (``iter_chain_rows``) in one transaction.

        Each keeps its place, hashes and content; it gets a seq here, and an
        outcome's ``attempt`` is mapped through ``attempts`` (source seq -> seq
        here) as it grows. Returns that map. ``StaleHead`` when a position is taken.
        """
        self._guarded()
        mapping = dict(attempts)
        sql = (
            f"INSERT INTO chain ({', '.join(CHAIN_COLUMNS)}) "
            f"VALUES ({', '.join(['%s'] * len(CHAIN_COLUMNS))}) RETURNING seq"
        )
        at, kind_at = CHAIN_COLUMNS.index("attempt"), CHAIN_COLUMNS.index("kind")
        with self._writer_conn() as conn:
            try:
                with conn.transaction():
                    for row in rows:
                        values: list[Any] = [pg_text(v) if type(v) is str else v for v in row[1:]]
                        if values[at] is not None:
                            values[at] = mapping.get(int(values[at]), values[at])
                        (seq,) = conn.execute(sql, values).fetchone() or (None,)
                        if values[kind_at] == "attempt" and seq is not None:
                            mapping[int(row[0])] = int(seq)
            except Exception as exc:
                state = getattr(exc, "sqlstate", None)
                constraint = getattr(getattr(exc, "diag", None), "constraint_name", None)
                if state == "23505" and constraint == "chain_place":
                    raise StaleHead() from None
                raise self._error("copy rows into", exc) from None
        return mapping

    def counts(self, turn_id: str | None = None) -> EvidenceCounts:
        """Counts by status (the outcomes and ``interrupted``) and by reason, optionally for one turn."""
        if turn_id is None:
            sql = counts_sql("postgresql", one_turn=False, chained=self.schema_version >= 4)
            return fold_counts(self._read(sql, [], whole_store=True))
        sql = counts_sql("postgresql", one_turn=True, chained=self.schema_version >= 4)
        return fold_counts(self._read(sql, [pg_text(turn_id)]))

    def turns(self) -> list[tuple[str, int]]:
        """Turn ids with their number of attempts, in order of first appearance."""
        sql = TURNS_SQL if self.schema_version >= 4 else TURNS_SQL_BEFORE_4
        return [(str(t), int(n)) for t, n in self._read(sql, [], whole_store=True)]

    def close(self) -> None:
        """Write a last checkpoint over what was committed here, then close the pool
        (further writes raise cause ``closed``)."""
        if self._broken is None and not self.read_only and self.appender.dirty:
            try:
                self.appender.checkpoint()
            except EvidenceStoreError as exc:  # the rows stand; only their checkpoint is late
                self.failures.failed(exc.cause, f"cannot write a checkpoint: {exc}")
        if self._broken is None:
            self._broken = EvidenceStoreError(f"evidence store {self.shown} is closed", "closed")
        with self.appender.lock:
            self._release_writer()
        with contextlib.suppress(Exception):
            self._pool.close(timeout=2.0)

    def __enter__(self) -> PostgresEvidenceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _OtherStore(Exception):
    """A guarded write found another ``store_id`` at the URL (``_guarded_statement``)."""


#: the guard of every write: the database at the URL is still the store that was opened
_GUARD = "g AS (SELECT 1 FROM meta WHERE key = 'store_id' AND value = %s)"


def _guarded_statement(rows: Sequence[tuple[str, Sequence[Any]]]) -> str:
    """One statement that inserts ``rows`` only while ``meta.store_id`` is the store's own.

    The ``store_id`` is checked in the statement itself, not once per connection: the
    writer keeps its connection, and the database behind it may be recreated by another
    host or have its id changed (the store is then another one). The statement returns
    a row when it wrote (the attempt's new seq, or -1), none when the guard failed.
    """
    parts = [_GUARD]
    attempt_part: str | None = None
    for i, (kind, values) in enumerate(rows):
        head, marks = guarded_insert_parts(kind)
        shown = [
            f"(SELECT seq FROM r{attempt_part})" if v is ATTEMPT_SEQ else mark
            for v, mark in zip(values, marks, strict=True)
        ]
        parts.append(f"r{i} AS ({head} SELECT {', '.join(shown)} FROM g RETURNING seq)")
        if kind == "attempt":
            attempt_part = str(i)
    result = f"(SELECT seq FROM r{attempt_part})" if attempt_part is not None else "-1"
    return "WITH " + ", ".join(parts) + f" SELECT {result} FROM g"


def _row_to_record(row: Any, shown: str) -> EvidenceRecord:
    return record_from_row(_READ_COLUMNS, row, shown)


def _unbounded_read(conn: Any) -> None:
    """Lift the statement and idle-in-transaction timeouts for this streaming read's (or
    whole-store checkpoint's) transaction.

    The store's ``statement_timeout`` bounds writes (a call must not wait on
    a stuck database). A stream over the whole store (an export, a
    verification, a copy) is read off any call's path, and its first fetch
    may have to sort or join the whole table (a table just filled, before
    PostgreSQL has statistics on it) before the first row comes back. Between
    its fetches the transaction is idle for as long as its consumer takes (an
    export piped into a pager or a slow upload): the store's 10 s
    ``idle_in_transaction_session_timeout`` ended such an export part way.
    """
    conn.execute("SET LOCAL statement_timeout = 0")
    conn.execute("SET LOCAL idle_in_transaction_session_timeout = 0")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def new_store_id() -> str:
    """A fresh store id (written once: when the schema is created, or by a migration of a
    store that has none)."""
    return str(uuid.uuid4())
