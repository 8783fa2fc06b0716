"""Versioned schemas on both stores: ``sharedos evidence migrate``, chaining old rows, refusing newer ones."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence.migrate import LATEST, pg_migrate
from sharedos.evidence.record import OutcomeRecord
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.evidence.store import EvidenceStoreError
from sharedos.evidence.verify import verify_store
from sharedos.outcomes import Outcome
from tests.fleet.pgcluster import TempCluster
from tests.mounts import MountFn, remount_read_only
from tests.mounts import fill as fill_disk

OLD_ROWS = (
    "INSERT INTO attempts (turn_id, call_id, tool, started_at, arguments_digest, resource) VALUES "
    "('t1', 'a', 'files.read', '2026-01-01T00:00:00Z', 'sha256:0', '/public/a'), "
    "('t2', 'b', 'files.read', '2026-01-01T00:00:01Z', 'sha256:0', '/private/b'), "
    "('t1', 'c', 'files.write', '2026-01-01T00:00:02Z', 'sha256:0', '/public/c')"
)
OLD_OUTCOMES = (
    "INSERT INTO outcomes (seq, outcome, reason, finished_at, duration_ms) VALUES "
    "(1, 'succeeded', NULL, '2026', 0.5), (2, 'denied', 'forbidden', '2026', 0.1)"
)


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def version_2_file(path: Path) -> None:
    """A store as a version-2 SharedOS left it: attempts, outcomes, the view, no chain."""
    from sharedos.evidence.sqlite_schema import SCHEMA_V2

    conn = sqlite3.connect(path, isolation_level=None)
    for statement in SCHEMA_V2:
        conn.execute(statement)
    conn.execute(OLD_ROWS)
    conn.execute(OLD_OUTCOMES)
    conn.execute("PRAGMA user_version=2")
    conn.close()


def test_a_version_2_sqlite_file_is_migrated_and_its_rows_chained(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    version_2_file(db)
    # readers read it as it is, and say there is no chain yet
    code, out = cli("evidence", "counts", "--db", str(db), "--format", "json")
    assert code == 0 and '"total": 3' in out
    code, out = cli("evidence", "verify", "--db", str(db))
    assert code == 2 and "sharedos evidence migrate" in out  # nothing verified: not a finding
    code, out = cli("evidence", "migrate", "--db", str(db))
    assert code == 0, out
    assert f"migrated evidence schema 2 -> {LATEST}; chained 5 existing rows in 2 turns" in out
    code, out = cli("evidence", "verify", "--db", str(db))
    assert code == 0 and "verified 2 turn(s)" in out
    code, out = cli("evidence", "migrate", "--db", str(db))
    assert code == 0 and "up to date" in out
    store = SqliteEvidenceStore(db)
    try:
        (pending,) = store.query(outcome="interrupted")
        store.finish(pending.seq, OutcomeRecord(Outcome.SUCCEEDED, "2026", 1.0))
        assert [lk.pos for lk in store.iter_links("t1")] == list(range(5))
        assert verify_store(store).clean
    finally:
        store.close()


@pytest.mark.parametrize("read_only", [False, True])
def test_a_newer_sqlite_file_is_refused(tmp_path: Path, read_only: bool) -> None:
    db = tmp_path / "new.db"
    SqliteEvidenceStore(db).close()
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version=99")
    conn.close()
    with pytest.raises(EvidenceStoreError) as exc:
        SqliteEvidenceStore(db, read_only=read_only)
    assert f"schema version 99, newer than this SharedOS (which knows versions up to {LATEST})" in (
        str(exc.value)
    )
    code, out = cli("evidence", "counts", "--db", str(db))
    assert code == 1 and "newer than this SharedOS" in out and len(out.strip().splitlines()) == 1


@pytest.mark.parametrize("version", [1, 3, 5, 6, 99, -1])
def test_a_file_at_a_version_this_sharedos_cannot_write_is_left_as_it_was(
    tmp_path: Path, version: int
) -> None:
    """Another program's database that sets ``user_version`` itself (many do), or a store
    newer than this SharedOS, in rollback-journal mode: a writable open switched it to WAL
    before it read the version (and at 1 to 5 tried to migrate it: "no such table:
    attempts"). Refused, with why, and not written at all."""
    db = tmp_path / "app.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    for read_only in (False, True):
        with pytest.raises(EvidenceStoreError) as exc:
            SqliteEvidenceStore(db, read_only=read_only)
        said = str(exc.value)
        if version == 99:
            assert "newer than this SharedOS" in said, said
        else:
            assert "not a SharedOS evidence database" in said and "notes" in said, said
    code, out = cli("evidence", "migrate", "--db", str(db))
    assert code == 1 and len(out.strip().splitlines()) == 1, out
    assert db.read_bytes() == before  # not switched to WAL, nothing migrated
    assert not Path(f"{db}-wal").exists()


def test_another_programs_database_is_never_made_a_store(tmp_path: Path) -> None:
    # a mistyped --evidence, [evidence] url or copy --to naming some other SQLite file
    # (no schema version, its own tables): readers and migrate refused it, but a writable
    # open switched it to WAL and added the evidence tables beside the program's own
    db = tmp_path / "notes.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    with pytest.raises(EvidenceStoreError) as exc:
        SqliteEvidenceStore(db)
    assert "not a SharedOS evidence database" in str(exc.value) and "notes" in str(exc.value)
    for args in (
        ("evidence", "checkpoint", "--take", "--db", str(db)),
        ("evidence", "copy", "--from", str(tmp_path / "e.db"), "--to", str(db)),
    ):
        if args[1] == "copy":
            SqliteEvidenceStore(tmp_path / "e.db").close()
        code, out = cli(*args)
        assert code == 1 and "not a SharedOS evidence database" in out, out
        assert len(out.strip().splitlines()) == 1, out
    assert db.read_bytes() == before  # not switched to WAL, no table added
    assert not Path(f"{db}-wal").exists()
    # an empty file (or none) is still a new store
    empty = tmp_path / "empty.db"
    empty.touch()
    SqliteEvidenceStore(empty).close()
    assert SqliteEvidenceStore(empty, read_only=True).schema_version == LATEST


def test_migrate_creates_and_upgrades_a_postgresql_database(pg_url: str) -> None:
    code, out = cli("evidence", "migrate", "--db", pg_url)
    assert code == 0 and f"migrated evidence schema 0 -> {LATEST}" in out
    code, out = cli("evidence", "migrate", "--db", pg_url)
    assert code == 0 and "up to date" in out


def test_migrate_of_an_up_to_date_postgresql_database_made_read_only_says_up_to_date(
    pg_url: str,
) -> None:
    """A database an operator froze (``default_transaction_read_only``, a standby): a store
    already at the latest version needs nothing, and ``migrate`` says so. It wrote the
    store's id again (an INSERT that changed nothing) and failed, exit 1, "cannot migrate
    ...: cannot execute INSERT in a read-only transaction"."""
    assert cli("evidence", "migrate", "--db", pg_url)[0] == 0
    with psycopg.connect(pg_url, autocommit=True) as conn:
        name = conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        conn.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    try:
        code, out = cli("evidence", "migrate", "--db", pg_url)
        assert code == 0 and "up to date" in out, out
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("SET default_transaction_read_only = off")
            conn.execute(f"ALTER DATABASE {name} RESET default_transaction_read_only")


def test_migrate_chains_a_version_2_postgresql_database(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        pg_migrate(conn, 2)
        conn.execute(OLD_ROWS)
        conn.execute(OLD_OUTCOMES)
    code, out = cli("evidence", "migrate", "--db", pg_url)
    assert code == 0 and f"2 -> {LATEST}; chained 5 existing rows in 2 turns" in out
    code, out = cli("evidence", "verify", "--db", pg_url)
    assert code == 0, out


_OPENER = """
import sys
from sharedos.evidence.url import open_store
print("ready", flush=True)
sys.stdin.readline()
try:
    open_store(sys.argv[1]).close()
except Exception as exc:
    print("ERR", exc, flush=True)
else:
    print("ok", flush=True)
"""


@pytest.mark.parametrize("start", ["new", "version 2"])
def test_hosts_opening_one_file_at_once_create_or_migrate_it_once(
    tmp_path: Path, start: str
) -> None:
    # hosts started together on one file (a fleet's units, a host and its stdio
    # bridges, a host and `sharedos evidence migrate`): each read the version (0, or
    # 2) before the write lock, then ran the creation or the migration over the
    # schema the first one had just made: "table chain already exists"
    db = tmp_path / "evidence.db"
    if start == "version 2":
        version_2_file(db)
    for _round in range(3 if start == "new" else 1):  # a file is migrated only once
        assert _open_at_once(str(db)) == ["ok"] * 4
        store = SqliteEvidenceStore(db)
        try:
            assert store.schema_version == LATEST
            assert verify_store(store).clean
            assert store.counts().total == (3 if start == "version 2" else 0)
        finally:
            store.close()
        for name in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            name.unlink(missing_ok=True)


def _open_at_once(location: str, n: int = 4) -> list[str]:
    """``n`` processes open the store at ``location`` at the same moment; what each said."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, location],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=root,
        )
        for _ in range(n)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:  # released together
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    return [proc.communicate()[0].strip() for proc in procs]


def test_hosts_opening_one_empty_postgresql_database_at_once_create_it_once(
    postgres_cluster: TempCluster,
) -> None:
    # each host read version 0, then waited for the schema lock inside its transaction,
    # which still saw the catalog as it was when it began: the second one created the
    # schema over the first's ("relation chain already exists") and did not start
    for round_ in range(5):
        url = postgres_cluster.create_database(f"at_once_{round_}")
        assert _open_at_once(url) == ["ok"] * 4
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            assert row == (str(LATEST),)


def test_opening_waits_for_another_process_creating_the_file(tmp_path: Path) -> None:
    """A host opening a file another process holds (creating or migrating it, on a busy
    machine) waits for it: longer than a call's busy wait (1.5 s), which used to fail the
    open with "database is locked"."""
    import sqlite3
    import threading

    db = tmp_path / "evidence.db"
    db.touch()
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN")
    holder.execute("SELECT count(*) FROM sqlite_master").fetchall()  # a lock on the file
    release = threading.Timer(2.5, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        store = SqliteEvidenceStore(db)
    finally:
        release.join()
        holder.close()
    try:
        assert store.schema_version == LATEST
    finally:
        store.close()


def test_a_migration_the_disk_cannot_hold_says_so_and_leaves_the_file_as_it_was(
    tmpfs: MountFn,
) -> None:
    """SQLite rolls a transaction back itself when the disk fills under it; the migration's
    own ROLLBACK then failed, and that error ('cannot rollback - no transaction is active',
    cause io) was all `migrate` said: not that the disk was full, nor that nothing changed."""
    disk = tmpfs("2m")
    db = disk / "old.db"
    version_2_file(db)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.executemany(  # enough rows that the migration's transaction outgrows 64 KiB
        "INSERT INTO attempts (turn_id, call_id, tool, started_at, arguments_digest, resource) "
        "VALUES (?, ?, 'files.read', '2026', 'sha256:0', '/public/a')",
        [(f"t{i // 4}", f"c{i}") for i in range(500)],
    )
    conn.close()
    filler = fill_disk(disk)
    os.truncate(filler, filler.stat().st_size - 64 * 1024)  # room to start, not to end
    code, out = cli("evidence", "migrate", "--db", str(db))
    assert code == 1
    assert "rollback" not in out and "(disk_full)" in out, out
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone() == (2,)
    filler.unlink()
    code, out = cli("evidence", "migrate", "--db", str(db))
    assert code == 0 and f"migrated evidence schema 2 -> {LATEST}" in out, out


def test_migrate_of_an_up_to_date_sqlite_file_on_read_only_media_says_up_to_date(
    tmpfs: MountFn,
) -> None:
    """A store already at the latest version needs nothing, wherever it lies: ``migrate``
    opened it for writing (and committed a probe row) every time, so on read-only media it
    failed, exit 1, "cannot read …: unable to open database file", for a file that
    ``verify`` reads there. A file that does need a step is still refused there."""
    mnt = tmpfs("2m")
    db = mnt / "e.db"
    SqliteEvidenceStore(db).close()
    old = mnt / "old.db"
    version_2_file(old)
    remount_read_only(mnt)
    code, out = cli("evidence", "migrate", "--db", str(db))
    assert code == 0 and f"schema version {LATEST}, up to date" in out, out
    assert cli("evidence", "migrate", "--db", str(old))[0] == 1
