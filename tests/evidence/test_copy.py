"""``sharedos evidence copy``: SQLite -> PostgreSQL and back, chains intact, resumable after a kill (issue 24)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence.chain import Signer, load_public_key
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.evidence.url import open_store
from sharedos.evidence.verify import verify_store
from tests.evidence.test_chain import attempt, ok, write_turn

SHAREDOS = str(Path(sys.executable).parent / "sharedos")
TURNS = 3000


def fill(store: Any, turns: int) -> None:
    """Turns of two calls each, sealed; every tenth one left unsealed (a host that died)."""
    for t in range(turns):
        turn = f"turn-{t:05d}"
        for i in range(2):
            store.finish(store.begin(attempt(f"{turn}.{i}", turn)), ok())
        if t % 10:
            store.seal_turn(turn)


def same(a: Any, b: Any) -> None:
    """Every turn of ``a`` in ``b`` with the same chain; the same counts; both verify."""
    assert a.counts() == b.counts()
    assert a.turns() == b.turns()
    heads_a = {lk.turn_id: (lk.pos, lk.hash) for lk in a.iter_links()}
    heads_b = {lk.turn_id: (lk.pos, lk.hash) for lk in b.iter_links()}
    assert heads_a == heads_b
    report = verify_store(b)
    assert report.clean, [p.line() for p in report.problems][:5]


def copy_killed_midway(source: str, target: str) -> None:
    """Start ``sharedos evidence copy`` and SIGKILL it once it has copied some turns."""
    proc = subprocess.Popen(
        [SHAREDOS, "evidence", "copy", "--from", source, "--to", target],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()  # "... 500 turn(s) read, N row(s) copied"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert line.startswith("... 500 turn(s) read"), line + proc.stderr.read()
    assert proc.returncode == -signal.SIGKILL


def resume(source: str, target: str) -> str:
    done = subprocess.run(
        [SHAREDOS, "evidence", "copy", "--from", source, "--to", target],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_sqlite_to_postgresql_and_back_killed_and_resumed(tmp_path: Path, pg_url: str) -> None:
    src = tmp_path / "host.sqlite"
    with SqliteEvidenceStore(src) as store:
        fill(store, TURNS)
    # into the fleet's database, killed mid-copy, then resumed
    copy_killed_midway(str(src), pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        (turns,) = conn.execute("SELECT count(DISTINCT turn_id) FROM chain").fetchone() or (0,)
    assert 0 < turns < TURNS  # interrupted: some turns, each one whole
    out = resume(str(src), pg_url)
    assert f"{turns} turn(s) already there" in out
    with SqliteEvidenceStore(src, read_only=True) as a, open_store(pg_url, read_only=True) as b:
        same(a, b)
    # and back, into a file an auditor takes away
    back = tmp_path / "audit.sqlite"
    copy_killed_midway(pg_url, str(back))
    conn2 = sqlite3.connect(back)
    (turns,) = conn2.execute("SELECT count(DISTINCT turn_id) FROM chain").fetchone()
    conn2.close()
    assert 0 < turns < TURNS
    resume(pg_url, str(back))
    with open_store(pg_url, read_only=True) as a, SqliteEvidenceStore(back, read_only=True) as b:
        same(a, b)


def test_a_turn_that_grew_gets_its_new_rows_and_a_conflict_is_reported(
    tmp_path: Path, pg_url: str
) -> None:
    src = tmp_path / "a.sqlite"
    with SqliteEvidenceStore(src) as store:
        fill(store, 3)
        store.finish(store.begin(attempt("late", "turn-00000")), ok())  # still running
    result = CliRunner().invoke(main, ["evidence", "copy", "--from", str(src), "--to", pg_url])
    assert result.exit_code == 0, result.output
    with SqliteEvidenceStore(src) as store:
        store.finish(store.begin(attempt("later", "turn-00000")), ok())
    result = CliRunner().invoke(main, ["evidence", "copy", "--from", str(src), "--to", pg_url])
    assert result.exit_code == 0 and "copied 2 row(s) of 1 turn(s)" in result.output
    with SqliteEvidenceStore(src, read_only=True) as a, open_store(pg_url, read_only=True) as b:
        same(a, b)
    # a turn the target holds as another chain is not touched, and said
    other = tmp_path / "b.sqlite"
    with SqliteEvidenceStore(other) as store:
        write_turn(store, "turn-00001")
    result = CliRunner().invoke(main, ["evidence", "copy", "--from", str(other), "--to", pg_url])
    assert result.exit_code == 1 and "1 turn(s) in conflict: turn-00001" in result.output
    with open_store(pg_url, read_only=True) as b:
        assert verify_store(b).clean


def test_a_copy_ends_with_a_signed_checkpoint_of_the_target(tmp_path: Path) -> None:
    src = tmp_path / "a.sqlite"
    with SqliteEvidenceStore(src) as store:
        fill(store, 4)
    signer = Signer.generate()
    (tmp_path / "k.pem").write_bytes(signer.private_pem())
    (tmp_path / "k.pem").chmod(0o600)  # a private key: refused when others can read it
    result = CliRunner().invoke(
        main,
        [
            *("evidence", "copy", "--from", str(src), "--to", str(tmp_path / "b.sqlite")),
            *("--sign-key", str(tmp_path / "k.pem")),
        ],
    )
    assert result.exit_code == 0 and "checkpoint 1 of the target taken" in result.output
    key, key_id = load_public_key(signer.public_pem())
    with SqliteEvidenceStore(tmp_path / "b.sqlite", read_only=True) as b:
        (cp, heads), *_ = b.iter_checkpoints()
        assert cp.key_id == key_id and len(heads) == 4
        kinds = {p.kind for p in verify_store(b, public_keys={key_id: key}).problems}
    # the turns' seals were signed by nobody here (and one is unsealed): only that is said
    assert kinds == {"signature", "unsealed"}


@pytest.mark.parametrize("change", ["pos = 'x'", "attempt = 'zz'"])
def test_a_row_whose_place_was_changed_outside_sharedos_is_said_not_a_traceback(
    tmp_path: Path, change: str
) -> None:
    # SQLite keeps whatever a column is given: a position or an outcome's attempt edited
    # to text ended the copy in a TypeError traceback (or a bare "invalid literal for int()")
    src = tmp_path / "a.sqlite"
    with SqliteEvidenceStore(src) as store:
        fill(store, 2)
    conn = sqlite3.connect(src)
    (seq,) = conn.execute(
        "SELECT min(seq) FROM chain WHERE turn_id = 'turn-00001' AND kind = 'outcome'"
    ).fetchone()
    conn.execute(f"UPDATE chain SET {change} WHERE seq = ?", (seq,))
    conn.commit()
    conn.close()
    dst = tmp_path / "b.sqlite"
    result = CliRunner().invoke(main, ["evidence", "copy", "--from", str(src), "--to", str(dst)])
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1, result.output
    assert "1 turn(s) not copied, a row's position or attempt is not a number" in result.output
    assert f"turn-00001 (seq {seq})" in result.output
    with SqliteEvidenceStore(dst, read_only=True) as b:
        assert [t for t, _n in b.turns()] == ["turn-00000"]  # the other turns are copied
        assert verify_store(b).clean


def test_a_turn_the_sources_checkpoints_show_was_changed_is_not_copied_clean(
    tmp_path: Path,
) -> None:
    """What the source's checkpoints show was removed or rewritten is not laundered into a
    target that verifies clean (the checkpoints are not copied, and the copy checkpoints
    the target over what it wrote)."""
    from tests.evidence.test_chain import _rehash

    src = tmp_path / "a.sqlite"
    with SqliteEvidenceStore(src) as store:
        write_turn(store, "T")
        write_turn(store, "U")
        write_turn(store, "V")
        store.take_checkpoint()
    conn = sqlite3.connect(src, isolation_level=None)

    def raw(sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return list(conn.execute(sql, params).fetchall())

    # U rewritten (a denied call shown allowed, every later hash recomputed); V deleted whole
    raw("UPDATE chain SET effect = 'allow' WHERE turn_id = 'U' AND call_id = 'd1'")
    with SqliteEvidenceStore(src, read_only=True) as store:
        _rehash(store, raw, "U")
    raw("DELETE FROM chain WHERE turn_id = 'V'")
    conn.close()
    with SqliteEvidenceStore(src, read_only=True) as store:
        assert {(p.kind, p.turn_id) for p in verify_store(store).problems} == {
            ("edited", "U"),
            ("deleted", "V"),
        }
    dst = tmp_path / "b.sqlite"
    result = CliRunner().invoke(main, ["evidence", "copy", "--from", str(src), "--to", str(dst)])
    assert result.exit_code == 1, result.output
    assert "1 turn(s) not copied, they do not verify on the source" in result.output
    assert "(`sharedos evidence verify` it): U;" in result.output
    assert "1 turn(s) the source's checkpoints covered are gone from it: V" in result.output
    with SqliteEvidenceStore(dst, read_only=True) as store:
        assert verify_store(store).clean
        assert {lk.turn_id for lk in store.iter_links()} == {"T"}
