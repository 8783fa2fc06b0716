"""Schema 4, for both stores: every row of every turn in one table, ``chain``, with its link.

Up to schema 3 each row was written twice: its content (``attempts``,
``outcomes``, ``turns``, ``seals``) and its place in the turn's chain
(``links``). From schema 4 the row *is* the link::

    chain(seq, turn_id, pos, kind, prev_hash, hash, attempt, <the kind's stored fields>)

* ``seq``: the row's number (SQLite rowid, PostgreSQL ``bigserial``); an
  attempt's ``seq`` is the one the store's protocol returns.
* ``(turn_id, pos)`` is unique across every kind: two writers of one turn
  (a relaunched stdio bridge, the host sealing a turn its bridge still
  writes) collide on it instead of forking the chain.
* ``attempt``: an outcome's attempt (unique: an attempt has one outcome; a
  foreign key: it must exist).
* the fields of each kind are those the chain hashes (``sharedos.evidence.
  chain.FIELDS_OF``), the ones kinds share (``catalog_hash``, ``policy_hash``,
  ``identity`` of an opening and of an attempt) in one column.

So a commit is one ``INSERT`` (a turn's first row, and a refused call's
attempt + outcome, two rows in one transaction). The schema-3 tables are
views over ``chain`` with the same names and columns (``attempts``,
``outcomes``, ``turns``, ``seals``, ``links``, ``evidence``), so auditors'
queries keep working. ``checkpoints`` and ``checkpoint_heads`` hold the
store-wide signed heads (``sharedos.evidence.checkpoint``).

The statements both stores run — the lookups, the counts and the checkpoint
write — are written here once, with each dialect's placeholders.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from sharedos.evidence.chain import APPROVAL_FIELDS, ATTEMPT_FIELDS
from sharedos.evidence.checkpoint import Checkpoint
from sharedos.evidence.store import INTERRUPTED, EvidenceCounts, EvidenceStoreError

__all__ = [
    "CHAIN_COLUMNS",
    "CHECKPOINT_COLUMNS",
    "CONTENT_OF",
    "GUARD_INDEXES",
    "READER_SQL",
    "TURNS_SQL",
    "TURNS_SQL_BEFORE_4",
    "VIEWS",
    "VIEW_NAMES",
    "Dialect",
    "add_columns_sql",
    "approval_indexes",
    "approval_row",
    "approval_rows_sql",
    "approvals_step",
    "attempts_source",
    "chain_rows_sql",
    "checkpoint_ddl",
    "checkpoint_heads_sql",
    "checkpoint_insert_sql",
    "checkpoint_values",
    "counts_sql",
    "evidence_source",
    "fold_counts",
    "heads_of",
    "insert_sql",
    "lookup_sql",
    "missing_guards",
    "outcomes_source",
    "picked",
    "reader_sql",
    "table_ddl",
]

Dialect = Literal["sqlite", "postgresql"]

OUTCOMES = "('succeeded','denied','failed','cancelled')"
KINDS_CHECK = "('open','attempt','outcome','seal','approval')"
#: the kinds a table made before schema 6 allows (it must be rebuilt or re-checked)
KINDS_CHECK_V5 = "('open','attempt','outcome','seal')"

#: the stored columns of each kind beside (turn_id, pos, kind, prev_hash, hash), in
#: the order ``chain.FIELDS_OF`` hashes them (an outcome's ``of`` is the hash of the
#: row its ``attempt`` names; a seal's ``signature`` is not hashed: it signs the hash)
CONTENT_OF: dict[str, tuple[str, ...]] = {
    "open": ("opened_at", "catalog_hash", "policy_hash", "policy_revision", "identity"),
    "attempt": ATTEMPT_FIELDS[1:],
    "outcome": ("attempt", "outcome", "reason", "finished_at", "duration_ms", "error"),
    "seal": ("closed_at", "links", "key_id", "signature"),
    "approval": APPROVAL_FIELDS[1:],
}
_LINK = ("turn_id", "pos", "kind", "prev_hash", "hash")
#: every column but ``seq``, in table order
CHAIN_COLUMNS: tuple[str, ...] = tuple(
    dict.fromkeys((*_LINK, "attempt", *(c for cols in CONTENT_OF.values() for c in cols)))
)
_INTEGER = frozenset({"pos", "attempt", "links"})


def _type(column: str, dialect: Dialect) -> str:
    if column in _INTEGER:
        return "INTEGER" if dialect == "sqlite" else "bigint"
    if column == "duration_ms":
        return "REAL" if dialect == "sqlite" else "double precision"
    return "TEXT" if dialect == "sqlite" else "text"


def table_ddl(dialect: Dialect, *, name: str = "chain") -> tuple[str, ...]:
    """``CREATE`` statements of ``chain`` and its indexes (``name`` other than ``chain``:
    the table alone under that name, which a rebuild copies into and then renames)."""
    seq = "seq INTEGER PRIMARY KEY" if dialect == "sqlite" else "seq bigserial PRIMARY KEY"
    cols = [seq]
    for column in CHAIN_COLUMNS:
        decl = f"{column} {_type(column, dialect)}"
        if column in ("turn_id", "kind", "prev_hash", "hash"):
            decl += " NOT NULL"
        if column == "kind":
            decl += f" CHECK (kind IN {KINDS_CHECK})"
        elif column == "outcome":
            decl += f" CHECK (outcome IN {OUTCOMES})"
        elif column == "attempt":
            decl += " REFERENCES chain (seq)"
        cols.append(decl)
    table = f"CREATE TABLE {name} (\n    " + ",\n    ".join(cols) + "\n)"
    if name != "chain":
        return (table,)
    return (table, *chain_indexes(), *approval_indexes())


def chain_indexes() -> tuple[str, ...]:
    """The indexes of ``chain`` since schema 4."""
    return (
        # pos is NULL only for rows a migration found outside every chain (so many may)
        "CREATE UNIQUE INDEX chain_place ON chain (turn_id, pos)",
        "CREATE UNIQUE INDEX chain_attempt ON chain (attempt) WHERE attempt IS NOT NULL",
        "CREATE INDEX chain_call ON chain (call_id) WHERE kind = 'attempt'",
    )


def approval_indexes() -> tuple[str, ...]:
    """Schema 6: what makes an approval's life one-way across any number of hosts.

    Each approval is requested once, decided once (approved or denied) and
    closed once (consumed or expired): a host trying to consume an approval
    another host consumed collides here, in the database, whatever either host
    believed (``sharedos.evidence.approvals``). ``IF NOT EXISTS``: the step may
    meet a table a migration already gave them.
    """
    return (
        "CREATE INDEX IF NOT EXISTS chain_approval ON chain (approval_id) WHERE kind = 'approval'",
        "CREATE UNIQUE INDEX IF NOT EXISTS chain_approval_requested ON chain (approval_id) "
        "WHERE kind = 'approval' AND event = 'requested'",
        "CREATE UNIQUE INDEX IF NOT EXISTS chain_approval_decided ON chain (approval_id) "
        "WHERE kind = 'approval' AND event IN ('approved', 'denied')",
        "CREATE UNIQUE INDEX IF NOT EXISTS chain_approval_closed ON chain (approval_id) "
        "WHERE kind = 'approval' AND event IN ('consumed', 'expired')",
    )


#: The unique indexes that make a second writer *collide* rather than write: two writers of
#: one turn on one position (``chain_place``), a second outcome of one attempt
#: (``chain_attempt``), an approval requested, decided or closed twice. Without one of them
#: nothing fails: the chain forks (or an approval is consumed twice) and only a later
#: ``verify`` says so. A writable open checks they are there (name -> the statement that
#: makes one again; ``missing_guards``).
GUARD_INDEXES: dict[str, str] = {
    stmt.split(" ON ")[0].split()[-1]: stmt
    for stmt in (
        *(
            s.replace("CREATE UNIQUE INDEX ", "CREATE UNIQUE INDEX IF NOT EXISTS ")
            for s in chain_indexes()
            if s.startswith("CREATE UNIQUE INDEX ")
        ),
        *(s for s in approval_indexes() if s.startswith("CREATE UNIQUE INDEX ")),
    )
}


def missing_guards(found: Iterable[tuple[str, bool]]) -> list[str]:
    """The ``GUARD_INDEXES`` a store lacks, given its indexes on ``chain`` as (name, unique
    and usable): absent, or there but not unique (or not valid)."""
    unique = {name for name, usable in found if usable}
    return [name for name in GUARD_INDEXES if name not in unique]


def approvals_step(dialect: Dialect, present: set[str], table_sql: str) -> tuple[str, ...]:
    """Schema 5 -> 6: let ``chain`` hold the kind ``approval`` (its columns are added by
    ``migrate.layout_step``, which runs after this).

    ``present``: the columns ``chain`` has; ``table_sql``: its ``CREATE`` text
    (SQLite) — a table whose kind check already names ``approval`` needs nothing
    but the indexes. PostgreSQL replaces the check in place. SQLite cannot
    change a check, so ``chain`` is rebuilt by SQLite's own procedure (the
    caller runs it with foreign keys off): a table of the new layout, every
    row copied with its ``seq`` and every column as stored (so every link
    keeps its hash), the old table dropped and the new one renamed; the views,
    dropped first, are made again by ``layout_step``.
    """
    if dialect == "postgresql":
        return (
            "ALTER TABLE chain DROP CONSTRAINT IF EXISTS chain_kind_check",
            f"ALTER TABLE chain ADD CONSTRAINT chain_kind_check CHECK (kind IN {KINDS_CHECK})",
            *add_columns_sql(present, dialect),
            *approval_indexes(),
        )
    if "'approval'" in table_sql:
        return (*add_columns_sql(present, dialect), *approval_indexes())
    columns = ", ".join(("seq", *(c for c in CHAIN_COLUMNS if c in present)))
    return (
        *(f"DROP VIEW IF EXISTS {view}" for view in reversed(VIEW_NAMES)),
        *table_ddl("sqlite", name="chain_v6"),
        f"INSERT INTO chain_v6 ({columns}) SELECT {columns} FROM chain ORDER BY seq",
        "DROP TABLE chain",
        "ALTER TABLE chain_v6 RENAME TO chain",
        *chain_indexes(),
        *approval_indexes(),
    )


def _select(columns: tuple[str, ...], alias: str = "") -> str:
    return ", ".join(f"{alias}{c} AS {c}" for c in columns)


def picked(columns: tuple[str, ...], missing: frozenset[str] = frozenset(), alias: str = "") -> str:
    """``alias.col`` for each column, ``NULL`` in place of the ``missing`` ones (a store
    read as it is at an older version, which lacks them: they read as null)."""
    return ", ".join("NULL" if c in missing else f"{alias}{c}" for c in columns)


def add_columns_sql(present: set[str], dialect: Dialect) -> tuple[str, ...]:
    """``ALTER TABLE`` statements adding every column of ``CHAIN_COLUMNS`` the table lacks
    (``present``: the columns it has). A migration step that checks for the columns it
    needs, so it is right whatever version brought the table to where it is."""
    return tuple(
        f"ALTER TABLE chain ADD COLUMN {c} {_type(c, dialect)}"
        for c in CHAIN_COLUMNS
        if c not in present
    )


_OUTCOME_COLUMNS = ("outcome", "reason", "finished_at", "duration_ms", "error")
#: the schema-3 names, as views over ``chain``
VIEWS: tuple[str, ...] = (
    "CREATE VIEW attempts AS SELECT seq, "
    + _select(ATTEMPT_FIELDS)
    + " FROM chain WHERE kind = 'attempt'",
    "CREATE VIEW outcomes AS SELECT attempt AS seq, "
    + _select(_OUTCOME_COLUMNS)
    + " FROM chain WHERE kind = 'outcome'",
    "CREATE VIEW turns AS SELECT turn_id, "
    + _select(("opened_at", "catalog_hash", "policy_hash", "policy_revision", "identity"))
    + " FROM chain WHERE kind = 'open'",
    "CREATE VIEW seals AS SELECT turn_id, pos, closed_at, links, key_id, signature "
    "FROM chain WHERE kind = 'seal'",
    "CREATE VIEW links AS SELECT turn_id, pos, kind, CASE kind WHEN 'attempt' THEN seq "
    "WHEN 'outcome' THEN attempt END AS seq, prev_hash, hash FROM chain",
    "CREATE VIEW evidence AS SELECT a.seq AS seq, "
    + _select(ATTEMPT_FIELDS, "a.")
    + ", "
    + _select(_OUTCOME_COLUMNS, "o.")
    + " FROM chain AS a LEFT JOIN chain AS o ON o.attempt = a.seq AND o.kind = 'outcome'"
    " WHERE a.kind = 'attempt'",
    # schema 6: each approval event, in its turn's chain (``sharedos.evidence.approvals``)
    "CREATE VIEW approvals AS SELECT seq, pos, "
    + _select(APPROVAL_FIELDS)
    + " FROM chain WHERE kind = 'approval'",
)


#: the names of ``VIEWS``, in order
VIEW_NAMES = ("attempts", "outcomes", "turns", "seals", "links", "evidence", "approvals")


def checkpoint_ddl(dialect: Dialect) -> tuple[str, ...]:
    """``CREATE`` statements of the store-wide checkpoints (``sharedos.evidence.checkpoint``)."""
    t = "TEXT" if dialect == "sqlite" else "text"
    n = "INTEGER" if dialect == "sqlite" else "bigint"
    return (
        f"""CREATE TABLE checkpoints (
    number      {n} PRIMARY KEY,
    store_id    {t} NOT NULL,
    taken_at    {t} NOT NULL,
    prev_hash   {t} NOT NULL,
    heads       {n} NOT NULL,
    heads_hash  {t} NOT NULL,
    key_id      {t},
    signature   {t},
    hash        {t} NOT NULL
)""",
        f"""CREATE TABLE checkpoint_heads (
    number      {n} NOT NULL,
    turn_id     {t} NOT NULL,
    pos         {n} NOT NULL,
    hash        {t} NOT NULL,
    PRIMARY KEY (number, turn_id)
)""",
        "CREATE INDEX checkpoint_heads_turn ON checkpoint_heads (turn_id, pos)",
    )


def guarded_insert_parts(kind: str) -> tuple[str, list[str]]:
    """PostgreSQL: ``INSERT INTO chain (columns)`` of ``kind`` and each column's placeholder,
    cast to the column's type, for an ``INSERT … SELECT`` (whose placeholders, unlike a
    ``VALUES`` list's, take no type from the columns they fill)."""
    columns = (*_LINK, *CONTENT_OF[kind])
    head = f"INSERT INTO chain ({', '.join(columns)})"
    return head, [f"%s::{_type(c, 'postgresql')}" for c in columns]


def insert_sql(kind: str, dialect: Dialect, *, returning: bool = False) -> str:
    """``INSERT`` of one row of ``kind`` (placeholders: the link's five values, then its content)."""
    columns = (*_LINK, *CONTENT_OF[kind])
    mark = "?" if dialect == "sqlite" else "%s"
    sql = f"INSERT INTO chain ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))})"
    return sql + (" RETURNING seq" if returning else "")


def reader_sql(missing: frozenset[str] = frozenset()) -> str:
    """The chain reader (``rows.link_from_row``): each row with the hash of the attempt an
    outcome concludes, ``missing`` columns read as null; callers add WHERE / ORDER BY."""
    return (
        "SELECT c.seq, "
        + picked(CHAIN_COLUMNS, missing, "c.")
        + ", aa.hash FROM chain c LEFT JOIN chain aa ON aa.seq = c.attempt AND aa.kind = 'attempt'"
    )


def chain_rows_sql(missing: frozenset[str] = frozenset()) -> str:
    """Every stored row as (seq, *``CHAIN_COLUMNS``) (``copy``); callers add WHERE / ORDER BY."""
    return f"SELECT seq, {picked(CHAIN_COLUMNS, missing)} FROM chain"


#: the chain reader of a table with every column (``reader_sql``)
READER_SQL = reader_sql()


# -- the lookups both stores make, in one shape (placeholders per dialect) ----------------

#: each turn's head past the furthest position its checkpoints covered
_UNCOVERED = (
    "SELECT c.turn_id, c.pos, c.hash FROM chain c JOIN (SELECT turn_id, max(pos) AS pos "
    "FROM chain GROUP BY turn_id) h ON h.turn_id = c.turn_id AND h.pos = c.pos "
    "LEFT JOIN (SELECT turn_id, max(pos) AS pos FROM checkpoint_heads GROUP BY turn_id) k "
    "ON k.turn_id = c.turn_id WHERE k.pos IS NULL OR k.pos < c.pos ORDER BY c.turn_id"
)
_LOOKUPS = {
    # the turn's last link (pos, hash)
    "head": "SELECT pos, hash FROM chain WHERE turn_id = {p} AND pos IS NOT NULL "
    "ORDER BY pos DESC LIMIT 1",
    # (turn_id, hash) of an attempt's link
    "attempt_link": "SELECT turn_id, hash FROM chain WHERE seq = {p} AND kind = 'attempt'",
    # (seq of the attempt a link is or concludes, hash) of a turn's link at a position
    "link_at": "SELECT CASE kind WHEN 'attempt' THEN seq WHEN 'outcome' THEN attempt END, "
    "hash FROM chain WHERE turn_id = {p} AND pos = {p}",
    # (number, hash) of the store's last checkpoint
    "last_checkpoint": "SELECT number, hash FROM checkpoints ORDER BY number DESC LIMIT 1",
    # the store's id
    "store_id": "SELECT value FROM meta WHERE key = 'store_id'",
    # checkpoints with their heads, in number order (one ordered join)
    "checkpoint_rows": "SELECT c.number, c.store_id, c.taken_at, c.prev_hash, c.heads, "
    "c.heads_hash, c.key_id, c.signature, c.hash, k.turn_id, k.pos, k.hash FROM checkpoints c "
    "LEFT JOIN checkpoint_heads k ON k.number = c.number ORDER BY c.number, k.turn_id",
    # each turn's head not yet covered by a checkpoint (PostgreSQL orders ids bytewise,
    # as SQLite does)
    "uncovered": _UNCOVERED + "{collate}",
}


def lookup_sql(name: str, dialect: Dialect) -> str:
    """The shared lookup ``name`` (``head``, ``attempt_link``, ``link_at``,
    ``last_checkpoint``, ``store_id``, ``checkpoint_rows``, ``uncovered``) with ``dialect``'s placeholders: the statements the SQLite and
    PostgreSQL stores both run, written once."""
    mark = "?" if dialect == "sqlite" else "%s"
    collate = "" if dialect == "sqlite" else ' COLLATE "C"'
    return _LOOKUPS[name].replace("{p}", mark).replace("{collate}", collate)


# -- the approval events both stores read, in one shape ----------------------------------


def approval_rows_sql(
    dialect: Dialect, *, by_turn: bool, by_approval: bool, by_digest: bool = False
) -> str:
    """The chain's approval events as (seq, pos, ``APPROVAL_FIELDS``...), each turn's in
    chain order; a placeholder for the turn id, then one for the approval id, then one for
    the arguments digest, where asked."""
    mark = "?" if dialect == "sqlite" else "%s"
    collate = "" if dialect == "sqlite" else ' COLLATE "C"'
    where = ["kind = 'approval'"]
    where += [
        f"{column} = {mark}"
        for column, on in (
            ("turn_id", by_turn),
            ("approval_id", by_approval),
            ("arguments_digest", by_digest),
        )
        if on
    ]
    return (
        f"SELECT seq, pos, {', '.join(APPROVAL_FIELDS)} FROM chain "
        f"WHERE {' AND '.join(where)} ORDER BY turn_id{collate}, pos, seq"
    )


def require_approvals(schema_version: int, shown: str) -> None:
    """Raise ``EvidenceStoreError`` (cause ``io``) unless a store at ``schema_version``
    keeps approvals (schema 6 and later); ``shown`` names the database in the message."""
    if schema_version < 6:
        raise EvidenceStoreError(
            f"evidence database {shown} has schema version {schema_version}, "
            "which keeps no approvals: run `sharedos evidence migrate` first",
            "io",
        )


def approval_row(row: Sequence[Any]) -> tuple[int, int | None, list[Any]]:
    """One row of ``approval_rows_sql`` as (seq, pos, values in ``APPROVAL_FIELDS`` order)."""
    return (int(row[0]), int(row[1]) if row[1] is not None else None, list(row[2:]))


# -- what the readers read: the rows of ``chain``, never the views ----------------------
#
# The views (``VIEWS``) are for auditors' own queries. The stores' readers (list, export,
# counts, turns, replay, shadow) read ``chain`` itself: a view is only a statement kept in
# the database, which whoever can write the database can redefine (a denied call shown
# as succeeded, a call left out) without touching a row, a link or a checkpoint that
# ``verify`` checks. Stores before schema 4 have no ``chain`` and are read as they are.


def _as(columns: tuple[str, ...], missing: frozenset[str], alias: str = "") -> str:
    return ", ".join(f"NULL AS {c}" if c in missing else f"{alias}{c} AS {c}" for c in columns)


def attempts_source(missing: frozenset[str] = frozenset(), *, chained: bool = True) -> str:
    """What the readers read as ``attempts`` (``seq`` and ``ATTEMPT_FIELDS``; ``missing``
    ones as null): at schema 4 and later the attempt rows of ``chain``, as a subquery."""
    if not chained:
        return "attempts"
    return f"(SELECT seq, {_as(ATTEMPT_FIELDS, missing)} FROM chain WHERE kind = 'attempt')"


def outcomes_source(*, chained: bool = True) -> str:
    """What the readers read as ``outcomes`` (``seq`` of the attempt, the outcome columns)."""
    if not chained:
        return "outcomes"
    return f"(SELECT attempt AS seq, {_select(_OUTCOME_COLUMNS)} FROM chain WHERE kind = 'outcome')"


def evidence_source(missing: frozenset[str] = frozenset(), *, chained: bool = True) -> str:
    """What the readers read as ``evidence`` (each attempt with its outcome's columns)."""
    if not chained:
        return "evidence"
    return (
        f"(SELECT a.seq AS seq, {_as(ATTEMPT_FIELDS, missing, 'a.')}, "
        f"{_select(_OUTCOME_COLUMNS, 'o.')} FROM chain AS a LEFT JOIN chain AS o "
        "ON o.attempt = a.seq AND o.kind = 'outcome' WHERE a.kind = 'attempt')"
    )


# -- the counts both stores make, in one shape ------------------------------------------

#: (status, reason, attempts) per pair: an attempt without an outcome is ``interrupted``
_COUNTS = (
    f"SELECT COALESCE(outcome, '{INTERRUPTED}'), COALESCE(reason, outcome, '{INTERRUPTED}'), "
    "COUNT(*) FROM {source} AS evidence{where} GROUP BY 1, 2"
)
#: each attempt's turn, outcome and reason, from ``chain`` (what the counts read)
_COUNTED = (
    "(SELECT a.turn_id AS turn_id, o.outcome AS outcome, o.reason AS reason FROM chain AS a "
    "LEFT JOIN chain AS o ON o.attempt = a.seq AND o.kind = 'outcome' WHERE a.kind = 'attempt')"
)
#: turn ids with their number of attempts, in order of first appearance (no placeholders)
TURNS_SQL = (
    "SELECT turn_id, COUNT(*) FROM chain WHERE kind = 'attempt' GROUP BY turn_id ORDER BY MIN(seq)"
)
#: the same over a store before schema 4
TURNS_SQL_BEFORE_4 = "SELECT turn_id, COUNT(*) FROM attempts GROUP BY turn_id ORDER BY MIN(seq)"


def counts_sql(dialect: Dialect, *, one_turn: bool, chained: bool = True) -> str:
    """The counts statement (``fold_counts`` reads its rows), over every attempt or, with
    ``one_turn``, over one turn's (one placeholder: the turn id); read from ``chain``
    unless the store is older than schema 4 (``chained`` false)."""
    mark = "?" if dialect == "sqlite" else "%s"
    return _COUNTS.replace("{source}", _COUNTED if chained else "evidence").replace(
        "{where}", f" WHERE turn_id = {mark}" if one_turn else ""
    )


def heads_of(rows: Iterable[Sequence[Any]]) -> list[tuple[str, int, str]]:
    """The (turn_id, pos, hash) heads the ``uncovered`` lookup read, each as SharedOS wrote
    it; ``EvidenceStoreError`` naming the turns whose head is not (SQLite keeps whatever it
    is given: a position that is text, a turn id or hash that is bytes): a checkpoint
    over them would record heads no chain has (said, exit 1, never a ``ValueError``)."""
    from sharedos.evidence.store import EvidenceStoreError

    heads: list[tuple[str, int, str]] = []
    bad: list[str] = []
    for turn, pos, hash_ in rows:
        if type(turn) is str and type(pos) is int and type(hash_) is str:
            heads.append((turn, pos, hash_))
        elif len(bad) < 5:
            bad.append(repr(turn))
        else:
            bad.append("…")
            break
    if bad:
        raise EvidenceStoreError(
            "cannot checkpoint the head of turn(s) "
            + ", ".join(bad)
            + ": its position, id or hash is not what SharedOS writes (the store was changed "
            "outside SharedOS; `sharedos evidence verify` says what)",
            "io",
        )
    return heads


def fold_counts(rows: Iterable[Sequence[Any]]) -> EvidenceCounts:
    """``EvidenceCounts`` from the rows of ``counts_sql``: totals by status and by reason,
    each keyed in sorted order.

    A status or reason that is not text (SQLite keeps the bytes it is given: the store
    changed outside SharedOS) is an ``EvidenceStoreError`` saying so, as every other
    reader says it (``sharedos.evidence.rows.record_from_row``), never a ``TypeError``
    from sorting bytes among text."""
    from sharedos.evidence.store import EvidenceStoreError

    by_outcome: dict[str, int] = {}
    by_reason: dict[str, int] = {}
    for status, reason, n in rows:
        if not isinstance(status, str) or not isinstance(reason, str):
            raise EvidenceStoreError(
                f"cannot count an attempt whose outcome or reason is {status!r}, {reason!r}: "
                "bytes where SharedOS stores text (a value SharedOS never writes: the store "
                "was changed outside SharedOS; `sharedos evidence verify` says what)",
                "io",
            )
        by_outcome[status] = by_outcome.get(status, 0) + int(n)
        by_reason[reason] = by_reason.get(reason, 0) + int(n)
    return EvidenceCounts(
        total=sum(by_outcome.values()),
        by_outcome=dict(sorted(by_outcome.items())),
        by_reason=dict(sorted(by_reason.items())),
    )


# -- the checkpoint write, in one shape --------------------------------------------------

#: the stored columns of a checkpoint, in the order ``checkpoint_values`` gives them
CHECKPOINT_COLUMNS = (
    "number",
    "store_id",
    "taken_at",
    "prev_hash",
    "heads",
    "heads_hash",
    "key_id",
    "signature",
    "hash",
)
_HEADS_INSERT = "INSERT INTO checkpoint_heads (number, turn_id, pos, hash)"


def checkpoint_insert_sql(dialect: Dialect) -> str:
    """``INSERT`` of one checkpoint row (placeholders: ``checkpoint_values``)."""
    mark = "?" if dialect == "sqlite" else "%s"
    marks = ", ".join([mark] * len(CHECKPOINT_COLUMNS))
    return f"INSERT INTO checkpoints ({', '.join(CHECKPOINT_COLUMNS)}) VALUES ({marks})"


def checkpoint_heads_sql(dialect: Dialect) -> str:
    """``INSERT`` of a checkpoint's heads. SQLite: one head per execution (``executemany``
    with ``(number, turn_id, pos, hash)``); PostgreSQL: every head in one statement
    (placeholders: the number, then arrays of turn ids, positions and hashes)."""
    if dialect == "sqlite":
        return f"{_HEADS_INSERT} VALUES (?, ?, ?, ?)"
    return (
        f"{_HEADS_INSERT} "
        "SELECT %s, t, p, h FROM unnest(%s::text[], %s::bigint[], %s::text[]) AS u (t, p, h)"
    )


def checkpoint_values(cp: Checkpoint) -> tuple[Any, ...]:
    """The values of ``cp`` for ``checkpoint_insert_sql``, in ``CHECKPOINT_COLUMNS`` order."""
    return (
        cp.number,
        cp.store_id,
        cp.taken_at,
        cp.prev,
        cp.heads,
        cp.heads_hash,
        cp.key_id,
        cp.signature,
        cp.hash,
    )
