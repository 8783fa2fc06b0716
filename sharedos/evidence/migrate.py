"""Versioned evidence schema migrations, for both backends (``sharedos evidence migrate``).

A store's schema version is an integer (SQLite: ``PRAGMA user_version``;
PostgreSQL: ``meta.schema_version``). This SharedOS writes version
``LATEST`` and reads versions ``MIN_READABLE`` to ``LATEST``:

* 1 — SQLite only: one ``evidence`` table (a row written after the call).
* 2 — two phases: ``attempts`` + ``outcomes`` and the ``evidence`` view.
* 3 — the tamper-evident chain: ``turns``, ``links``, ``seals``; the rows
  already there are chained by the migration (per turn in ``seq`` order, each
  outcome right after its attempt, since the order they were committed in was
  not recorded), so verification covers them from then on.
* 4 — one table ``chain``: each row carries its own link (``sharedos.
  evidence.chain_sql``); the version-3 tables become views of the same names;
  attempts keep their ``seq``; every link keeps its hash, so a store that
  verified before verifies after. Adds the attempt's decision ``context`` and
  the store-wide ``checkpoints``. Rows a version-3 store held outside its
  chain (or links without their row) are carried over as they were, so
  ``verify`` still reports them.
* 5 — the attempt's ``shadow`` decision (``[policy] shadow``): one column of
  ``chain``, hashed only when it is not null (every link written before it
  keeps its hash), and the views made again to show it. The step adds every
  column this SharedOS writes that ``chain`` lacks (``layout_step``: it checks
  the table, not the version number, so it is right whatever brought the
  table there), and keeps the grants on the views (PostgreSQL).
* 6 — approvals (issue 28): the chain kind ``approval`` (one row per event of
  an approval: requested, approved, denied, expired, consumed) with its
  columns, the ``approvals`` view, and the unique indexes that let each
  approval be requested, decided and closed once across every host
  (``chain_sql.approvals_step``; SQLite rebuilds ``chain`` to widen its kind
  check, copying every row as stored). Every earlier link keeps its hash.

A store at a version newer than ``LATEST`` is refused, for reading and for
writing, with a message naming both versions. Each migration runs in one
transaction (PostgreSQL: under an advisory lock, so two operators cannot
migrate at once; a host opening the database waits for it), so a store is
never left half-migrated.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sharedos.evidence.appender import Opening, _revision_of
from sharedos.evidence.chain import ATTEMPT_FIELDS, genesis, link_hash
from sharedos.evidence.chain_sql import (
    GUARD_INDEXES,
    VIEW_NAMES,
    VIEWS,
    Dialect,
    add_columns_sql,
    approvals_step,
    checkpoint_ddl,
    missing_guards,
    table_ddl,
)
from sharedos.evidence.store import EvidenceStoreError

__all__ = [
    "LATEST",
    "MIN_READABLE",
    "MigrationResult",
    "chain_existing",
    "layout_step",
    "migrate_store",
    "pg_chain_columns",
    "pg_chain_indexes",
    "pg_migrate",
    "pg_version",
    "refuse_unreadable",
    "sqlite_chain_columns",
]

LATEST = 6
MIN_READABLE = 1

_OUTCOME_COLUMNS = ("outcome", "reason", "finished_at", "duration_ms", "error")
#: the attempt fields added after schema 3: ``context`` (4), ``shadow`` (5)
LATER_ATTEMPT_FIELDS = frozenset({"context", "shadow"})
#: an attempt's stored fields up to schema 3
V3_ATTEMPT_FIELDS = tuple(c for c in ATTEMPT_FIELDS if c not in LATER_ATTEMPT_FIELDS)


@dataclass(frozen=True, slots=True)
class MigrationResult:
    """What ``migrate`` did: the version before and after, and how many rows it chained."""

    before: int
    after: int
    chained_turns: int = 0
    chained_rows: int = 0

    def line(self, shown: str) -> str:
        """One human line."""
        if self.before == self.after:
            return f"{shown}: evidence schema version {self.after}, up to date"
        chained = (
            f"; chained {self.chained_rows} existing rows in {self.chained_turns} turns"
            if self.chained_rows
            else ""
        )
        return f"{shown}: migrated evidence schema {self.before} -> {self.after}{chained}"


def refuse_unreadable(shown: str, version: int, *, writing: bool) -> None:
    """Raise ``EvidenceStoreError`` when this SharedOS cannot use a store at ``version``."""
    if version > LATEST:
        raise EvidenceStoreError(
            f"evidence database {shown} has schema version {version}, newer than this "
            f"SharedOS (which knows versions up to {LATEST}); upgrade SharedOS to use it",
            "io",
        )
    if version < MIN_READABLE:
        raise EvidenceStoreError(
            f"{shown} is not a SharedOS evidence database (no schema version)", "io"
        )
    if writing and version < LATEST:
        raise EvidenceStoreError(
            f"evidence database {shown} has schema version {version}; this SharedOS writes "
            f"version {LATEST}: run `sharedos evidence migrate --db {shown}` first "
            "(once, for the whole fleet)",
            "io",
        )


# -- chaining rows written before version 3 ------------------------------------------------


def chain_existing(
    rows: Iterable[Sequence[Any]],
) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """Links (and openings) for rows of ``attempts LEFT JOIN outcomes`` ordered by turn, seq.

    Each input row is ``(seq, *V3_ATTEMPT_FIELDS values, outcome_seq, *outcome
    values)``. Yields ``("turn", OPEN values)`` and ``("link", (turn_id, pos,
    kind, seq, prev, hash))`` in chain order; memory holds one turn's head.
    """
    turn: str | None = None
    pos, prev = 0, ""
    n_attempt = len(V3_ATTEMPT_FIELDS)
    for row in rows:
        seq = int(row[0])
        values = tuple(row[1 : 1 + n_attempt])
        outcome_seq = row[1 + n_attempt]
        outcome = tuple(row[2 + n_attempt :])
        turn_id = str(values[0])
        if turn_id != turn:
            turn = turn_id
            identity = values[V3_ATTEMPT_FIELDS.index("identity")]
            opening = Opening(
                turn_id=turn_id,
                opened_at=values[V3_ATTEMPT_FIELDS.index("started_at")],
                catalog_hash=values[V3_ATTEMPT_FIELDS.index("catalog_hash")],
                policy_hash=values[V3_ATTEMPT_FIELDS.index("policy_hash")],
                policy_revision=_revision_of(identity),
                identity=identity,
            )
            prev = genesis(turn_id)
            h = link_hash("open", prev, opening.values())
            yield "turn", opening.values()
            yield "link", (turn_id, 0, "open", None, prev, h)
            pos, prev = 1, h
        # no context (schema 4) nor shadow decision (schema 5) before 3
        attempt_hash = link_hash("attempt", prev, (*values, None, None))
        yield "link", (turn_id, pos, "attempt", seq, prev, attempt_hash)
        pos, prev = pos + 1, attempt_hash
        if outcome_seq is not None:
            duration = outcome[3]
            stored = (*outcome[:3], float(duration) if duration is not None else None, outcome[4])
            h = link_hash("outcome", prev, (attempt_hash, *stored))
            yield "link", (turn_id, pos, "outcome", seq, prev, h)
            pos, prev = pos + 1, h


def _chain_into(
    rows: Iterable[Sequence[Any]],
    insert_turns: Callable[[list[tuple[Any, ...]]], None],
    insert_links: Callable[[list[tuple[Any, ...]]], None],
    batch: int = 5000,
) -> tuple[int, int]:
    turns: list[tuple[Any, ...]] = []
    links: list[tuple[Any, ...]] = []
    n_turns = n_rows = 0
    for what, values in chain_existing(rows):
        if what == "turn":
            turns.append(values)
            n_turns += 1
        else:
            links.append(values)
            if values[2] != "open":
                n_rows += 1
        if len(links) >= batch:
            insert_turns(turns)
            insert_links(links)
            turns, links = [], []
    if links or turns:
        insert_turns(turns)
        insert_links(links)
    return n_turns, n_rows


_READ_EXISTING = (
    "SELECT a.seq, "
    + ", ".join(f"a.{c}" for c in V3_ATTEMPT_FIELDS)
    + ", o.seq, "
    + ", ".join(f"o.{c}" for c in _OUTCOME_COLUMNS)
    + " FROM attempts a LEFT JOIN outcomes o ON o.seq = a.seq ORDER BY a.turn_id, a.seq"
)
_INSERT_TURN = (
    "INSERT INTO turns (turn_id, opened_at, catalog_hash, policy_hash, policy_revision, identity)"
    " VALUES ({p}, {p}, {p}, {p}, {p}, {p})"
)
_INSERT_LINK = "INSERT INTO links (turn_id, pos, kind, seq, prev_hash, hash) VALUES ({p}, {p}, {p}, {p}, {p}, {p})"


# -- version 3 -> 4: one table ---------------------------------------------------------------

_V3_CONTENT = ", ".join(V3_ATTEMPT_FIELDS[1:])


def v3_to_v4(dialect: Dialect) -> tuple[str, ...]:
    """The statements that turn a version-3 store into a version-4 one (in one transaction).

    Every link keeps its position and hash and every attempt its ``seq``; each
    content row goes to the link that covers it (the first, should a tampered
    store have two), links without their row and rows without a link are
    carried over as they are (``verify`` reports them as it did).
    """
    a_cols = ", ".join(f"a.{c}" for c in V3_ATTEMPT_FIELDS[1:])
    first = (
        "l.pos = (SELECT min(l2.pos) FROM links l2 WHERE l2.kind = l.kind AND "
        "l2.seq = l.seq AND l2.turn_id = l.turn_id)"
    )
    bare = "INSERT INTO chain (turn_id, pos, kind, prev_hash, hash) "
    statements = [
        *table_ddl(dialect),
        # attempts, with the link covering each (an attempt no link covers: pos NULL)
        f"INSERT INTO chain (seq, turn_id, pos, kind, prev_hash, hash, {_V3_CONTENT}) "
        f"SELECT a.seq, a.turn_id, l.pos, 'attempt', COALESCE(l.prev_hash, ''), "
        f"COALESCE(l.hash, ''), {a_cols} FROM attempts a LEFT JOIN links l "
        f"ON l.kind = 'attempt' AND l.seq = a.seq AND l.turn_id = a.turn_id AND {first}",
    ]
    if dialect == "postgresql":  # every later row numbered after the attempts kept theirs
        statements.append(
            "SELECT setval(pg_get_serial_sequence('chain', 'seq'), "
            "GREATEST((SELECT max(seq) FROM chain), 1))"
        )
    statements += [
        # attempt links whose row is gone (or a second link of one row)
        bare + "SELECT l.turn_id, l.pos, 'attempt', l.prev_hash, l.hash FROM links l "
        "WHERE l.kind = 'attempt' AND NOT EXISTS (SELECT 1 FROM chain c "
        "WHERE c.turn_id = l.turn_id AND c.pos = l.pos)",
        # outcomes, with their links
        "INSERT INTO chain (turn_id, pos, kind, prev_hash, hash, attempt, outcome, reason, "
        "finished_at, duration_ms, error) SELECT COALESCE(l.turn_id, a.turn_id, '?'), l.pos, "
        "'outcome', COALESCE(l.prev_hash, ''), COALESCE(l.hash, ''), a.seq, o.outcome, "
        "o.reason, o.finished_at, o.duration_ms, o.error FROM outcomes o "
        "LEFT JOIN attempts a ON a.seq = o.seq "
        "LEFT JOIN links l ON l.kind = 'outcome' AND l.seq = o.seq AND "
        "l.pos = (SELECT min(l2.pos) FROM links l2 WHERE l2.kind = 'outcome' AND l2.seq = o.seq)",
        bare + "SELECT l.turn_id, l.pos, 'outcome', l.prev_hash, l.hash FROM links l "
        "WHERE l.kind = 'outcome' AND NOT EXISTS (SELECT 1 FROM chain c "
        "WHERE c.turn_id = l.turn_id AND c.pos = l.pos)",
        # openings
        "INSERT INTO chain (turn_id, pos, kind, prev_hash, hash, opened_at, catalog_hash, "
        "policy_hash, policy_revision, identity) SELECT t.turn_id, l.pos, 'open', "
        "COALESCE(l.prev_hash, ''), COALESCE(l.hash, ''), t.opened_at, t.catalog_hash, "
        "t.policy_hash, t.policy_revision, t.identity FROM turns t LEFT JOIN links l "
        "ON l.kind = 'open' AND l.turn_id = t.turn_id AND "
        "l.pos = (SELECT min(l2.pos) FROM links l2 WHERE l2.kind = 'open' "
        "AND l2.turn_id = t.turn_id)",
        bare + "SELECT l.turn_id, l.pos, 'open', l.prev_hash, l.hash FROM links l "
        "WHERE l.kind = 'open' AND NOT EXISTS (SELECT 1 FROM chain c "
        "WHERE c.turn_id = l.turn_id AND c.pos = l.pos)",
        # seals
        "INSERT INTO chain (turn_id, pos, kind, prev_hash, hash, closed_at, links, key_id, "
        "signature) SELECT s.turn_id, l.pos, 'seal', COALESCE(l.prev_hash, ''), "
        "COALESCE(l.hash, ''), s.closed_at, s.links, s.key_id, s.signature FROM seals s "
        "LEFT JOIN links l ON l.kind = 'seal' AND l.turn_id = s.turn_id AND l.pos = s.pos",
        bare + "SELECT l.turn_id, l.pos, 'seal', l.prev_hash, l.hash FROM links l "
        "WHERE l.kind = 'seal' AND NOT EXISTS (SELECT 1 FROM chain c "
        "WHERE c.turn_id = l.turn_id AND c.pos = l.pos)",
        "DROP VIEW evidence",
        "DROP TABLE outcomes",
        "DROP TABLE attempts",
        "DROP TABLE links",
        "DROP TABLE turns",
        "DROP TABLE seals",
        *VIEWS,
        *checkpoint_ddl(dialect),
    ]
    return tuple(statements)


# -- version 4 -> 5 (and any column added later): the columns the table lacks ------------------


def layout_step(present: set[str], dialect: Dialect) -> tuple[str, ...]:
    """The statements that give ``chain`` every column this SharedOS writes (``present``:
    the columns it has) and make the views again, which list them."""
    return (
        *add_columns_sql(present, dialect),
        *(f"DROP VIEW IF EXISTS {name}" for name in reversed(VIEW_NAMES)),
        *VIEWS,
    )


def sqlite_chain_columns(conn: sqlite3.Connection) -> set[str]:
    """The columns of a SQLite store's ``chain`` table (empty: no such table)."""
    return {str(row[1]) for row in conn.execute("PRAGMA table_info(chain)")}


def pg_chain_columns(conn: Any) -> set[str]:
    """The columns of a PostgreSQL store's ``chain`` table (empty: no such table)."""
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = 'chain'"
    ).fetchall()
    return {str(r[0]) for r in rows}


def pg_chain_indexes(conn: Any) -> list[tuple[str, bool]]:
    """The indexes of a PostgreSQL store's ``chain`` table: (name, unique and valid)."""
    rows = conn.execute(
        "SELECT c.relname, i.indisunique AND i.indisvalid FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = to_regclass('chain')"
    ).fetchall()
    return [(str(r[0]), bool(r[1])) for r in rows]


def _pg_guards(conn: Any) -> None:
    """Make again each ``GUARD_INDEXES`` index the store lacks (one there but not unique or
    not valid is dropped first). Rows that break one (a forked chain) fail the migration."""
    for name in missing_guards(pg_chain_indexes(conn)):
        conn.execute(f"DROP INDEX IF EXISTS {name}")
        conn.execute(GUARD_INDEXES[name])


def _pg_layout(conn: Any) -> None:
    """``layout_step`` on PostgreSQL, keeping the privileges granted on the views (a
    view made again starts with none, and the hosts read through them)."""
    from psycopg import sql

    grants = conn.execute(
        "SELECT table_name, grantee, privilege_type FROM information_schema.role_table_grants "
        "WHERE table_schema = current_schema() AND table_name = ANY(%s) "
        "AND grantee <> current_user",
        (list(VIEW_NAMES),),
    ).fetchall()
    for statement in layout_step(pg_chain_columns(conn), "postgresql"):
        conn.execute(statement)
    if not any(table == "approvals" for table, _, _ in grants):
        # a view new at this step reads as the attempts view does (schema 6: approvals)
        grants += [("approvals", g, p) for t, g, p in grants if t == "attempts"]
    for table, grantee, privilege in grants:
        conn.execute(
            sql.SQL("GRANT {} ON {} TO {}").format(
                sql.SQL(privilege), sql.Identifier(table), sql.Identifier(grantee)
            )
        )


# -- PostgreSQL --------------------------------------------------------------------------


def pg_version(conn: Any) -> int:
    """The schema version of the database ``conn`` is connected to (0: empty)."""
    meta, attempts = conn.execute(
        "SELECT to_regclass('meta') IS NOT NULL, to_regclass('attempts') IS NOT NULL"
    ).fetchone()
    if meta:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is not None:
            try:
                return int(row[0])
            except ValueError:
                raise EvidenceStoreError(
                    f"the evidence database has an unreadable schema version {row[0]!r}", "io"
                ) from None
    if attempts or meta:
        raise EvidenceStoreError(
            "the database has tables named like SharedOS's but no schema version: "
            "it is not a SharedOS evidence database",
            "io",
        )
    return 0


def pg_migrate(conn: Any, target: int = LATEST) -> MigrationResult:
    """Bring the database to ``target`` in one transaction, under the schema advisory lock."""
    from sharedos.evidence.postgres import SCHEMA_LOCK

    if target > LATEST:
        raise EvidenceStoreError(f"no evidence schema version {target} (latest {LATEST})", "io")
    # the lock is the session's, taken before the transaction starts: a transaction
    # reads the catalog changes other sessions committed only when it starts (or locks a
    # table), so one that waited for the lock inside itself still saw the database as
    # it was before another host created the schema ("relation chain already exists")
    conn.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
    try:
        return _pg_migrate_locked(conn, target)
    finally:
        with contextlib.suppress(Exception):  # a lost connection released it already
            conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))


def _pg_migrate_locked(conn: Any, target: int) -> MigrationResult:
    from sharedos.evidence import pg_schema
    from sharedos.evidence.postgres import new_store_id

    chained = (0, 0)
    with conn.transaction():
        before = pg_version(conn)
        if before > LATEST:
            refuse_unreadable("the evidence database", before, writing=True)
        fresh = before == 0 and target == LATEST
        if fresh:  # an empty database: the latest layout at once
            for statement in pg_schema.FRESH:
                conn.execute(statement)
        for version in range(max(before, 1) + 1, target + 1) if not fresh else (LATEST,):
            if fresh:
                steps: tuple[str, ...] = ()
            elif version == 4:
                steps = v3_to_v4("postgresql")
            elif version == 6:
                steps = approvals_step("postgresql", pg_chain_columns(conn), "")
            else:
                steps = pg_schema.STEPS.get(version, ())
            for statement in steps:
                conn.execute(statement)
            if version >= 5 and not fresh:
                _pg_layout(conn)
            if version == 3 and before >= 2:
                chained = _pg_chain_existing(conn)
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(version),),
            )
        if max(before, target) >= 6:
            _pg_guards(conn)
        # every store has an id, whatever wrote it first: writers guard each write on it.
        # Written only when missing: a store already up to date is then not written at all,
        # and says so when the database is read-only (``default_transaction_read_only``,
        # a standby) instead of failing on an INSERT that would change nothing
        if conn.execute("SELECT 1 FROM meta WHERE key = 'store_id'").fetchone() is None:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('store_id', %s) ON CONFLICT DO NOTHING",
                (new_store_id(),),
            )
        after = max(before, target)
    return MigrationResult(before, after, chained_turns=chained[0], chained_rows=chained[1])


def _pg_chain_existing(conn: Any) -> tuple[int, int]:
    def turns(batch: list[tuple[Any, ...]]) -> None:
        if batch:
            with conn.cursor() as cur:
                cur.executemany(_INSERT_TURN.format(p="%s"), batch)

    def links(batch: list[tuple[Any, ...]]) -> None:
        if batch:
            with conn.cursor() as cur:
                cur.executemany(_INSERT_LINK.format(p="%s"), batch)

    with conn.cursor(name="sharedos_migrate") as reader:
        reader.itersize = 5000
        reader.execute(_READ_EXISTING)
        return _chain_into(reader, turns, links)


# -- SQLite ---------------------------------------------------------------------------------

SQLITE_V3 = (
    """CREATE TABLE turns (
    turn_id          TEXT PRIMARY KEY,
    opened_at        TEXT NOT NULL,
    catalog_hash     TEXT,
    policy_hash      TEXT,
    policy_revision  TEXT,
    identity         TEXT
)""",
    """CREATE TABLE links (
    turn_id          TEXT NOT NULL,
    pos              INTEGER NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('open','attempt','outcome','seal')),
    seq              INTEGER,
    prev_hash        TEXT NOT NULL,
    hash             TEXT NOT NULL,
    PRIMARY KEY (turn_id, pos)
) WITHOUT ROWID""",
    "CREATE INDEX links_seq ON links (seq, kind)",
    """CREATE TABLE seals (
    turn_id          TEXT NOT NULL,
    pos              INTEGER NOT NULL,
    closed_at        TEXT NOT NULL,
    links            INTEGER NOT NULL,
    key_id           TEXT,
    signature        TEXT,
    PRIMARY KEY (turn_id, pos)
)""",
)


def sqlite_chain_existing(conn: sqlite3.Connection) -> tuple[int, int]:
    """Chain the rows of a version-2 SQLite store (inside the caller's transaction)."""

    def turns(batch: list[tuple[Any, ...]]) -> None:
        conn.executemany(_INSERT_TURN.format(p="?"), batch)

    def links(batch: list[tuple[Any, ...]]) -> None:
        conn.executemany(_INSERT_LINK.format(p="?"), batch)

    reader = conn.cursor()
    reader.execute(_READ_EXISTING)
    rows = iter(lambda: reader.fetchmany(5000), [])
    return _chain_into((row for chunk in rows for row in chunk), turns, links)


def sqlite_version(path: str) -> int:
    """The schema version of the SQLite file at ``path`` (read-only; 0 for an empty file)."""
    return int(_sqlite_read(path, lambda conn: conn.execute("PRAGMA user_version").fetchone()[0]))


def _sqlite_read(path: str, read: Callable[[sqlite3.Connection], Any]) -> Any:
    """``read`` on a read-only connection to the SQLite file at ``path``; on read-only
    media, where a WAL file cannot be opened even read-only (no ``-shm`` can be made), an
    ``immutable`` one, as ``SqliteEvidenceStore(read_only=True)`` reads it."""
    import urllib.parse

    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
    for suffix in ("", "&immutable=1"):
        try:
            conn = sqlite3.connect(uri + suffix, uri=True, timeout=1.5)
            try:
                return read(conn)
            finally:
                conn.close()
        except sqlite3.Error as exc:
            if suffix or not _read_only_media(path):
                raise EvidenceStoreError(f"cannot read {path}: {exc}", "io") from None
    raise AssertionError("unreachable")


def _read_only_media(path: str) -> bool:
    """True when nothing can be written beside the SQLite file at ``path`` (so nobody is
    writing it) and it has no ``-wal`` holding rows an ``immutable`` read would not see."""
    with contextlib.suppress(OSError):
        if os.path.getsize(path + "-wal") > 0:
            return False
    try:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False
    return read_only or not os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)


def _sqlite_up_to_date(conn: sqlite3.Connection) -> bool:
    """True when the file is at ``LATEST`` with its store id and every guard index: a
    migration would write nothing (``migrate`` then needs no writable open, and says so
    on read-only media too)."""
    if int(conn.execute("PRAGMA user_version").fetchone()[0]) != LATEST:
        return False
    if conn.execute("SELECT 1 FROM meta WHERE key = 'store_id'").fetchone() is None:
        return False
    listed = conn.execute("PRAGMA index_list(chain)").fetchall()
    return not missing_guards((str(row[1]), bool(row[2])) for row in listed)


def migrate_store(value: str) -> tuple[MigrationResult, str]:
    """Migrate the store ``value`` names to ``LATEST``; (what was done, the store as shown)."""
    from sharedos.evidence.url import parse_store_url

    try:
        target = parse_store_url(value)
    except ValueError as exc:
        raise EvidenceStoreError(str(exc), "io") from None
    if target.kind == "postgresql":
        import psycopg

        try:
            with psycopg.connect(target.location, autocommit=True, connect_timeout=5) as conn:
                return pg_migrate(conn), target.shown
        except psycopg.Error as exc:
            from sharedos.evidence.url import location_secrets, scrub

            first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            first = scrub(first, location_secrets(target.location))
            raise EvidenceStoreError(f"cannot migrate {target.shown}: {first}", "io") from None
    path = target.location
    if not os.path.isfile(path):
        raise EvidenceStoreError(f"no evidence database at {path}", "io")
    before = sqlite_version(path)
    refuse_unreadable(path, before, writing=False)
    if bool(_sqlite_read(path, _sqlite_up_to_date)):
        return MigrationResult(before, before), path
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    # a writable open migrates a SQLite file, in one transaction that reads the version
    # again under the write lock (so with hosts opening it at the same moment too)
    store = SqliteEvidenceStore(path)
    chained = getattr(store, "migrated_rows", (0, 0))
    store.close()
    return MigrationResult(before, sqlite_version(path), *chained), path
