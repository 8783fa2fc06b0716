"""A row whose number column holds text is reported by ``verify``, never a crash."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence.url import open_store
from sharedos.evidence.verify import verify_store
from tests.evidence.test_chain import write_turn


@pytest.mark.parametrize(
    ("column", "value"),
    [("duration_ms", "0.5x"), ("duration_ms", b"\x00"), ("pos", "zz"), ("attempt", "zz")],
)
def test_a_non_numeric_value_in_a_number_column_is_reported(
    tmp_path: Path, column: str, value: object
) -> None:
    db = tmp_path / "evidence.db"
    store = open_store(str(db))
    write_turn(store, "T")
    write_turn(store, "U")
    store.close()
    conn = sqlite3.connect(db, isolation_level=None)
    # SQLite keeps what it is given: someone with write access can put text in a REAL column
    conn.execute(
        f"UPDATE chain SET {column} = ? WHERE turn_id = 'T' AND kind = 'outcome' AND pos = 2",
        (value,),
    )
    conn.close()
    store = open_store(str(db), read_only=True)
    try:
        report = verify_store(store)  # raised ValueError: could not convert string to float
    finally:
        store.close()
    assert not report.clean
    assert {p.turn_id for p in report.problems} == {"T"}  # U is still verified, and clean
    assert report.turns == 2
    result = CliRunner().invoke(main, ["evidence", "verify", "--db", str(db)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "turn T" in result.output


@pytest.mark.parametrize(
    ("table", "column", "value"),
    [
        ("checkpoints", "heads", "zz"),
        ("checkpoints", "signature", b"\x00\x01"),
        ("checkpoints", "taken_at", 5),
        ("checkpoint_heads", "pos", "zz"),
        ("checkpoint_heads", "hash", b"\x00"),
        # the head's checkpoint number: read with int() (ValueError, OverflowError)
        ("checkpoint_heads", "number", "zz"),
        ("checkpoint_heads", "number", b"\x00"),
        ("checkpoint_heads", "number", float("inf")),
    ],
)
def test_a_checkpoint_value_of_the_wrong_type_is_reported(
    tmp_path: Path, table: str, column: str, value: object
) -> None:
    """A checkpoint row holding a value of another type does not verify; verify says so
    (exit 1, the checkpoint named), and ``evidence checkpoint`` exports nothing, neither
    with a traceback (ValueError: invalid literal for int(), or bytes not JSON)."""
    from sharedos.evidence.chain import Signer

    db = tmp_path / "evidence.db"
    signer = Signer.generate()
    (tmp_path / "host.pub").write_bytes(signer.public_pem())
    store = open_store(str(db), signer=signer)
    write_turn(store, "T")
    assert store.take_checkpoint() is not None
    store.close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(f"UPDATE {table} SET {column} = ?", (value,))
    conn.close()
    pub = str(tmp_path / "host.pub")
    result = CliRunner().invoke(main, ["evidence", "verify", "--db", str(db), "--key", pub])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "checkpoint 1" in result.output, result.output
    exported = CliRunner().invoke(main, ["evidence", "checkpoint", "--db", str(db)])
    assert not isinstance(exported.exception, (TypeError, ValueError)), exported.exception


@pytest.mark.parametrize("column", ["reason", "outcome"])
def test_counts_of_a_reason_stored_as_bytes_say_so(tmp_path: Path, column: str) -> None:
    """An outcome's reason (or, past its CHECK, its outcome) set to a blob: ``evidence
    counts`` died sorting bytes among text (TypeError); now it says, in one line, what
    ``list`` and ``export`` say of it (exit 1), and ``verify`` reports the row."""
    db = tmp_path / "evidence.db"
    store = open_store(str(db))
    write_turn(store, "T")
    store.close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA ignore_check_constraints = 1")  # as anyone who can write it can
    conn.execute(
        f"UPDATE chain SET {column} = ? WHERE turn_id = 'T' AND kind = 'outcome' AND pos = 2",
        (b"\x00\xff",),
    )
    conn.close()
    result = CliRunner().invoke(main, ["evidence", "counts", "--db", str(db)])
    assert isinstance(result.exception, (SystemExit, type(None))), result.exception
    assert result.exit_code == 1 and "changed outside SharedOS" in result.output, result.output
    listed = CliRunner().invoke(main, ["evidence", "list", "--db", str(db)])
    assert listed.exit_code == 1 and "changed outside SharedOS" in listed.output
    verified = CliRunner().invoke(main, ["evidence", "verify", "--db", str(db)])
    assert verified.exit_code == 1 and "turn T position 2" in verified.output, verified.output


@pytest.mark.parametrize(("column", "value"), [("pos", "zz"), ("hash", b"\x00")])
def test_take_over_a_head_that_is_not_what_sharedos_writes_says_so(
    tmp_path: Path, column: str, value: object
) -> None:
    """A turn's last row with a position that is text (or a hash that is bytes), no
    checkpoint covering it: ``evidence checkpoint --take`` died with ValueError (int() of
    the position), or took a checkpoint over a head no chain has; now it takes none,
    says why, exit 1."""
    db = tmp_path / "evidence.db"
    store = open_store(str(db))
    write_turn(store, "T")
    store.close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("DELETE FROM checkpoint_heads")
    conn.execute("DELETE FROM checkpoints")
    conn.execute(f"UPDATE chain SET {column} = ? WHERE kind = 'seal'", (value,))
    conn.close()
    result = CliRunner().invoke(main, ["evidence", "checkpoint", "--take", "--db", str(db)])
    assert isinstance(result.exception, (SystemExit, type(None))), result.exception
    assert result.exit_code == 1 and "changed outside SharedOS" in result.output, result.output
    conn = sqlite3.connect(db, isolation_level=None)
    assert conn.execute("SELECT count(*) FROM checkpoints").fetchone() == (0,)
    conn.close()


@pytest.mark.parametrize(
    ("statement", "found"),
    [
        (
            "UPDATE chain SET arguments = CAST(x'7b22ff' AS TEXT) "
            "WHERE turn_id = 'T' AND kind = 'attempt' AND pos = 1",
            "edited: turn T position 1",
        ),
        ("UPDATE checkpoints SET taken_at = CAST(x'32ff' AS TEXT)", "checkpoint 1"),
        (
            "UPDATE checkpoint_heads SET hash = CAST(x'73ff' AS TEXT) WHERE turn_id = 'T'",
            "checkpoint 1",
        ),
    ],
)
def test_text_that_is_not_utf8_is_a_finding_not_the_end_of_the_walk(
    tmp_path: Path, statement: str, found: str
) -> None:
    """SQLite keeps bytes cast to text, UTF-8 or not. One such value stopped the whole
    verification: 'cannot read evidence … Could not decode to UTF-8', exit 2 (which says
    the store could not be read, never that it was changed), every other turn unverified.
    It is now a finding where it is (exit 1) and the walk goes on."""
    db = tmp_path / "evidence.db"
    store = open_store(str(db))
    write_turn(store, "T")
    write_turn(store, "U")
    assert store.take_checkpoint() is not None
    store.close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(statement)
    conn.close()
    store = open_store(str(db), read_only=True)
    try:
        report = verify_store(store)
        # read again past the rows already given, each once (the bad row mid-batch)
        links = [(lk.turn_id, lk.pos) for lk in store.iter_links(batch=3)]
    finally:
        store.close()
    assert len(links) == len(set(links)) == 20
    assert report.turns == 2 and not report.clean
    assert "U" not in {p.turn_id for p in report.problems}  # U is still verified, and clean
    result = CliRunner().invoke(main, ["evidence", "verify", "--db", str(db)])
    assert result.exit_code == 1, result.output
    assert found in result.output and "cannot read" not in result.output, result.output


@pytest.mark.parametrize(
    ("column", "literal"),
    [
        ("pos", "2.5"),  # read as int(2.5) == 2, its own place: verified clean
        ("pos", "9223372036854775808"),  # past 2**63: SQLite keeps it as a REAL
        ("pos", "1e400"),  # infinity: int() raised OverflowError, a traceback
        ("attempt", "1e400"),
    ],
)
def test_a_position_or_seq_that_is_no_integer_is_reported(
    tmp_path: Path, column: str, literal: str
) -> None:
    """A link's position or seq holding a REAL (a fraction, a number past 2**63, an
    infinity) is not what SharedOS wrote: verify reports the turn (exit 1), never reads it
    as the integer it rounds to, never a traceback."""
    db = tmp_path / "evidence.db"
    store = open_store(str(db))
    write_turn(store, "T")
    write_turn(store, "U")
    store.close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(
        f"UPDATE chain SET {column} = {literal} "
        "WHERE turn_id = 'T' AND kind = 'outcome' AND pos = 2"
    )
    conn.close()
    store = open_store(str(db), read_only=True)
    try:
        report = verify_store(store)
    finally:
        store.close()
    assert not report.clean
    assert {p.turn_id for p in report.problems} == {"T"}
    result = CliRunner().invoke(main, ["evidence", "verify", "--db", str(db)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "turn T" in result.output


@pytest.mark.parametrize(
    ("value", "found"),
    [
        # bytes cast to text that are not UTF-8: 'cannot open evidence database … Could
        # not decode to UTF-8', exit 2, nothing verified
        ("CAST(x'32ff' AS TEXT)", "names another store"),
        ("NULL", "the store names none"),  # was read as the store id 'None'
    ],
)
def test_a_store_id_that_is_no_stored_text_is_reported_not_the_end_of_verify(
    tmp_path: Path, value: str, found: str
) -> None:
    """The store's own ``meta.store_id``, which every checkpoint names, set to text that
    is not UTF-8: ``evidence verify`` could not open the store at all (exit 2, 'cannot
    open', no turn verified). It is now read as stored: each checkpoint is a finding
    (exit 1) and every turn is still verified."""
    db = tmp_path / "evidence.db"
    store = open_store(str(db))
    write_turn(store, "T")
    assert store.take_checkpoint() is not None
    store.close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(f"UPDATE meta SET value = {value} WHERE key = 'store_id'")
    conn.close()
    result = CliRunner().invoke(main, ["evidence", "verify", "--db", str(db)])
    assert result.exit_code == 1, result.output
    assert "cannot open" not in result.output and found in result.output, result.output
    assert "verified 1 turn(s)" in result.output, result.output
    exported = CliRunner().invoke(main, ["evidence", "checkpoint", "--db", str(db)])
    assert exported.exit_code == 1 and "nothing exported" in exported.output, exported.output
