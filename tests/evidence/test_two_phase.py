"""The two-phase store contract: attempt rows, outcome rows, interrupted attempts, migration."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence import (
    SCHEMA_VERSION,
    EvidenceRecord,
    EvidenceStoreError,
    OutcomeRecord,
    SqliteEvidenceStore,
    arguments_digest,
)
from sharedos.outcomes import Outcome, ReasonCode


def attempt(call: str = "c1", turn: str = "t1", **kw: object) -> EvidenceRecord:
    base: dict[str, object] = {
        "turn_id": turn,
        "call_id": call,
        "tool": "files.write",
        "started_at": "2026-12-02T10:00:00.000000Z",
        "arguments_digest": arguments_digest({"path": "/public/x"}),
        "arguments": {"path": "/public/x"},
        "effect": "allow",
        "resource": "/public/x",
    }
    base.update(kw)
    return EvidenceRecord(**base)  # type: ignore[arg-type]


def done(outcome: Outcome = Outcome.SUCCEEDED, reason: ReasonCode | None = None) -> OutcomeRecord:
    return OutcomeRecord(outcome, "2026-12-02T10:00:00.000500Z", 0.5, reason)


def test_an_attempt_without_an_outcome_reads_as_interrupted(tmp_path: Path) -> None:
    store = SqliteEvidenceStore(tmp_path / "e.db")
    a = store.begin(attempt("a"))
    b = store.begin(attempt("b"))
    store.finish(a, done())
    rec_a, rec_b = store.query("t1")
    assert (rec_a.seq, rec_a.status, rec_a.outcome) == (a, "succeeded", Outcome.SUCCEEDED)
    assert (rec_b.seq, rec_b.status, rec_b.outcome) == (b, "interrupted", None)
    assert rec_b.finished_at is None and rec_b.resource == "/public/x"
    assert [r.call_id for r in store.query(outcome="interrupted")] == ["b"]
    counts = store.counts()
    assert counts.total == 2 and counts.interrupted == 1
    assert counts.by_outcome == {"interrupted": 1, "succeeded": 1}
    assert counts.by_reason == {"interrupted": 1, "succeeded": 1}
    assert rec_b.to_dict()["status"] == "interrupted"
    assert EvidenceRecord.from_dict(rec_b.to_dict()) == rec_b


def test_an_outcome_is_written_once_and_only_for_a_known_attempt(tmp_path: Path) -> None:
    store = SqliteEvidenceStore(tmp_path / "e.db")
    seq = store.begin(attempt())
    store.finish(seq, done())
    with pytest.raises(EvidenceStoreError) as again:
        store.finish(seq, done(Outcome.FAILED, ReasonCode.HANDLER_ERROR))
    assert again.value.cause == "conflict"
    with pytest.raises(EvidenceStoreError) as unknown:
        store.finish(seq + 100, done())
    assert unknown.value.cause == "conflict"
    (only,) = store.query()
    assert only.outcome is Outcome.SUCCEEDED  # the first outcome stands


def test_record_commits_attempt_and_outcome_together(tmp_path: Path) -> None:
    store = SqliteEvidenceStore(tmp_path / "e.db")
    full = attempt().with_outcome(done(Outcome.DENIED, ReasonCode.FORBIDDEN))
    seq = store.record(full)
    (back,) = store.query()
    assert back.seq == seq and back.status == "denied" and back.reason is ReasonCode.FORBIDDEN
    with pytest.raises(ValueError):
        store.record(attempt())  # a bare attempt goes through begin()


# The version-1 layout, as SharedOS 0.1 created it (kept here verbatim as the fixture).
V1_DDL = """CREATE TABLE evidence (
    seq INTEGER PRIMARY KEY, turn_id TEXT NOT NULL, call_id TEXT NOT NULL, tool TEXT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('succeeded','denied','failed','cancelled')),
    started_at TEXT NOT NULL, finished_at TEXT NOT NULL, duration_ms REAL NOT NULL,
    arguments_digest TEXT NOT NULL, arguments TEXT, reason TEXT, effect TEXT, resource TEXT,
    namespace TEXT, action TEXT, rule_ids TEXT NOT NULL DEFAULT '[]', error TEXT,
    catalog_hash TEXT, policy_hash TEXT, principal TEXT, tenant TEXT, diagnostics TEXT,
    identity TEXT);
CREATE INDEX evidence_turn ON evidence (turn_id, seq);
CREATE INDEX evidence_call ON evidence (call_id);
PRAGMA user_version = 1;"""


def _v1_database(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(V1_DDL)
    for i, (outcome, reason) in enumerate(
        [("succeeded", None), ("denied", "forbidden"), ("failed", "timeout")]
    ):
        conn.execute(
            "INSERT INTO evidence (seq, turn_id, call_id, tool, outcome, started_at, "
            "finished_at, duration_ms, arguments_digest, arguments, reason, rule_ids) "
            "VALUES (?, 'old', ?, 'files.read', ?, '2026-01-01T00:00:00Z', "
            "'2026-01-01T00:00:01Z', 1.5, 'sha256:x', ?, ?, ?)",
            (10 + i, f"old-{i}", outcome, json.dumps({"path": f"/p{i}"}), reason, '["r1"]'),
        )
    conn.commit()
    conn.close()


def test_a_version_1_file_is_read_as_is_when_read_only(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    _v1_database(db)
    store = SqliteEvidenceStore(db, read_only=True)
    assert store.schema_version == 1
    assert [(r.seq, r.status) for r in store.query()] == [
        (10, "succeeded"),
        (11, "denied"),
        (12, "failed"),
    ]
    with pytest.raises(EvidenceStoreError) as err:
        store.begin(attempt())
    assert err.value.cause == "read_only"
    store.close()
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == 1


def test_a_version_1_file_is_migrated_when_opened_for_writing(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    _v1_database(db)
    before = SqliteEvidenceStore(db, read_only=True).query()
    store = SqliteEvidenceStore(db)
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert store.query() == before  # every field of every old record survives
    seq = store.begin(attempt("new"))
    assert seq > 12  # sequence numbers keep growing past the migrated ones
    assert store.counts().by_outcome == {
        "denied": 1,
        "failed": 1,
        "interrupted": 1,
        "succeeded": 1,
    }
    # the view keeps the version-1 column names for ad-hoc SQL
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM evidence WHERE outcome IS NULL").fetchone() == (1,)


def test_an_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "future.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(EvidenceStoreError, match="schema version 99"):
        SqliteEvidenceStore(db)


def test_the_cli_shows_and_counts_interrupted_attempts(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db)
    store.finish(store.begin(attempt("ok")), done())
    store.begin(attempt("cut"))  # the host died here
    store.close()
    runner = CliRunner()
    listed = runner.invoke(main, ["evidence", "list", "--db", str(db)])
    assert listed.exit_code == 0
    (cut_line,) = [line for line in listed.output.splitlines() if " cut " in line]
    assert " interrupted " in cut_line and "succeeded" not in cut_line
    only = runner.invoke(
        main, ["evidence", "list", "--db", str(db), "--outcome", "interrupted", "--format", "json"]
    )
    assert [r["call_id"] for r in json.loads(only.output)] == ["cut"]
    exported = runner.invoke(main, ["evidence", "export", "--db", str(db)])
    rows = [json.loads(line) for line in exported.output.splitlines()]
    assert [(r["call_id"], r["status"], r["outcome"]) for r in rows] == [
        ("ok", "succeeded", "succeeded"),
        ("cut", "interrupted", None),
    ]
    counts = runner.invoke(main, ["evidence", "counts", "--db", str(db)])
    assert "2 attempts" in counts.output
    assert "interrupted (attempt recorded, outcome never written): 1" in counts.output
    as_json = json.loads(
        runner.invoke(main, ["evidence", "counts", "--db", str(db), "--format", "json"]).output
    )
    assert as_json["interrupted"] == 1 and as_json["total"] == 2
