"""Faults of the SQLite files under a running host, each made for real: a symlinked path,
a deleted ``-shm``, a database replaced by a backup, a ``-wal`` truncated in place, a
reader on read-only media (``docs/evidence.md``, "Faults of the SQLite file")."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.evidence import EvidenceStoreError, SqliteEvidenceStore
from sharedos.evidence.verify import verify_store
from sharedos.outcomes import ReasonCode

from .conftest import MountFn, remount_read_only
from .test_postgres import OK
from .test_postgres import attempt as turn_attempt
from .test_store_faults import _files_host, _write, attempt, cause_of

# -- a symlink in place of the database path --------------------------------------------------


def _linked(tmp_path: Path) -> tuple[Path, Path]:
    """A database directory whose evidence.db is a symlink into another directory."""
    real = tmp_path / "real"
    real.mkdir()
    db_dir = tmp_path / "db"
    db_dir.mkdir()
    os.symlink(real / "target.db", db_dir / "evidence.db")
    return db_dir, real / "target.db"


def test_a_deleted_wal_behind_a_symlinked_path_is_detected(tmp_path: Path) -> None:
    db_dir, target = _linked(tmp_path)
    store = SqliteEvidenceStore(db_dir / "evidence.db")
    store.begin(attempt("kept"))
    Path(f"{target}-wal").unlink()  # SQLite keeps its WAL beside the link's target
    assert cause_of(store, "lost") == "replaced"


@pytest.mark.anyio
async def test_under_a_symlinked_path_a_deleted_wal_stops_files_write(tmp_path: Path) -> None:
    db_dir, target = _linked(tmp_path)
    sandbox = tmp_path / "sandbox"
    host, _ = _files_host(db_dir, sandbox)
    assert (await _write(host, "before.txt")).reason is None
    Path(f"{target}-wal").unlink()
    results = [await _write(host, f"during{i}.txt") for i in range(5)]
    assert all(r.reason is ReasonCode.EVIDENCE_UNAVAILABLE for r in results)
    assert [p.name for p in (sandbox / "public").iterdir()] == ["before.txt"]


@pytest.mark.anyio
async def test_under_a_symlinked_path_the_wal_stays_bounded(tmp_path: Path) -> None:
    db_dir, target = _linked(tmp_path)
    host, _ = _files_host(db_dir, tmp_path / "sandbox")
    for i in range(1500):
        await _write(host, f"f{i % 10}.txt")
    # the no-wait path folds the WAL at about 1,000 pages (4 MiB); unchecked it reaches ~40 MiB
    assert Path(f"{target}-wal").stat().st_size < 12 * 1024 * 1024


# -- the -shm file deleted while a host runs, and another process opens the file -----------------


_OTHER_HOST = """
import sys
from sharedos.evidence import EvidenceStoreError, SqliteEvidenceStore
from tests.evidence.test_store_faults import attempt
store = SqliteEvidenceStore(sys.argv[1])
for i in range(int(sys.argv[2])):
    store.begin(attempt(f"other{i}"))
print("ok", flush=True)
store.close()
"""


def _other_host(db: Path, calls: int) -> None:
    """Another process (a second host, a relaunched bridge) opening the file and writing."""
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run(
        [sys.executable, "-c", _OTHER_HOST, str(db), str(calls)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": root},
        cwd=root,
        timeout=60,
    )
    assert proc.stdout.strip() == "ok", proc.stderr


_COUNT = """
import sqlite3, sys
conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
print(" ".join(r[0] for r in conn.execute("SELECT call_id FROM attempts ORDER BY seq")))
"""


def _call_ids_seen_elsewhere(db: Path) -> set[str]:
    """The attempts another process reads (one in this process would share its -shm mapping)."""
    proc = subprocess.run(
        [sys.executable, "-c", _COUNT, str(db)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


def test_a_deleted_shm_is_detected_before_the_next_write(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db)
    for i in range(5):
        store.begin(attempt(f"first{i}"))
    Path(f"{db}-shm").unlink()
    # another process now opens the file: a new -shm, a WAL index rebuilt from the WAL file
    _other_host(db, 20)
    expected = {f"first{i}" for i in range(5)} | {f"other{i}" for i in range(20)}
    assert _call_ids_seen_elsewhere(db) == expected
    # this connection's index (in the unlinked -shm) does not know the other's frames:
    # a commit through it would write over them
    assert cause_of(store, "after") == "replaced"
    assert _call_ids_seen_elsewhere(db) == expected


def test_a_store_with_a_deleted_shm_closes_without_losing_others_records(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db)
    store.begin(attempt("first"))
    Path(f"{db}-shm").unlink()
    _other_host(db, 20)
    with pytest.raises(EvidenceStoreError):
        store.begin(attempt("after"))
    store.close()  # the last connection: SQLite checkpoints through its stale index on close
    assert _call_ids_seen_elsewhere(db) == {"first"} | {f"other{i}" for i in range(20)}


@pytest.mark.anyio
async def test_a_deleted_shm_loses_no_record_of_either_host(tmp_path: Path) -> None:
    db_dir = tmp_path / "db"
    db_dir.mkdir()
    sandbox = tmp_path / "sandbox"
    host, db = _files_host(db_dir, sandbox)
    assert (await _write(host, "before.txt")).reason is None
    Path(f"{db}-shm").unlink()
    _other_host(db, 20)
    results = [await _write(host, f"during{i}.txt") for i in range(20)]
    written = {p.name for p in (sandbox / "public").iterdir()}
    ran = {f"during{i}.txt" for i, r in enumerate(results) if r.reason is None}
    assert written == {"before.txt"} | ran
    # every call that ran is recorded, and every record of the other host is still there
    recorded = _call_ids_seen_elsewhere(db)
    assert {"before.txt"} | ran <= recorded
    assert {f"other{i}" for i in range(20)} <= recorded


# -- the database replaced (a backup restored) while a host runs ---------------------------------


def test_a_refused_write_lands_nothing_in_a_restored_backup(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db)
    for i in range(5):
        store.begin(attempt(f"early{i}"))
    backup = tmp_path / "backup.db"
    with sqlite3.connect(db) as src, sqlite3.connect(backup) as dst:
        src.backup(dst)
    for i in range(5):
        store.begin(attempt(f"late{i}"))
    with sqlite3.connect(db, isolation_level=None) as conn:  # the WAL folded into the file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    os.replace(backup, db)  # an operator restores the backup while the host runs
    assert cause_of(store, "refused") == "replaced"
    # the restored file is still the backup: the refused attempt's pages (and the later
    # rows on them) were not written into the -wal SQLite now pairs with the backup
    assert _call_ids_seen_elsewhere(db) == {f"early{i}" for i in range(5)}


# -- the -wal truncated in place (same inode) while a host runs -----------------------------------


@pytest.mark.anyio
async def test_a_wal_truncated_in_place_stops_files_write(tmp_path: Path) -> None:
    db_dir = tmp_path / "db"
    db_dir.mkdir()
    sandbox = tmp_path / "sandbox"
    host, db = _files_host(db_dir, sandbox)
    for i in range(3):
        assert (await _write(host, f"before{i}.txt")).reason is None
    os.truncate(f"{db}-wal", 0)  # the committed frames are gone; the inode is the same
    results = [await _write(host, f"during{i}.txt") for i in range(5)]
    # no call runs past the hole: the next commit would write its frames after it, and
    # its attempt could never be read back (every reader finds the file malformed)
    assert all(r.reason is ReasonCode.EVIDENCE_UNAVAILABLE for r in results)
    assert sorted(p.name for p in (sandbox / "public").iterdir()) == [
        f"before{i}.txt" for i in range(3)
    ]


# -- a store left by a host that died, read on read-only media without its -shm -------------------

_DIE_AFTER = """
import os, sys
from sharedos.evidence import SqliteEvidenceStore
from tests.evidence.test_store_faults import attempt
store = SqliteEvidenceStore(sys.argv[1])
for i in range(int(sys.argv[2])):
    store.begin(attempt(f"c{i}"))
os._exit(0)  # died: no close, no checkpoint; the last rows are only in the -wal
"""


def test_a_reader_on_read_only_media_never_skips_the_wal_silently(tmpfs: MountFn) -> None:
    mnt = tmpfs("32m")
    db = mnt / "e.db"
    root = str(Path(__file__).resolve().parents[2])
    subprocess.run(
        [sys.executable, "-c", _DIE_AFTER, str(db), "3000"],
        check=True,
        env={**os.environ, "PYTHONPATH": root},
        cwd=root,
        timeout=120,
    )
    assert Path(f"{db}-wal").stat().st_size > 0
    Path(f"{db}-shm").unlink()  # copied without it, or removed: the -shm is only an index
    remount_read_only(mnt)
    try:
        reader = SqliteEvidenceStore(db, read_only=True)
    except EvidenceStoreError as exc:  # refusing, and saying why, is honest
        assert "-wal" in str(exc)
        return
    # reading is honest only if every committed row is read
    assert reader.counts().total == 3000
    assert verify_store(reader).links == 3001


# -- a database file damaged in place --------------------------------------------------------------


@pytest.mark.anyio
async def test_a_store_sqlite_found_malformed_is_not_written_again(tmp_path: Path) -> None:
    """Pages in the middle of the file overwritten in place (a disk fault, a stray ``dd``):
    SQLite says ``database disk image is malformed`` when a write meets one, but writes of
    other turns, whose pages are whole, still land. Once a write has found the file damaged,
    every later one fails closed until the host restarts: else calls went on running
    (files written) into a file that ``list``, ``export`` and ``verify`` cannot read, and
    the host said the store was "writable again" after each of them."""
    db_dir = tmp_path / "db"
    db_dir.mkdir()
    db = db_dir / "evidence.db"
    store = SqliteEvidenceStore(db)
    for i in range(3000):
        store.finish(store.begin(turn_attempt(f"c{i}", turn=f"T{i % 50}")), OK)
    store.close()  # folds the WAL into the file
    pages = db.stat().st_size // 4096
    with open(db, "r+b") as f:  # the schema's pages (the first ones) are left whole
        f.seek(pages * 2 // 5 * 4096)
        f.write(b"\xff" * (pages // 5 * 4096))
    sandbox = tmp_path / "sandbox"
    host, _ = _files_host(db_dir, sandbox)
    results = [await _write(host, f"after{i}.txt", turn=f"T{i % 50}") for i in range(100)]
    refused = [r.reason is ReasonCode.EVIDENCE_UNAVAILABLE for r in results]
    assert any(refused), "no write met the damage: the test needs another layout"
    first = refused.index(True)
    assert all(refused[first:]), "".join("F" if r else "s" for r in refused)
    written = sorted(p.name for p in (sandbox / "public").iterdir())
    assert written == sorted(f"after{i}.txt" for i in range(first))
