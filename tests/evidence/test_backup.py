"""``copy_sqlite_store``: a consistent copy of the evidence file it was given, whatever its path."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sharedos.evidence import SqliteEvidenceStore
from sharedos.evidence.backup import copy_sqlite_store, keep_evidence
from sharedos.evidence.store import EvidenceStoreError
from tests.evidence.test_chain import write_turn


def _store(path: Path, turn: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    store = SqliteEvidenceStore(path)
    write_turn(store, turn)
    store.close()
    return path


def _turns(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {str(t) for (t,) in conn.execute("SELECT DISTINCT turn_id FROM chain")}
    finally:
        conn.close()


@pytest.mark.parametrize("name", ["d%41", "d#1", "d?x", "d%"])
def test_the_file_copied_is_the_one_named_even_with_uri_characters_in_its_path(
    tmp_path: Path, name: str
) -> None:
    """The source was put into a SQLite URI unquoted: '%41' in a directory name read as 'A'
    (another store's file was copied), and '#' or '?' cut the path short."""
    _store(tmp_path / "dA" / "evidence.sqlite", "OTHER")
    source = _store(tmp_path / name / "evidence.sqlite", "MINE")
    copied = copy_sqlite_store(source, tmp_path / "out" / "evidence.sqlite")
    assert _turns(copied) == {"MINE"}
    assert keep_evidence(tmp_path / name, tmp_path / "kept") is not None
    assert _turns(tmp_path / "kept" / "evidence.sqlite") == {"MINE"}


def test_a_missing_source_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(EvidenceStoreError, match="cannot copy evidence"):
        copy_sqlite_store(tmp_path / "d%41" / "evidence.sqlite", tmp_path / "out.sqlite")
    assert not (tmp_path / "out.sqlite").exists()
