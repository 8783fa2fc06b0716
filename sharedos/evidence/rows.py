"""Rows as the stores write them: the stored form of a record's fields, and the chain reader's row layout.

Both backends store the same values (JSON columns as compact ASCII JSON
text), so a record has the same link hash in either. ``pg_text`` is the one
difference: PostgreSQL ``text`` cannot hold NUL or lone surrogates, so those
are written backslash-escaped (``\\x00``, ``\\ud800``) — before the hash is
computed, so what is stored is what is hashed.
"""

from __future__ import annotations

import json
from typing import Any

from sharedos.evidence.chain import ATTEMPT_FIELDS, OPEN_FIELDS, SEAL_FIELDS, Link
from sharedos.evidence.record import EvidenceRecord, encoded_text, storable_json_text

__all__ = [
    "JSON_FIELDS",
    "READER_COLUMNS",
    "dumps",
    "link_from_row",
    "pg_attempt_values",
    "pg_text",
    "plain_attempt_values",
    "sqlite_attempt_values",
    "sqlite_text",
]

JSON_FIELDS = frozenset({"arguments", "rule_ids", "diagnostics", "identity"})
_JSON_INDEXES = tuple(i for i, f in enumerate(ATTEMPT_FIELDS) if f in JSON_FIELDS)
_RULE_IDS = ATTEMPT_FIELDS.index("rule_ids")


def dumps(value: Any) -> str | None:
    """The stored JSON text of a column value (None stays NULL); never raises."""
    if value is None:
        return None
    text = encoded_text(value)  # encoded once on the call path (compact, ASCII-safe)
    if text is not None:
        return text
    try:
        return str(storable_json_text(value))
    except Exception:  # too deep or hostile: the record is still written
        return json.dumps({"$unstorable": type(value).__name__})


def pg_text(value: str | None) -> str | None:
    """``value`` as PostgreSQL ``text`` can hold it: NUL and lone surrogates backslash-escaped."""
    if value is None or (value.isascii() and "\x00" not in value):
        return value
    if "\x00" in value:
        value = value.replace("\x00", "\\x00")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def sqlite_text(value: str | None) -> str | None:
    """``value`` as SQLite TEXT (UTF-8) can hold it: lone surrogates backslash-escaped."""
    if value is None or value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def sqlite_attempt_values(record: EvidenceRecord) -> list[Any]:
    """``plain_attempt_values`` with every text made storable in SQLite."""
    row = plain_attempt_values(record)
    for i, value in enumerate(row):
        if type(value) is str and not value.isascii():
            row[i] = sqlite_text(value)
    return row


def plain_attempt_values(record: EvidenceRecord) -> list[Any]:
    """The stored attempt fields of ``record`` in ``ATTEMPT_FIELDS`` order (JSON columns as text)."""
    row: list[Any] = [getattr(record, name) for name in ATTEMPT_FIELDS]
    row[_RULE_IDS] = list(row[_RULE_IDS])
    for i in _JSON_INDEXES:
        row[i] = dumps(row[i])
    return row


def pg_attempt_values(record: EvidenceRecord) -> list[Any]:
    """``plain_attempt_values`` with every text made storable in PostgreSQL."""
    row = plain_attempt_values(record)
    for i, value in enumerate(row):
        if type(value) is str:
            row[i] = pg_text(value)
    return row


#: the chain reader's SELECT list (both backends); ``link_from_row`` reads it back
READER_COLUMNS = (
    "l.turn_id, l.pos, l.kind, l.seq, l.prev_hash, l.hash, "
    + ", ".join(f"t.{c}" for c in OPEN_FIELDS)
    + ", a.seq, "
    + ", ".join(f"a.{c}" for c in ATTEMPT_FIELDS)
    + ", o.seq, aa.hash, o.outcome, o.reason, o.finished_at, o.duration_ms, o.error, "
    + ", ".join(f"s.{c}" for c in SEAL_FIELDS)
    + ", s.signature"
)
READER_FROM = (
    " FROM links l"
    " LEFT JOIN turns t ON l.kind = 'open' AND t.turn_id = l.turn_id"
    " LEFT JOIN attempts a ON l.kind = 'attempt' AND a.seq = l.seq"
    " LEFT JOIN outcomes o ON l.kind = 'outcome' AND o.seq = l.seq"
    " LEFT JOIN links aa ON l.kind = 'outcome' AND aa.kind = 'attempt' AND aa.seq = l.seq"
    " LEFT JOIN seals s ON l.kind = 'seal' AND s.turn_id = l.turn_id AND s.pos = l.pos"
)
_O = 6
_A = _O + len(OPEN_FIELDS)
_OUT = _A + 1 + len(ATTEMPT_FIELDS)
_S = _OUT + 7


def link_from_row(row: tuple[Any, ...]) -> Link:
    """A ``Link`` from one row of ``SELECT READER_COLUMNS READER_FROM``."""
    turn_id, pos, kind, seq, prev, hash_ = row[:6]
    values: tuple[Any, ...] | None = None
    signature = None
    if kind == "open" and row[_O] is not None:
        values = tuple(row[_O:_A])
    elif kind == "attempt" and row[_A] is not None:
        values = tuple(row[_A + 1 : _OUT])
    elif kind == "outcome" and row[_OUT] is not None:
        values = tuple(row[_OUT + 1 : _S])
        values = (*values[:4], float(values[4]) if values[4] is not None else None, values[5])
    elif kind == "seal" and row[_S] is not None:
        values = tuple(row[_S : _S + len(SEAL_FIELDS)])
        signature = row[_S + len(SEAL_FIELDS)]
    return Link(
        turn_id=str(turn_id),
        pos=int(pos),
        kind=str(kind),
        seq=int(seq) if seq is not None else None,
        prev=str(prev),
        hash=str(hash_),
        values=values,
        signature=signature,
    )


#: content rows with no link (the chain reader lists them as inserted): turn, kind, seq
UNLINKED_SQL = (
    "SELECT a.turn_id, 'attempt', a.seq FROM attempts a WHERE NOT EXISTS "
    "(SELECT 1 FROM links l WHERE l.kind = 'attempt' AND l.seq = a.seq) "
    "UNION ALL SELECT a.turn_id, 'outcome', o.seq FROM outcomes o "
    "LEFT JOIN attempts a ON a.seq = o.seq WHERE NOT EXISTS "
    "(SELECT 1 FROM links l WHERE l.kind = 'outcome' AND l.seq = o.seq) "
    "UNION ALL SELECT t.turn_id, 'open', NULL FROM turns t WHERE NOT EXISTS "
    "(SELECT 1 FROM links l WHERE l.kind = 'open' AND l.turn_id = t.turn_id) "
    "UNION ALL SELECT s.turn_id, 'seal', NULL FROM seals s WHERE NOT EXISTS "
    "(SELECT 1 FROM links l WHERE l.kind = 'seal' AND l.turn_id = s.turn_id AND l.pos = s.pos)"
)


def unlinked(turn_id: Any, kind: str, seq: Any) -> Link:
    """A content row without a link, as a ``Link`` with ``pos == -1``."""
    return Link(
        turn_id=str(turn_id) if turn_id is not None else "?",
        pos=-1,
        kind=kind,
        seq=int(seq) if seq is not None else None,
        prev="",
        hash="",
        values=None,
    )
