"""Adversarial review of the evidence store.

Finding (fixed): the SQLite file (and its -wal/-shm companions) was created
with the process umask, 0644 by default: every local user could read every
recorded argument, resource, principal and error of every turn. A new
database is now created 0600 (SQLite gives -wal and -shm the database's mode).

Regression guards: every value reaches SQLite as a bound parameter, so no
field of an attempt can inject SQL; secret arguments are redacted.
"""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import pytest

from sharedos.evidence import SqliteEvidenceStore
from sharedos.evidence.record import EvidenceRecord, arguments_digest
from sharedos.outcomes import Outcome, ReasonCode


def _record(**overrides: object) -> EvidenceRecord:
    base: dict[str, object] = {
        "turn_id": "t1",
        "call_id": uuid.uuid4().hex,
        "tool": "files.read",
        "outcome": Outcome.DENIED,
        "started_at": "2026-01-01T00:00:00Z",
        "finished_at": "2026-01-01T00:00:00Z",
        "duration_ms": 0.1,
        "arguments_digest": arguments_digest({}),
        "arguments": {},
        "reason": ReasonCode.FORBIDDEN,
    }
    base.update(overrides)
    return EvidenceRecord(**base)  # type: ignore[arg-type]


def test_a_new_database_and_its_wal_are_private_to_the_owner(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the common default: files 0644 unless created private
    try:
        db = tmp_path / "evidence.db"
        store = SqliteEvidenceStore(db)
        store.record(_record())
        companions = [p for p in tmp_path.iterdir() if p.name.startswith("evidence.db")]
        assert {p.name for p in companions} >= {"evidence.db", "evidence.db-wal"}
        for path in companions:
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode & 0o077 == 0, f"{path.name} is mode {mode:o}"
        store.close()
    finally:
        os.umask(old)


def test_an_existing_database_keeps_its_mode_and_is_still_opened(tmp_path: Path) -> None:
    # an operator who deliberately shared a database keeps that choice (we never chmod theirs)
    db = tmp_path / "shared.db"
    SqliteEvidenceStore(db).close()
    os.chmod(db, 0o640)
    store = SqliteEvidenceStore(db)
    assert store.record(_record()) >= 1
    assert stat.S_IMODE(db.stat().st_mode) == 0o640
    store.close()


INJECTIONS = [
    "x'); DROP TABLE evidence; --",
    "' OR '1'='1",
    '" OR 1=1 --',
    "\x00'; DELETE FROM evidence; --",
    "%' OR 1=1 --",
]


@pytest.mark.parametrize("payload", INJECTIONS)
def test_no_field_can_inject_sql(tmp_path: Path, payload: str) -> None:
    store = SqliteEvidenceStore(tmp_path / "inj.db")
    store.record(_record(turn_id="benign"))
    rec = _record(
        turn_id=payload,
        call_id=payload,
        tool=payload,
        arguments={payload: payload},
        resource=payload,
        namespace=payload,
        action=payload,
        rule_ids=(payload,),
        error=payload,
        principal=payload,
        tenant=payload,
        diagnostics={"d": payload},
        identity={payload: 1},
    )
    store.record(rec)
    # the hostile record is stored verbatim and selects only itself
    (got,) = store.query(turn_id=payload)
    assert (got.tool, got.error, got.principal, got.rule_ids) == (
        payload,
        payload,
        payload,
        (payload,),
    )
    assert got.arguments == {payload: payload}
    assert store.query(call_id=payload) == [got]
    assert store.query(outcome=payload) == []
    assert store.counts(turn_id=payload).total == 1
    assert store.counts().total == 2  # nothing dropped or deleted
    assert dict(store.turns()) == {"benign": 1, payload: 1}
    store.close()


def test_a_database_created_through_a_dangling_symlink_is_private(tmp_path: Path) -> None:
    # /var/lib/sharedos/evidence.sqlite -> /data/evidence.sqlite, not created yet: the
    # exclusive create refused the symlink ("exists"), and SQLite then created the target
    # with the umask, 0644: every local user could read every recorded argument
    old = os.umask(0o022)
    try:
        target = tmp_path / "data" / "evidence.db"
        target.parent.mkdir()
        link = tmp_path / "evidence.db"
        link.symlink_to(target)
        store = SqliteEvidenceStore(link)
        store.record(_record())
        companions = [p for p in target.parent.iterdir() if p.name.startswith("evidence.db")]
        assert {p.name for p in companions} >= {"evidence.db", "evidence.db-wal"}
        for path in companions:
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode & 0o077 == 0, f"{path.name} is mode {mode:o}"
        assert link.is_symlink()  # the operator's link is left as it was
        store.close()
    finally:
        os.umask(old)
