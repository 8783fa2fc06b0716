"""Rows as the stores write them: the stored form of a record's fields, and the chain reader's row layout.

Both backends store the same values (JSON columns as compact ASCII JSON
text), so a record has the same link hash in either. ``pg_text`` is the one
difference: PostgreSQL ``text`` cannot hold NUL or lone surrogates, so those
are written backslash-escaped (``\\x00``, ``\\ud800``) — before the hash is
computed, so what is stored is what is hashed.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from typing import Any

from sharedos.evidence.chain import ATTEMPT_FIELDS, Link
from sharedos.evidence.chain_sql import CHAIN_COLUMNS, CONTENT_OF
from sharedos.evidence.record import EncodedJson, EvidenceRecord, storable_json_text

__all__ = [
    "JSON_FIELDS",
    "dumps",
    "link_from_row",
    "pg_attempt_values",
    "pg_text",
    "plain_attempt_values",
    "record_from_row",
    "sqlite_attempt_values",
    "sqlite_text",
]

JSON_FIELDS = frozenset({"arguments", "rule_ids", "diagnostics", "identity", "context", "shadow"})
_JSON_INDEXES = tuple(i for i, f in enumerate(ATTEMPT_FIELDS) if f in JSON_FIELDS)
_RULE_IDS = ATTEMPT_FIELDS.index("rule_ids")
_ATTEMPT_GETTER = operator.attrgetter(*ATTEMPT_FIELDS)  # one C call for every field


def record_from_row(names: Sequence[str], row: Sequence[Any], store: str) -> EvidenceRecord:
    """The record a stored row holds (``names``: its columns, ``seq`` among them; JSON
    columns decoded).

    A value SharedOS never writes (JSON that does not parse, a reason no SharedOS has,
    bytes where text belongs: the store changed outside SharedOS, or damaged) is an
    ``EvidenceStoreError`` naming the record and the column: every reader (``list``,
    ``export``, ``replay``, ``shadow``) says it in one line, never with a traceback.
    """
    from sharedos.evidence.store import EvidenceStoreError

    data: dict[str, Any] = {}
    column = ""
    try:
        for column, value in zip(names, row, strict=True):
            if isinstance(value, (bytes, memoryview)):
                raise ValueError("bytes where SharedOS stores text")
            data[column] = (
                json.loads(value) if column in JSON_FIELDS and value is not None else value
            )
        column = ""
        return EvidenceRecord.from_dict(data)
    except (ValueError, TypeError) as exc:
        seq = data.get("seq", row[0] if row and names and names[0] == "seq" else "?")
        where = f", column {column}" if column else ""
        raise EvidenceStoreError(
            f"cannot read record {seq} of {store}{where}: {exc} (a value SharedOS never "
            "writes: the store was changed outside SharedOS; `sharedos evidence verify` "
            "says what)",
            "io",
        ) from None


def dumps(value: Any) -> str | None:
    """The stored JSON text of a column value (None stays NULL); never raises."""
    if value is None:
        return None
    if type(value) is EncodedJson and value.text:
        return value.text  # encoded once on the call path (compact, storable)
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
    row: list[Any] = list(_ATTEMPT_GETTER(record))
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


_COL = {name: i + 1 for i, name in enumerate(CHAIN_COLUMNS)}  # row[0] is seq
_AT = {kind: tuple(_COL[c] for c in cols) for kind, cols in CONTENT_OF.items()}
_OF = len(CHAIN_COLUMNS) + 1  # the concluded attempt's hash (READER_SQL's last column)
_SEAL_SIGNATURE = _COL["signature"]


def _number(value: Any) -> Any:
    """A stored number as the chain hashes it; a value that is no number (SQLite keeps
    whatever it is given) as it is, so its link is reported edited, not a crash."""
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def _integer(value: Any) -> int | None:
    """A stored position or seq; None when it is none or is not an integer (SQLite keeps
    whatever it is given): a REAL such as 2.5, or one past 2**63 (``9223372036854775808``
    is kept as a REAL) or infinite, is no position SharedOS wrote, so its link is
    reported, never read as the integer it rounds to (2.5 verified clean as position 2)
    nor a crash (``int(inf)``: OverflowError)."""
    return value if type(value) is int else None


def link_from_row(row: Sequence[Any]) -> Link:
    """A ``Link`` from one row of ``chain_sql.READER_SQL``.

    A row outside every chain (``pos`` NULL: what a migration found without a
    link) is a ``Link`` with ``pos == -1``, which ``verify_turn`` reports as inserted.
    """
    seq, turn_id, pos, kind, prev, hash_ = (
        row[0],
        row[_COL["turn_id"]],
        row[_COL["pos"]],
        row[_COL["kind"]],
        row[_COL["prev_hash"]],
        row[_COL["hash"]],
    )
    content = tuple(row[i] for i in _AT.get(kind, ()))
    signature = None
    link_seq = seq
    if kind == "open":
        values: tuple[Any, ...] | None = (turn_id, *content)
        link_seq = None
    elif kind == "attempt":
        values = (turn_id, *content)
    elif kind == "outcome":
        link_seq = content[0]
        duration = content[4]
        values = (
            row[_OF],
            *content[1:4],
            _number(duration),
            content[5],
        )
    elif kind == "seal":
        values = (turn_id, *content[:3])
        signature = content[3]
        link_seq = None
    elif kind == "approval":
        values = (turn_id, *content)
        link_seq = None
    else:
        values = None
    place = _integer(pos)
    return Link(
        turn_id=str(turn_id),
        pos=place if place is not None else -1,
        kind=str(kind),
        seq=_integer(link_seq),
        prev=str(prev),
        hash=str(hash_),
        values=values,
        signature=signature,
    )
