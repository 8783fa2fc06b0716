"""A SQLite file whose table and index disagree is reported by ``verify``, not walked as clean.

``verify`` reads each turn in order through the ``(turn_id, pos)`` index, and
SQLite takes those two columns from the index entry, not from the row. A byte
changed in a row's turn id in the file itself (an editor, a disk) leaves the
index as it was: the chains still walk clean, while ``list`` and ``export``,
which read the table, show the call in another turn.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence.url import open_store
from sharedos.evidence.verify import verify_store
from tests.evidence.test_chain import write_turn


def _move_in_place(db: Path, turn: str, to: str, pos: int, kind: str) -> None:
    """Rewrite, in the file's bytes, the turn id of the row of ``turn`` at ``pos`` to ``to``."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(db.read_bytes())
    # a chain row's record: turn_id, pos (one byte here), kind, prev_hash, ...; the
    # index entry holds (turn_id, pos, seq) and no kind, so this is the row alone
    needle = turn.encode() + bytes([pos]) + kind.encode() + b"sha256:"
    at = data.find(needle)
    assert at >= 0 and data.find(needle, at + 1) < 0
    data[at : at + len(turn)] = to.encode()
    db.write_bytes(bytes(data))


def test_a_row_moved_to_another_turn_in_the_file_is_found(tmp_path: Path) -> None:
    db = tmp_path / "evidence.db"
    store = open_store(str(db))
    write_turn(store, "turn-T")
    write_turn(store, "turn-U")
    store.close()
    _move_in_place(db, "turn-U", "turn-T", 5, "attempt")  # U's call a2, now T's in the table

    listed = CliRunner().invoke(main, ["evidence", "list", "--db", str(db)])
    assert listed.exit_code == 0, listed.output
    assert listed.output.count("turn-T  a2 ") == 2  # T's own a2, and U's now listed as T's
    assert listed.output.count("turn-U  ") == 3

    store = open_store(str(db), read_only=True)
    try:
        report = verify_store(store)  # was clean: the walk read turn-U from the index
    finally:
        store.close()
    assert [p.kind for p in report.problems] == ["damaged"]
    assert "missing from index chain_place" in report.problems[0].detail

    result = CliRunner().invoke(main, ["evidence", "verify", "--db", str(db)])
    assert result.exit_code == 1, result.output
    assert "damaged: the database file is damaged: row " in result.output
