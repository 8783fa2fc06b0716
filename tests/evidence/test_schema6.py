# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)
"""Schema 6: approvals as events of the turn's chain (issue 28), on both stores.

* each event (requested, approved, consumed, ...) is a link of its turn's
  chain: it verifies, and editing one afterwards (the approver, say) is an
  ``edited`` finding;
* the database itself lets an approval be consumed once: a second
  ``consumed`` (another host's) is ``ApprovalTaken``, whatever the writer
  believed;
* a genuine version-5 store (the old kind check, no approval columns, no
  ``approvals`` view) reads as it is and migrates — a SQLite file when a host
  opens it (``chain`` rebuilt, every row copied as stored), a PostgreSQL
  database by ``sharedos evidence migrate`` — with every earlier link's hash
  unchanged; approvals then work there.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence.approvals import ApprovalLedger, ApprovalTaken, Binding
from sharedos.evidence.chain import APPROVAL_FIELDS
from sharedos.evidence.chain_sql import (
    CONTENT_OF,
    KINDS_CHECK,
    KINDS_CHECK_V5,
    VIEW_NAMES,
    VIEWS,
    chain_indexes,
    table_ddl,
)
from sharedos.evidence.migrate import LATEST
from sharedos.evidence.url import open_store
from sharedos.evidence.verify import verify_store
from tests.approval_data import release_binding
from tests.evidence.stores import Raw, backend, opener, raw, store  # noqa: F401
from tests.evidence.test_chain import attempt, ok, write_turn

BINDING = release_binding("T")
APPROVERS = ((("role", "maintainer"), ("group", "release")),)
#: the columns schema 6 added (an approval event's own fields)
NEW_COLUMNS = tuple(
    c
    for c in APPROVAL_FIELDS[1:]
    if not any(c in cols for kind, cols in CONTENT_OF.items() if kind != "approval")
)


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_approval_events_are_chain_links_and_an_edit_shows(store: Any, raw: Raw) -> None:
    write_turn(store, "W")  # another turn, closed: its chain is left alone
    seq = store.begin(attempt("c1", "T"))  # the call that asks, in an open turn
    store.finish(seq, ok())
    ledger = ApprovalLedger(store)
    asked = ledger.request(BINDING, call_id="c1", rule_ids=["r"], approvers=APPROVERS)
    yes = ledger.answer(asked.approval_id, approve=True, approver="maya", via="cli")
    used = ledger.consume(yes, call_id="c2")
    assert used.status == "consumed" and used.closed_call == "c2"
    kinds = [lk.kind for lk in store.iter_links("T")]
    assert kinds[-3:] == ["approval"] * 3 and "seal" not in kinds
    assert verify_store(store).clean
    again = ledger.get(asked.approval_id)
    assert again is not None and [e.event for e in again.events] == [
        "requested",
        "approved",
        "consumed",
    ]
    raw("UPDATE chain SET approver = 'mallory' WHERE kind = 'approval' AND event = 'approved'")
    assert [p.kind for p in verify_store(store).problems] == ["edited"]


def test_the_database_lets_an_approval_be_consumed_once(opener: Any) -> None:
    one, two = opener(), opener()  # two hosts on one store
    ledger_one, ledger_two = ApprovalLedger(one), ApprovalLedger(two)
    asked = ledger_one.request(BINDING, call_id="c1", rule_ids=["r"], approvers=APPROVERS)
    yes = ledger_one.answer(asked.approval_id, approve=True, approver="maya", via="cli")
    seen_by_two = ledger_two.get(asked.approval_id)
    assert seen_by_two is not None and seen_by_two.status == "approved"
    ledger_one.consume(yes, call_id="c2")
    # host two still holds the approved state it read: the store refuses its write
    with pytest.raises(ApprovalTaken):
        ledger_two.consume(seen_by_two, call_id="c3")
    with pytest.raises(ApprovalTaken):  # decided once too
        ledger_two._step(seen_by_two, "denied", approver="eve", via="cli")
    final = ledger_two.get(asked.approval_id)
    assert final is not None and final.status == "consumed" and final.closed_call == "c2"
    assert verify_store(one).clean


def _v5_table_sql(dialect: str, name: str) -> str:
    """``chain`` as schema 5 made it: no approval columns, the old kind check."""
    (table,) = table_ddl(dialect, name=name)  # type: ignore[arg-type]
    lines = [
        line
        for line in table.split("\n")
        if not any(line.strip().startswith(f"{c} ") for c in NEW_COLUMNS)
    ]
    text = "\n".join(lines).replace(KINDS_CHECK, KINDS_CHECK_V5)
    return text.replace(",\n)", "\n)")


def _v5_views() -> list[str]:
    return [v for v in VIEWS if not v.startswith("CREATE VIEW approvals")]


def version_5_sqlite(path: Path) -> None:
    s = open_store(str(path))
    try:
        write_turn(s, "T5")
        seq = s.begin(attempt("sh", "T5", shadow={"policy": "s" * 64, "effect": "deny"}))
        s.finish(seq, ok())
    finally:
        s.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=OFF")
    kept = [str(r[1]) for r in conn.execute("PRAGMA table_info(chain)") if r[1] not in NEW_COLUMNS]
    conn.execute("BEGIN")
    for name in reversed(VIEW_NAMES):
        conn.execute(f"DROP VIEW {name}")
    conn.execute(_v5_table_sql("sqlite", "chain_old"))
    cols = ", ".join(kept)
    conn.execute(f"INSERT INTO chain_old ({cols}) SELECT {cols} FROM chain")
    conn.execute("DROP TABLE chain")
    conn.execute("ALTER TABLE chain_old RENAME TO chain")
    for statement in (*chain_indexes(), *_v5_views()):
        conn.execute(statement)
    conn.execute("PRAGMA user_version=5")
    conn.execute("COMMIT")
    conn.close()


def test_a_version_5_sqlite_file_reads_as_it_is_and_migrates_on_open(tmp_path: Path) -> None:
    db = tmp_path / "v5.db"
    version_5_sqlite(db)
    conn = sqlite3.connect(db)
    try:
        (ddl,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chain'").fetchone()
    finally:
        conn.close()
    assert "'approval'" not in ddl and "approval_id" not in ddl  # really the old layout
    with open_store(str(db), read_only=True) as old:
        assert old.schema_version == 5
        assert verify_store(old).clean
        assert ApprovalLedger(old).every() == []
        before = {lk.pos: lk.hash for lk in old.iter_links("T5")}
        records = [r.to_dict() for r in old.query("T5")]
    with open_store(str(db)) as s:  # a host's writable open migrates
        assert s.schema_version == LATEST == 6
        assert {lk.pos: lk.hash for lk in s.iter_links("T5")} == before
        assert [r.to_dict() for r in s.query("T5")] == records
        ledger = ApprovalLedger(s)
        asked = ledger.request(_binding("N6"), call_id="c1", rule_ids=["r"], approvers=APPROVERS)
        assert ledger.get(asked.approval_id) is not None
        assert verify_store(s).clean
    conn = sqlite3.connect(db)
    try:
        shown = conn.execute("SELECT approval_id, event FROM approvals").fetchall()
        fk = conn.execute("PRAGMA foreign_key_check").fetchall()
    finally:
        conn.close()
    assert shown == [(asked.approval_id, "requested")] and fk == []


def _binding(turn_id: str) -> Binding:
    return Binding(
        turn_id=turn_id,
        principal=BINDING.principal,
        tenant=BINDING.tenant,
        tool=BINDING.tool,
        resource=BINDING.resource,
        arguments_digest=BINDING.arguments_digest,
        policy_hash=BINDING.policy_hash,
    )


def test_a_version_5_postgresql_database_is_migrated_by_the_operator(pg_url: str) -> None:
    s = open_store(pg_url)
    try:
        write_turn(s, "T5")
    finally:
        s.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for name in reversed(VIEW_NAMES):
            conn.execute(f"DROP VIEW {name}")
        for index in ("requested", "decided", "closed"):
            conn.execute(f"DROP INDEX chain_approval_{index}")
        conn.execute("DROP INDEX chain_approval")
        for column in NEW_COLUMNS:
            conn.execute(f"ALTER TABLE chain DROP COLUMN {column}")
        conn.execute("ALTER TABLE chain DROP CONSTRAINT chain_kind_check")
        conn.execute(
            f"ALTER TABLE chain ADD CONSTRAINT chain_kind_check CHECK (kind IN {KINDS_CHECK_V5})"
        )
        for view in _v5_views():
            conn.execute(view)
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    with open_store(pg_url, read_only=True) as old:
        assert old.schema_version == 5
        assert verify_store(old).clean
        assert ApprovalLedger(old).every() == []
        before = {lk.pos: lk.hash for lk in old.iter_links("T5")}
    code, out = cli("evidence", "migrate", "--db", pg_url)
    assert code == 0 and f"migrated evidence schema 5 -> {LATEST}" in out, out
    with open_store(pg_url) as s:
        assert {lk.pos: lk.hash for lk in s.iter_links("T5")} == before
        ledger = ApprovalLedger(s)
        asked = ledger.request(_binding("N6"), call_id="c1", rule_ids=["r"], approvers=APPROVERS)
        yes = ledger.answer(asked.approval_id, approve=True, approver="maya", via="cli")
        ledger.consume(yes, call_id="c2")
        with pytest.raises(ApprovalTaken):
            ledger.consume(yes, call_id="c3")
        assert verify_store(s).clean
