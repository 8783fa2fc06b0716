"""The PostgreSQL evidence schema, version by version (applied by ``sharedos.evidence.migrate``).

Versions match the SQLite store's, so "schema 3" means the same tables on
either backend:

* **2** — ``attempts`` (one row committed before a handler runs; ``seq``
  bigserial), ``outcomes`` (one row per concluded attempt, primary key and
  foreign key ``seq``), ``meta``, and the view ``evidence`` = ``attempts LEFT
  JOIN outcomes`` (what auditors query).
* **3** — the chain (``sharedos.evidence.chain``): ``turns`` (each turn's
  opening record), ``links`` (one per row of a turn: ``(turn_id, pos)``
  primary key, kind, seq, prev_hash, hash) and ``seals`` (each turn's closing
  head, with its signature). Rows written at version 2 are chained by the
  migration, in ``seq`` order, each outcome after its attempt.
* **4** — one table ``chain`` (each row with its own link) and views named as
  the version-3 tables; ``checkpoints`` (``sharedos.evidence.chain_sql``;
  the step is ``sharedos.evidence.migrate.v3_to_v4``). ``FRESH`` creates it
  in an empty database at once.
* **5** — the attempt's ``shadow`` decision: a column of ``chain`` and the
  views made again (``sharedos.evidence.migrate.layout_step``, which adds
  whatever column ``chain`` lacks and keeps the views' grants).
* **6** — approvals: the chain kind ``approval``, its columns, the
  ``approvals`` view and the unique indexes that let each approval be
  requested, decided and closed once (``sharedos.evidence.chain_sql.
  approvals_step``, then ``layout_step``).

Text everywhere a value is hashed (timestamps, JSON): the chain hashes what
is stored, and ``text`` is stored exactly as written.
"""

from __future__ import annotations

from sharedos.evidence.chain import ATTEMPT_FIELDS
from sharedos.evidence.chain_sql import VIEWS, checkpoint_ddl, table_ddl

LATEST = 6

_OUTCOME_COLUMNS = ("outcome", "reason", "finished_at", "duration_ms", "error")

V2 = (
    "CREATE TABLE IF NOT EXISTS meta (key text PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE attempts (
    seq              bigserial PRIMARY KEY,
    turn_id          text NOT NULL,
    call_id          text NOT NULL,
    tool             text NOT NULL,
    started_at       text NOT NULL,
    arguments_digest text NOT NULL,
    arguments        text,
    effect           text,
    resource         text,
    namespace        text,
    action           text,
    rule_ids         text NOT NULL DEFAULT '[]',
    catalog_hash     text,
    policy_hash      text,
    principal        text,
    tenant           text,
    diagnostics      text,
    identity         text
)""",
    """CREATE TABLE outcomes (
    seq              bigint PRIMARY KEY REFERENCES attempts (seq),
    outcome          text NOT NULL CHECK (outcome IN ('succeeded','denied','failed','cancelled')),
    reason           text,
    finished_at      text NOT NULL,
    duration_ms      double precision NOT NULL,
    error            text
)""",
    "CREATE INDEX attempts_turn ON attempts (turn_id, seq)",
    "CREATE INDEX attempts_call ON attempts (call_id)",
    "CREATE VIEW evidence AS SELECT a.seq AS seq, "
    + ", ".join(f"a.{c} AS {c}" for c in ATTEMPT_FIELDS if c not in ("context", "shadow"))
    + ", "
    + ", ".join(f"o.{c} AS {c}" for c in _OUTCOME_COLUMNS)
    + " FROM attempts AS a LEFT JOIN outcomes AS o ON o.seq = a.seq",
)

V3 = (
    """CREATE TABLE turns (
    turn_id          text PRIMARY KEY,
    opened_at        text NOT NULL,
    catalog_hash     text,
    policy_hash      text,
    policy_revision  text,
    identity         text
)""",
    """CREATE TABLE links (
    turn_id          text NOT NULL,
    pos              integer NOT NULL,
    kind             text NOT NULL CHECK (kind IN ('open','attempt','outcome','seal')),
    seq              bigint,
    prev_hash        text NOT NULL,
    hash             text NOT NULL,
    PRIMARY KEY (turn_id, pos)
)""",
    "CREATE INDEX links_seq ON links (seq, kind)",
    """CREATE TABLE seals (
    turn_id          text NOT NULL,
    pos              integer NOT NULL,
    closed_at        text NOT NULL,
    links            integer NOT NULL,
    key_id           text,
    signature        text,
    PRIMARY KEY (turn_id, pos)
)""",
)

#: statements per target version up to 3 (applied in order, each version in one transaction)
STEPS: dict[int, tuple[str, ...]] = {2: V2, 3: V3}
#: an empty database, straight to the latest version
FRESH = (
    "CREATE TABLE IF NOT EXISTS meta (key text PRIMARY KEY, value text NOT NULL)",
    *table_ddl("postgresql"),
    *VIEWS,
    *checkpoint_ddl("postgresql"),
)
