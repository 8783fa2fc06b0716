"""SqliteEvidenceStore: round trips, odd input, concurrency across threads and processes."""

from __future__ import annotations

import dataclasses
import multiprocessing
import sqlite3
import threading
from pathlib import Path

import pytest

from sharedos.evidence import (
    EvidenceRecord,
    EvidenceStore,
    EvidenceStoreError,
    SqliteEvidenceStore,
    arguments_digest,
)
from sharedos.evidence.record import safe_text, storable_arguments
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.redaction import redact_fields as redact_arguments


def rec(
    turn: str = "t1", call: str = "c1", outcome: Outcome = Outcome.DENIED, **kw: object
) -> EvidenceRecord:
    base: dict[str, object] = {
        "turn_id": turn,
        "call_id": call,
        "tool": "files.read",
        "outcome": outcome,
        "started_at": "2026-12-02T10:00:00.000000Z",
        "finished_at": "2026-12-02T10:00:00.000100Z",
        "duration_ms": 0.1,
        "arguments_digest": arguments_digest({"path": "/x"}),
        "arguments": {"path": "/x"},
        "reason": ReasonCode.FORBIDDEN if outcome is Outcome.DENIED else None,
    }
    base.update(kw)
    return EvidenceRecord(**base)  # type: ignore[arg-type]


def test_store_implements_the_protocol(tmp_path: Path) -> None:
    assert isinstance(SqliteEvidenceStore(tmp_path / "e.db"), EvidenceStore)
    assert isinstance(SqliteEvidenceStore(":memory:"), EvidenceStore)


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    store = SqliteEvidenceStore(tmp_path / "e.db")
    original = rec(
        resource="/private/a.txt",
        namespace="files",
        action="read",
        effect="deny",
        rule_ids=("files.sos:9", "files.sos:10"),
        error="nope",
        catalog_hash="ab" * 32,
        policy_hash="cd" * 32,
        principal="alice",
        tenant="acme",
        diagnostics={"alias": "mcp__sharedos__files_read", "meta": {"progressToken": 1}},
        identity={"harness": "claude-code", "version": "2.1"},
    )
    seq = store.record(original)
    (back,) = store.query("t1")
    assert back.seq == seq
    assert back == dataclasses.replace(original, seq=seq)
    assert EvidenceRecord.from_dict(back.to_dict()) == back


def test_wal_mode_and_synchronous_setting(tmp_path: Path) -> None:
    SqliteEvidenceStore(tmp_path / "e.db").record(rec())
    conn = sqlite3.connect(tmp_path / "e.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(ValueError):
        SqliteEvidenceStore(tmp_path / "f.db", synchronous="OFF")  # type: ignore[arg-type]


def test_sequence_and_filters(tmp_path: Path) -> None:
    store = SqliteEvidenceStore(tmp_path / "e.db")
    seqs = [
        store.record(rec("t1", "a")),
        store.record(rec("t2", "b", Outcome.SUCCEEDED)),
        store.record(rec("t1", "c", Outcome.FAILED, reason=ReasonCode.TIMEOUT)),
    ]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    assert [r.call_id for r in store.query("t1")] == ["a", "c"]
    assert [r.call_id for r in store.query(call_id="b")] == ["b"]
    assert [r.call_id for r in store.query(outcome="failed")] == ["c"]
    assert [r.call_id for r in store.query(limit=1)] == ["a"]
    counts = store.counts()
    assert counts.total == 3 and counts.denied == 1
    assert counts.denial_rate == pytest.approx(1 / 3)
    assert counts.by_reason == {"forbidden": 1, "succeeded": 1, "timeout": 1}
    assert store.counts("t1").by_outcome == {"denied": 1, "failed": 1}
    assert store.turns() == [("t1", 2), ("t2", 1)]


def test_odd_tool_strings_are_stored_not_rejected(tmp_path: Path) -> None:
    store = SqliteEvidenceStore(tmp_path / "e.db")
    for tool in ["\ud800lone surrogate", "nul\x00byte", "x" * 5000, "emoji 🙂"]:
        store.record(rec(tool=safe_text(tool), arguments={"k": tool}))
    tools = [r.tool for r in store.query()]
    assert tools[0] == "\\ud800lone surrogate"
    assert tools[1] == "nul\x00byte"
    assert tools[2].endswith("[truncated, 5000 chars]")
    assert tools[3] == "emoji 🙂"
    assert store.query()[0].arguments == {"k": "\ud800lone surrogate"}


def test_redaction_and_digest_helpers() -> None:
    args = {"path": "/a", "token": "hunter2"}
    red = redact_arguments(args, {"token"})
    assert red == {"path": "/a", "token": "[redacted]"}
    assert args["token"] == "hunter2"
    assert arguments_digest({"b": 1, "a": 2}) == arguments_digest({"a": 2, "b": 1})
    assert arguments_digest({"a": 1}) != arguments_digest({"a": 2})
    assert arguments_digest(float("nan")).startswith("sha256:")
    assert storable_arguments({"x": "y" * 100_000}) == {"$truncated": True, "$bytes": 100_009}
    assert "$unstorable" in storable_arguments({"x": object()})


def test_many_threads_share_one_store(tmp_path: Path) -> None:
    store = SqliteEvidenceStore(tmp_path / "e.db")

    def worker(i: int) -> None:
        for j in range(50):
            store.record(rec(f"turn{i}", f"c{i}-{j}"))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.counts().total == 400
    assert all(n == 50 for _, n in store.turns())


def _process_writer(path: str, proc: int, n: int) -> None:
    store = SqliteEvidenceStore(path)
    for j in range(n):
        store.record(rec(f"proc{proc}", f"p{proc}-{j}"))


def test_many_processes_share_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "e.db")
    SqliteEvidenceStore(path)  # create the schema once up front is not required, but typical
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_process_writer, args=(path, i, 100)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = SqliteEvidenceStore(path)
    records = store.query()
    assert len(records) == 400
    assert len({r.seq for r in records}) == 400
    assert len({r.call_id for r in records}) == 400


def test_unopenable_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EvidenceStoreError, match="does not exist"):
        SqliteEvidenceStore(tmp_path / "missing-dir" / "e.db")
    (tmp_path / "not.db").write_text("this is not sqlite" * 100)
    with pytest.raises(EvidenceStoreError, match="cannot open"):
        SqliteEvidenceStore(tmp_path / "not.db")


def test_writing_to_a_closed_store_raises_a_store_error(tmp_path: Path) -> None:
    store = SqliteEvidenceStore(tmp_path / "e.db")
    store.close()
    with pytest.raises(EvidenceStoreError):
        store.record(rec())


def _forked_writer(store: SqliteEvidenceStore) -> None:
    store.record(rec("forked", "from-child"))


def test_a_store_inherited_through_fork_reopens_its_connection(tmp_path: Path) -> None:
    store = SqliteEvidenceStore(tmp_path / "e.db")
    store.record(rec("forked", "from-parent"))
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_forked_writer, args=(store,))
    # fork while another thread of the parent is inside the store (holding its lock)
    with store._locked():
        child.start()
    child.join(20)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0, "the child deadlocked on a lock inherited through fork()"
    store.record(rec("forked", "parent-again"))
    assert [r.call_id for r in store.query("forked")] == [
        "from-parent",
        "from-child",
        "parent-again",
    ]


def test_a_checkpoint_does_not_hold_writers_while_a_long_reader_pins_the_wal(
    tmp_path: Path,
) -> None:
    # an export piped into a pager holds a read transaction: the WAL cannot be restarted
    # until it ends. The checkpoint waited for it on the write lock, up to the store's
    # busy timeout (1.5 s by default; 30 s here), every time it came due: a host's calls,
    # and every other host's, stalled that long again and again while the reader stayed
    import os
    import time

    from tests.evidence.test_chain import attempt
    from tests.timing import bound

    db = tmp_path / "evidence.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=30)
    reader = sqlite3.connect(db, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM chain").fetchone()  # its snapshot pins the WAL
        for i in range(5000):
            store.begin(attempt(f"c{i}", arguments={"text": "x" * 2000}))
            if os.stat(f"{db}-wal").st_size > 5 * 1024 * 1024:
                break
        started = time.perf_counter()
        store.checkpoint()
        assert time.perf_counter() - started < bound(3.0)
        store.begin(attempt("after"))  # the store still writes
    finally:
        reader.close()
        store.close()
    check = SqliteEvidenceStore(db, read_only=True)
    try:
        assert any(r.call_id == "after" for r in check.iter_records())
    finally:
        check.close()
