"""The store knows it is the store: faults of the file under it fail writes, loudly and for good.

Each fault is made for real: a full tmpfs, a tmpfs remounted read-only, a
database file unlinked, replaced or renamed while open, another connection
holding the write lock.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sharedos.catalog import ToolRegistry
from sharedos.evidence import EvidenceRecord, EvidenceStoreError, SqliteEvidenceStore
from sharedos.evidence.record import arguments_digest
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall, ToolResult
from sharedos.outcomes import ReasonCode
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools
from tests.timing import bound

from .conftest import MountFn, fill, remount_read_only


def attempt(call: str = "c1") -> EvidenceRecord:
    return EvidenceRecord(
        turn_id="t",
        call_id=call,
        tool="files.write",
        started_at="2026-12-02T10:00:00.000000Z",
        arguments_digest=arguments_digest({}),
        arguments={},
    )


def cause_of(store: SqliteEvidenceStore, call: str = "c1") -> str:
    with pytest.raises(EvidenceStoreError) as err:
        store.begin(attempt(call))
    return err.value.cause


def test_a_read_only_filesystem_fails_at_open_with_one_line(tmpfs: MountFn) -> None:
    mnt = tmpfs("1m")
    SqliteEvidenceStore(mnt / "e.db").close()
    remount_read_only(mnt)
    with pytest.raises(EvidenceStoreError) as err:
        SqliteEvidenceStore(mnt / "e.db")
    message = str(err.value)
    assert "\n" not in message and str(mnt / "e.db") in message
    assert err.value.cause in ("read_only", "io")
    # reading it is still possible (the CLI opens read-only)
    assert SqliteEvidenceStore(mnt / "e.db", read_only=True).query() == []


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to run a process that file permissions apply to",
)
def test_a_store_this_user_may_not_open_says_so_not_read_only_media(tmp_path: Path) -> None:
    # another user's store (0600, its directory theirs), a host of theirs running: a reader
    # was told the -wal could not be read "where nothing can be written" and to copy the
    # files to writable storage; after the host stopped, "unable to open database file";
    # a writer that may only read the file failed at its first write, not at open
    nobody = 65534
    home = tmp_path / "theirs"
    home.mkdir()
    db = home / "e.db"
    host = SqliteEvidenceStore(db)
    try:
        host.begin(attempt("c1"))  # the -wal holds it, the -shm is there
        assert os.path.getsize(f"{db}-wal") > 0
        for path in (home, db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            os.chown(path, nobody, nobody)
        # root without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH: permissions apply to it
        limited = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
        exe = Path(sys.executable).with_name("sharedos")
        reader = subprocess.run(
            [*limited, str(exe), "evidence", "list", "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert reader.returncode == 1
        assert reader.stderr.strip() == (
            f"Error: cannot read evidence database {db}: Permission denied"
        ), reader.stderr
        os.chmod(db, 0o644)  # readable by all, writable by its owner only
        writer = subprocess.run(
            [
                *limited,
                sys.executable,
                "-c",
                "import sys\n"
                "from sharedos.evidence import SqliteEvidenceStore, EvidenceStoreError\n"
                "try:\n"
                "    SqliteEvidenceStore(sys.argv[1])\n"
                "except EvidenceStoreError as exc:\n"
                "    print(exc.cause, exc)\n",
                str(db),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert writer.stdout.strip() == (
            f"read_only cannot write evidence database {db}: Permission denied"
        ), writer.stdout + writer.stderr
    finally:
        host.close()


def test_a_full_disk_fails_writes_and_they_recover_when_space_returns(tmpfs: MountFn) -> None:
    mnt = tmpfs("512k")
    store = SqliteEvidenceStore(mnt / "e.db")
    store.begin(attempt("before"))
    filler = fill(mnt)
    big = {"blob": "x" * 200_000}  # more than the WAL's already-allocated pages can take
    with pytest.raises(EvidenceStoreError) as err:
        for i in range(50):
            store.begin(dataclasses.replace(attempt(f"full{i}"), arguments=big))
    assert err.value.cause in ("disk_full", "io")
    filler.unlink()
    store.begin(attempt("after"))  # not sticky: the disk, not the store, was the problem
    assert [r.call_id for r in store.query()][-1] == "after"


def test_a_full_disk_at_open_fails_at_open(tmpfs: MountFn) -> None:
    mnt = tmpfs("256k")
    fill(mnt)
    with pytest.raises(EvidenceStoreError) as err:
        SqliteEvidenceStore(mnt / "e.db")
    assert "\n" not in str(err.value)


def test_a_disk_with_room_for_the_file_but_not_its_shm_is_full_not_io(tmpfs: MountFn) -> None:
    """With less than 32 KiB free, the file is made but its -shm cannot grow: SQLite says
    SQLITE_IOERR_SHMSIZE ('disk I/O error'), which was cause io, so `migrate` or `copy --to`
    on a nearly full disk, and a host's start, said an I/O error rather than a full disk."""
    mnt = tmpfs("256k")
    filler = fill(mnt)
    os.truncate(filler, filler.stat().st_size - 8192)
    with pytest.raises(EvidenceStoreError) as err:
        SqliteEvidenceStore(mnt / "e.db")
    assert err.value.cause == "disk_full", str(err.value)
    assert str(err.value).endswith("(disk_full)")
    filler.unlink()
    SqliteEvidenceStore(mnt / "e.db").close()  # room again: it opens


def test_a_deleted_database_fails_from_then_on(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db)
    store.begin(attempt("kept"))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    assert cause_of(store, "lost") == "replaced"
    # a new database appearing at the path does not make the old connection honest again
    SqliteEvidenceStore(db).close()
    assert cause_of(store, "later") == "replaced"


def test_a_deleted_main_file_alone_is_detected(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db)
    db.unlink()
    assert cause_of(store) == "replaced"


def test_a_deleted_wal_alone_is_detected(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db)
    Path(f"{db}-wal").unlink()
    assert cause_of(store) == "replaced"


def test_a_commit_refused_for_a_deleted_wal_leaves_no_attempt_behind(tmp_path: Path) -> None:
    """The ``-wal`` deleted: the next commit is refused (``replaced``) before it is made. It
    was made, into the deleted ``-wal``, and the host's close (which checkpoints that
    ``-wal`` into the file, docs/evidence.md) then kept it: an ``interrupted`` attempt,
    which reads as a call that may have run, for a call answered "nothing ran"."""
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db)
    store.begin(attempt("kept"))
    Path(f"{db}-wal").unlink()
    assert cause_of(store, "refused") == "replaced"
    store.close()
    seen = {r.call_id for r in SqliteEvidenceStore(db, read_only=True).query()}
    assert seen == {"kept"}


def test_a_replaced_database_is_detected(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db)
    store.begin(attempt("original"))
    other = tmp_path / "other.db"
    SqliteEvidenceStore(other).close()
    os.replace(other, db)
    assert cause_of(store, "after") == "replaced"
    assert cause_of(store, "later") == "replaced"
    # (SQLite pairs the new file with the old -wal left at the path, so the new file may
    # show the old rows; whatever it shows, the refused call is never a success)
    seen = {r.call_id: r.status for r in SqliteEvidenceStore(db, read_only=True).query()}
    assert seen.get("after", "interrupted") == "interrupted" and "later" not in seen


def test_a_moved_database_is_detected(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db)
    store.begin(attempt("before"))
    os.rename(db, tmp_path / "moved.db")
    assert cause_of(store, "after") == "replaced"


def test_a_locked_database_fails_within_the_busy_wait(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=0.3)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        t0 = time.monotonic()
        assert cause_of(store) == "locked"
        assert time.monotonic() - t0 < bound(2.0)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.begin(attempt("after"))  # a lock is transient


def test_a_refused_seal_or_opening_is_not_called_an_outcome(tmp_path: Path) -> None:
    """A turn closing under a lock: its host said "cannot write the seal of turn t
    (locked): cannot write the outcome evidence in ...": every write that was not an
    attempt was named an outcome (the seal, the opening record, an approval event)."""
    from sharedos.evidence.appender import Opening

    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=0.1)
    store.begin(attempt("c1"))  # turn t's chain exists
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(EvidenceStoreError) as sealing:
            store.seal_turn("t")
        with pytest.raises(EvidenceStoreError) as opening:
            store.open_turn(Opening(turn_id="T2", opened_at="2026-12-02T10:00:00.000000Z"))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert sealing.value.cause == opening.value.cause == "locked"
    assert "write the seal" in str(sealing.value), sealing.value
    assert "write the opening record" in str(opening.value), opening.value


def test_a_read_only_store_refuses_writes(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    SqliteEvidenceStore(db).close()
    reader = SqliteEvidenceStore(db, read_only=True)
    assert cause_of(reader) == "read_only"
    assert not Path(f"{db}.new").exists()


def test_opening_read_only_never_creates_a_file(tmp_path: Path) -> None:
    with pytest.raises(EvidenceStoreError, match="no evidence database"):
        SqliteEvidenceStore(tmp_path / "absent.db", read_only=True)
    assert not (tmp_path / "absent.db").exists()


# -- the same faults under a real RuntimeHost: no effect without a record ----------------------

POLICY = """
namespace files
requirement files.write { action write; resource path(args.path) }
permit write on "/public/**"
"""


def _files_host(db_dir: Path, sandbox: Path) -> tuple[RuntimeHost, Path]:
    (sandbox / "public").mkdir(parents=True, exist_ok=True)
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    db = db_dir / "evidence.db"
    host = RuntimeHost(Kernel(compile_source(POLICY, "faults.sos"), registry), db)
    return host, db


async def _write(host: RuntimeHost, name: str, turn: str = "faults") -> ToolResult:
    return await host.invoke_tool(
        ToolCall(
            call_id=name, tool="files.write", arguments={"path": f"/public/{name}", "content": "x"}
        ),
        AccessContext(principal="p", turn_id=turn),
        ToolPolicy(name="f", mode=RunMode.OPEN, managed=("files.*",)),
    )


@pytest.mark.anyio
@pytest.mark.parametrize("fault", ["disk_full", "deleted", "replaced", "moved"])
async def test_under_a_store_fault_files_write_has_no_effect(
    fault: str, tmp_path: Path, tmpfs: MountFn
) -> None:
    db_dir = tmpfs("512k") if fault == "disk_full" else tmp_path / "db"
    db_dir.mkdir(exist_ok=True)
    sandbox = tmp_path / "sandbox"
    host, db = _files_host(db_dir, sandbox)
    ok = await _write(host, "before.txt")
    assert ok.reason is None
    if fault == "disk_full":
        fill(db_dir)
    elif fault == "deleted":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    elif fault == "replaced":
        SqliteEvidenceStore(tmp_path / "other.db").close()
        os.replace(tmp_path / "other.db", db)
    else:
        os.rename(db, db_dir / "elsewhere.db")
    results = [await _write(host, f"during{i}.txt") for i in range(20)]
    if fault == "disk_full":
        # the WAL may still have room for a few rows; every row it took is a real record
        refused = [r for r in results if r.reason is ReasonCode.EVIDENCE_UNAVAILABLE]
        assert refused, "a full disk never failed a call"
        written = {p.name for p in (sandbox / "public").iterdir()}
        recorded = {r.call_id for r in SqliteEvidenceStore(db, read_only=True).query()}
        assert {n for n in written if n != "before.txt"} <= recorded
    else:
        assert all(r.reason is ReasonCode.EVIDENCE_UNAVAILABLE for r in results)
        assert [p.name for p in (sandbox / "public").iterdir()] == ["before.txt"]


@pytest.mark.anyio
@pytest.mark.parametrize("fault", ["moved", "deleted", "wal_deleted"])
async def test_a_host_never_opens_files_at_the_path_that_are_not_its_stores(
    fault: str, tmp_path: Path
) -> None:
    """A store's files moved away or deleted between a turn's opening and its first call:
    the call fails closed, and the host opens nothing new at the path. Its no-wait
    connection, opened at that first call by path, did: with the database moved (a
    rotation) or deleted, it created an empty file there with the umask's mode (0644, where
    every store is 0600), SQLite deleted the host's ``-wal`` beside it with every row not
    yet checkpointed into the moved file (here the turn's opening), and a restart wrote
    later turns into the world-readable file; with the ``-wal`` deleted, it made a new one,
    and the host's close left a file nobody could read instead of the rows it still held
    (docs/evidence.md's failure table)."""
    from sharedos.evidence.turns import evidence_turn

    old_umask = os.umask(0o022)
    try:
        host, db = _files_host(tmp_path, tmp_path / "sandbox")
        async with evidence_turn(host.evidence, turn_id="faults"):
            if fault == "moved":
                os.rename(db, tmp_path / "rotated.db")
            elif fault == "deleted":
                db.unlink()
            else:
                Path(f"{db}-wal").unlink()
            res = await _write(host, "during.txt")
            assert res.reason is ReasonCode.EVIDENCE_UNAVAILABLE
            assert not (tmp_path / "sandbox/public/during.txt").exists()
            if fault != "wal_deleted":
                assert not db.exists(), oct(db.stat().st_mode)
                # the rows the -wal holds stay at the path
                assert Path(f"{db}-wal").exists()
    finally:
        os.umask(old_umask)
    host.evidence.close()  # type: ignore[attr-defined]
    if fault == "wal_deleted":
        # the host's close checkpointed what the deleted -wal held into the file
        kept = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            assert kept.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            assert ("faults", "open") in kept.execute("SELECT turn_id, kind FROM chain")
        finally:
            kept.close()
        return
    if fault == "moved":
        # the -wal put back beside the moved file gives the turn's opening back
        os.rename(f"{db}-wal", tmp_path / "rotated.db-wal")
        os.unlink(f"{db}-shm")
        moved = sqlite3.connect(f"file:{tmp_path / 'rotated.db'}?mode=ro", uri=True)
        try:
            assert moved.execute("SELECT turn_id, kind FROM chain").fetchall() == [
                ("faults", "open")
            ]
        finally:
            moved.close()
    # a restart makes its new store private, as every store is made
    SqliteEvidenceStore(db).close()
    assert db.stat().st_mode & 0o777 == 0o600


_FILE_SIZE_LIMIT_CHILD = """
import asyncio, json, os, resource, sys
from pathlib import Path
from tests.evidence.test_store_faults import _files_host, _write

async def main():
    tmp = Path(sys.argv[1])
    host, db = _files_host(tmp, tmp / "sandbox")
    await _write(host, "before.txt")
    # the store's files may not grow any more: a write past their size fails (EFBIG)
    limit = max(os.path.getsize(db), os.path.getsize(f"{db}-wal"))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    refused = [await _write(host, f"refused{i}.txt") for i in range(40)]
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
    after = await _write(host, "after.txt")
    await host.settle_unwritten()
    print(json.dumps({
        "refused": sorted({str(r.reason) for r in refused if r.reason is not None}),
        "details": sorted({str((r.structured or {}).get("detail")) for r in refused}),
        "after": str(after.reason),
        "records": {r.call_id: [r.status, str(r.reason)] for r in host.evidence.query()},
    }))

asyncio.run(main())
"""


def test_calls_refused_under_a_file_size_limit_are_recorded_once_it_lifts(tmp_path: Path) -> None:
    """docs/evidence.md's failure table: a disk full, or a file-size limit (``RLIMIT_FSIZE``,
    a quota's cousin), fails calls closed and loses nothing: once a write lands again,
    each refused call is recorded as it was answered. Under the limit SQLite says only
    "disk I/O error" (EFBIG), which was cause ``io``: a cause whose write may have landed,
    so the records of the calls it refused were never written (here 40 calls, none
    recorded)."""
    proc = subprocess.run(
        [sys.executable, "-c", _FILE_SIZE_LIMIT_CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["after"] == "None"
    refused = {c: v for c, v in got["records"].items() if c.startswith("refused")}
    assert got["refused"] == ["evidence_unavailable"], got
    assert any("disk_full" in d for d in got["details"]), got["details"]
    assert len(refused) == 40, got["records"]  # every call answered so is recorded
    assert all(v == ["failed", "evidence_unavailable"] for v in refused.values()), refused
    assert not (tmp_path / "sandbox/public/refused0.txt").exists()
