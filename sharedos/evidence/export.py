"""Streaming export of evidence for the tools auditors use: JSON Lines and CSV.

``iter_records(store)`` reads through the backend's streaming cursor
(PostgreSQL: a server-side cursor; SQLite: the cursor itself, batch by
batch), so an export of any size holds one batch of records in memory.
``write_jsonl`` writes one ``EvidenceRecord.to_dict()`` per line, exactly.
``write_csv`` writes one row per attempt with the ``CSV_COLUMNS`` header;
JSON-valued fields are JSON text, and a cell that a spreadsheet would read
as a formula (starting with ``=``, ``+``, ``-``, ``@``, tab or CR — tool
names and resources come from the model) is prefixed with ``'``, as OWASP
recommends; use JSON Lines where exact text matters.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from sharedos.evidence.record import EvidenceRecord
from sharedos.terminal import is_terminal, json_spelled, unambiguous

__all__ = ["CSV_COLUMNS", "iter_records", "write_csv", "write_jsonl"]

CSV_COLUMNS = (
    "seq",
    "status",
    "turn_id",
    "call_id",
    "tool",
    "started_at",
    "finished_at",
    "duration_ms",
    "outcome",
    "reason",
    "effect",
    "resource",
    "namespace",
    "action",
    "rule_ids",
    "principal",
    "tenant",
    "catalog_hash",
    "policy_hash",
    "arguments_digest",
    "arguments",
    "error",
    "identity",
    "diagnostics",
)
_JSON_CELLS = frozenset({"arguments", "identity", "diagnostics", "rule_ids"})
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_ENCODE = json.JSONEncoder(ensure_ascii=False, sort_keys=True).encode


def iter_records(store: Any, turn_id: str | None = None) -> Iterator[EvidenceRecord]:
    """Every record of ``store`` in ``seq`` order, streamed when the store can stream."""
    streaming = getattr(store, "iter_records", None)
    if streaming is not None:
        yield from streaming(turn_id)
    else:  # a store without a cursor API: one query (bounded by its size)
        yield from store.query(turn_id)


def json_text(value: Any, indent: int | None = None) -> str:
    """JSON of ``value`` with sorted keys: UTF-8 where it can be, ``\\u`` escapes when a
    string holds a lone surrogate (JSON carries one, UTF-8 cannot: a raw write would
    fail mid-export) and for every character a terminal would not show as itself
    (``terminal.json_spelled``)."""
    text = (
        _ENCODE(value)
        if indent is None
        else json.dumps(value, ensure_ascii=False, sort_keys=True, indent=indent)
    )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True, sort_keys=True, indent=indent)
    # the same value, with a C1 control, a bidi override or a line separator a call
    # carried written as its escape: shown on a terminal, it cannot drive or reorder it
    return json_spelled(text)


def write_jsonl(records: Iterable[EvidenceRecord], out: TextIO) -> int:
    """One JSON object per line (sorted keys, UTF-8); returns the number written."""
    n = 0
    write = out.write
    for rec in records:
        write(json_text(rec.to_dict()) + "\n")
        n += 1
    return n


def _cell(name: str, value: Any) -> Any:
    if value is None:
        return ""
    if name in _JSON_CELLS:
        return json.dumps(list(value) if name == "rule_ids" else value, ensure_ascii=True)
    if isinstance(value, str):
        if value.startswith(_FORMULA_START):
            return "'" + value
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


class _LineFeedRows:
    """A CSV writer's output: each row it writes (one ``write`` per row) ending in
    ``"\\n"`` rather than the ``"\\r\\n"`` it was given."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, row: str) -> int:
        return self.out.write(row[:-2] + "\n" if row.endswith("\r\n") else row)


def write_csv(records: Iterable[EvidenceRecord], out: TextIO) -> int:
    """A header and one row per attempt (``CSV_COLUMNS``); returns the number of rows.

    Each cell is the recorded value into a file or a pipe; on a terminal (``is_terminal``)
    it is spelled (``unambiguous``): CSV has no escape of its own, and a tool name or a
    principal holding an escape sequence, a C1 control or a bidi override would otherwise
    retitle, rewrite or reorder what the operator reads."""
    # written with the terminator "\r\n", so that the writer quotes a cell holding a bare
    # CR as well as one holding a LF (it quotes only the characters of its terminator: a
    # tool name "files.nope\rfiles.read" went unquoted and every reader cut the row at
    # the CR); each row still ends in "\n", as before
    writer = csv.writer(_LineFeedRows(out), lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    shown = is_terminal(out)
    n = 0
    for rec in records:
        data = rec.to_dict()
        cells = [_cell(c, data.get(c)) for c in CSV_COLUMNS]
        if shown:
            cells = [unambiguous(c) if isinstance(c, str) else c for c in cells]
        writer.writerow(cells)
        n += 1
    return n
