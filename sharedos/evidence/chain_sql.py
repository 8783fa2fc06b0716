"""Schemas 4 and 5, for both stores: every row of every turn in one table, ``chain``, with its link.

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

Schema 5 adds the kind ``approval`` (an approval event, with its own
columns ``V5_COLUMNS``) and the unique indexes that let an approval be
requested, decided and closed once each (``approval_indexes``).
"""

from __future__ import annotations

from typing import Literal

from sharedos.evidence.chain import APPROVAL_FIELDS, ATTEMPT_FIELDS

__all__ = [
    "CHAIN_COLUMNS",
    "CHAIN_COLUMNS_V4",
    "CONTENT_OF",
    "READER_SQL",
    "V5_COLUMNS",
    "VIEWS",
    "Dialect",
    "approval_indexes",
    "chain_indexes",
    "checkpoint_ddl",
    "insert_sql",
    "reader_sql",
    "table_ddl",
    "v4_to_v5",
]

Dialect = Literal["sqlite", "postgresql"]

OUTCOMES = "('succeeded','denied','failed','cancelled')"
#: an approval's events (schema 5)
EVENTS = "('requested','approved','denied','expired','consumed')"
KINDS_CHECK = "('open','attempt','outcome','seal','approval')"
#: the kinds of schema 4 (what a store not yet migrated to 5 holds)
KINDS_CHECK_V4 = "('open','attempt','outcome','seal')"

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
#: the columns schema 5 added (an approval event's own fields)
V5_COLUMNS: tuple[str, ...] = tuple(
    c
    for c in APPROVAL_FIELDS[1:]
    if c not in {c2 for k, cs in CONTENT_OF.items() if k != "approval" for c2 in cs}
)
#: every column of schema 4, in its table order
CHAIN_COLUMNS_V4: tuple[str, ...] = tuple(c for c in CHAIN_COLUMNS if c not in V5_COLUMNS)
_INTEGER = frozenset({"pos", "attempt", "links"})


def _type(column: str, dialect: Dialect) -> str:
    if column in _INTEGER:
        return "INTEGER" if dialect == "sqlite" else "bigint"
    if column == "duration_ms":
        return "REAL" if dialect == "sqlite" else "double precision"
    return "TEXT" if dialect == "sqlite" else "text"


def table_ddl(dialect: Dialect, *, version: int = 5, name: str = "chain") -> tuple[str, ...]:
    """``CREATE`` statements of ``chain`` (as of schema ``version``: 4 or 5) and its indexes.

    ``name`` other than ``chain`` creates the table alone under that name (a
    migration copies into it, then renames it).
    """
    seq = "seq INTEGER PRIMARY KEY" if dialect == "sqlite" else "seq bigserial PRIMARY KEY"
    cols = [seq]
    for column in CHAIN_COLUMNS if version >= 5 else CHAIN_COLUMNS_V4:
        decl = f"{column} {_type(column, dialect)}"
        if column in ("turn_id", "kind", "prev_hash", "hash"):
            decl += " NOT NULL"
        if column == "kind":
            decl += f" CHECK (kind IN {KINDS_CHECK if version >= 5 else KINDS_CHECK_V4})"
        elif column == "outcome":
            decl += f" CHECK (outcome IN {OUTCOMES})"
        elif column == "event":
            decl += f" CHECK (event IN {EVENTS})"
        elif column == "attempt":
            decl += " REFERENCES chain (seq)"
        cols.append(decl)
    table = f"CREATE TABLE {name} (\n    " + ",\n    ".join(cols) + "\n)"
    if name != "chain":
        return (table,)
    return (
        table,
        *chain_indexes(),
        *(approval_indexes() if version >= 5 else ()),
    )


def chain_indexes() -> tuple[str, ...]:
    """The indexes of ``chain`` since schema 4."""
    return (
        # pos is NULL only for rows a migration found outside every chain (so many may)
        "CREATE UNIQUE INDEX chain_place ON chain (turn_id, pos)",
        "CREATE UNIQUE INDEX chain_attempt ON chain (attempt) WHERE attempt IS NOT NULL",
        "CREATE INDEX chain_call ON chain (call_id) WHERE kind = 'attempt'",
    )


def approval_indexes() -> tuple[str, ...]:
    """Schema 5: what makes an approval's life one-way in any number of hosts.

    Each approval is requested once, decided once (approved or denied) and
    closed once (consumed or expired): a second host trying to consume an
    approval another host consumed collides here, in the database, whatever
    either host believed (``sharedos.evidence.approvals``).
    """
    return (
        "CREATE INDEX chain_approval ON chain (approval_id) WHERE kind = 'approval'",
        "CREATE UNIQUE INDEX chain_approval_requested ON chain (approval_id) "
        "WHERE kind = 'approval' AND event = 'requested'",
        "CREATE UNIQUE INDEX chain_approval_decided ON chain (approval_id) "
        "WHERE kind = 'approval' AND event IN ('approved', 'denied')",
        "CREATE UNIQUE INDEX chain_approval_closed ON chain (approval_id) "
        "WHERE kind = 'approval' AND event IN ('consumed', 'expired')",
    )


def _select(columns: tuple[str, ...], alias: str = "") -> str:
    return ", ".join(f"{alias}{c} AS {c}" for c in columns)


_OUTCOME_COLUMNS = ("outcome", "reason", "finished_at", "duration_ms", "error")
_VIEW_NAMES = ("evidence", "links", "seals", "turns", "outcomes", "attempts")
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
)


def v4_to_v5(dialect: Dialect) -> tuple[str, ...]:
    """The statements that turn a version-4 store into a version-5 one (in one transaction).

    PostgreSQL widens the kind check and adds the columns in place. SQLite
    cannot change a check constraint, so ``chain`` is rebuilt: copied, every
    row with its ``seq`` and every column as stored (so every link keeps its
    hash), into a table of the new layout that then takes its name; the views
    are dropped and made again around it. The caller runs it with foreign
    keys off (SQLite's own procedure for a table rebuild).
    """
    if dialect == "postgresql":
        return (
            "ALTER TABLE chain DROP CONSTRAINT chain_kind_check",
            f"ALTER TABLE chain ADD CONSTRAINT chain_kind_check CHECK (kind IN {KINDS_CHECK})",
            *(
                f"ALTER TABLE chain ADD COLUMN {column} text"
                + (f" CHECK (event IN {EVENTS})" if column == "event" else "")
                for column in V5_COLUMNS
            ),
            *approval_indexes(),
        )
    columns = ", ".join(("seq", *CHAIN_COLUMNS_V4))
    return (
        *table_ddl("sqlite", name="chain_v5"),
        f"INSERT INTO chain_v5 ({columns}) SELECT {columns} FROM chain ORDER BY seq",
        *(f"DROP VIEW {view}" for view in _VIEW_NAMES),
        "DROP TABLE chain",
        "ALTER TABLE chain_v5 RENAME TO chain",
        *chain_indexes(),
        *approval_indexes(),
        *VIEWS,
    )


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


def insert_sql(kind: str, dialect: Dialect, *, returning: bool = False) -> str:
    """``INSERT`` of one row of ``kind`` (placeholders: the link's five values, then its content)."""
    columns = (*_LINK, *CONTENT_OF[kind])
    mark = "?" if dialect == "sqlite" else "%s"
    sql = f"INSERT INTO chain ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))})"
    return sql + (" RETURNING seq" if returning else "")


def reader_sql(version: int = 5) -> str:
    """The chain reader of a store at schema ``version`` (4 or 5): ``READER_SQL``'s columns,
    the ones schema 4 lacks read as NULL."""
    have = CHAIN_COLUMNS if version >= 5 else CHAIN_COLUMNS_V4
    return (
        "SELECT c.seq, "
        + ", ".join(f"c.{col}" if col in have else f"NULL AS {col}" for col in CHAIN_COLUMNS)
        + ", aa.hash FROM chain c LEFT JOIN chain aa ON aa.seq = c.attempt AND aa.kind = 'attempt'"
    )


#: the chain reader (``rows.link_from_row``): each row with the hash of the attempt an
#: outcome concludes; callers add WHERE / ORDER BY
READER_SQL = reader_sql()
