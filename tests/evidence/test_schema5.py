# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)
"""Schema 5: the attempt's shadow decision (``[policy] shadow``), on both stores.

* a shadow decision is stored in the attempt's own row, read back, exported,
  and hashed into its link (computed here with ``rfc8785`` itself, not this
  SharedOS's encoder); editing it afterwards is an ``edited`` finding;
* a row without one hashes exactly as at schema 4 (every link written before
  keeps its hash);
* a version-4 store reads as it is (the shadow decision null) and verifies; a
  SQLite file is migrated when a host opens it, a PostgreSQL database by
  ``sharedos evidence migrate`` (hosts are refused until then), the grants on
  its views kept; every link verifies after as before, new rows continue the
  chains.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import rfc8785
from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence.chain import ATTEMPT_FIELDS
from sharedos.evidence.chain_sql import VIEW_NAMES, VIEWS
from sharedos.evidence.export import iter_records
from sharedos.evidence.migrate import LATEST
from sharedos.evidence.store import EvidenceStoreError
from sharedos.evidence.url import open_store
from sharedos.evidence.verify import verify_store
from tests.evidence.stores import Raw, backend, opener, raw, store  # noqa: F401
from tests.evidence.test_chain import attempt, ok, write_turn

SHADOW = {
    "policy": "s" * 64,
    "effect": "deny",
    "reason": "forbidden",
    "rule_ids": ["files-private-admins-only"],
}


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def reference_hash(prev: str, values: dict[str, Any]) -> str:
    """An attempt link's hash from rfc8785 itself: null late fields left out."""
    body = {"kind": "attempt", "prev": prev, **values}
    for late in ("context", "shadow"):
        if body.get(late) is None:
            body.pop(late, None)
    return "sha256:" + hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def test_a_shadow_decision_is_stored_read_back_and_chained(store: Any, raw: Raw) -> None:
    seq = store.begin(attempt("s1", "S", shadow=SHADOW, context={"principal": "bob"}))
    store.finish(seq, ok())
    plain = store.begin(attempt("s2", "S"))  # no shadow policy: null
    store.finish(plain, ok())
    by_call = {r.call_id: r for r in store.query("S")}
    assert by_call["s1"].shadow == SHADOW and by_call["s2"].shadow is None
    assert [r.shadow for r in iter_records(store, "S")] == [SHADOW, None]
    assert by_call["s1"].to_dict()["shadow"] == SHADOW
    # both links hash as an independent encoder says
    for link in (lk for lk in store.iter_links("S") if lk.kind == "attempt"):
        values = dict(zip(ATTEMPT_FIELDS, link.values or (), strict=True))
        assert link.hash == reference_hash(link.prev, values)
    assert verify_store(store).clean
    # a shadow decision changed afterwards is an edit the chain shows
    raw("UPDATE chain SET shadow = replace(shadow, 'deny', 'allow') WHERE call_id = 's1'")
    assert [p.kind for p in verify_store(store).problems] == ["edited"]


def _downgrade_sql(dialect: str) -> list[str]:
    """What turns a store of this SharedOS into the version-4 layout (no ``shadow``)."""
    views = [v.replace(", a.shadow AS shadow", "").replace(", shadow AS shadow", "") for v in VIEWS]
    drops = [f"DROP VIEW {name}" for name in reversed(VIEW_NAMES)]
    return [*drops, "ALTER TABLE chain DROP COLUMN shadow", *views]


def version_4_sqlite(path: Path) -> None:
    s = open_store(str(path))
    try:
        write_turn(s, "T4")
    finally:
        s.close()
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in _downgrade_sql("sqlite"):
        conn.execute(statement)
    conn.execute("PRAGMA user_version=4")
    conn.close()


def test_a_version_4_sqlite_file_reads_as_it_is_and_migrates_on_open(tmp_path: Path) -> None:
    db = tmp_path / "v4.db"
    version_4_sqlite(db)
    before = {}
    with open_store(str(db), read_only=True) as old:
        assert old.schema_version == 4
        assert {r.shadow for r in old.query("T4")} == {None}
        assert verify_store(old).clean
        before = {lk.pos: lk.hash for lk in old.iter_links("T4")}
    code, out = cli("evidence", "verify", "--db", str(db))
    assert code == 0, out
    code, out = cli("evidence", "migrate", "--db", str(db))
    assert code == 0 and f"migrated evidence schema 4 -> {LATEST}" in out, out
    with open_store(str(db)) as s:
        assert {lk.pos: lk.hash for lk in s.iter_links("T4")} == before
        seq = s.begin(attempt("new", "T4", shadow=SHADOW))
        s.finish(seq, ok())
        assert [r.shadow for r in s.query("T4", call_id="new")] == [SHADOW]
        assert verify_store(s).clean
    conn = sqlite3.connect(db)
    try:
        (shown,) = conn.execute("SELECT shadow FROM attempts WHERE call_id = 'new'").fetchone()
    finally:
        conn.close()
    assert json.loads(shown) == SHADOW  # the auditors' view shows it


def test_a_version_4_postgresql_database_is_migrated_with_its_grants(pg_url: str) -> None:
    s = open_store(pg_url)
    try:
        write_turn(s, "T4")
    finally:
        s.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for statement in _downgrade_sql("postgresql"):
            conn.execute(statement)
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
        conn.execute("DROP ROLE IF EXISTS shadow_auditor")
        conn.execute("CREATE ROLE shadow_auditor")
        conn.execute("GRANT SELECT ON attempts, evidence TO shadow_auditor")
    with open_store(pg_url, read_only=True) as old:
        assert old.schema_version == 4
        assert {r.shadow for r in old.query("T4")} == {None}
        assert verify_store(old).clean
        before = {lk.pos: lk.hash for lk in old.iter_links("T4")}
    # a host does not write an older schema: the operator migrates, once
    try:
        open_store(pg_url).close()
        raise AssertionError("a host opened a version-4 database for writing")
    except EvidenceStoreError as exc:
        assert "sharedos evidence migrate" in str(exc)
    code, out = cli("evidence", "migrate", "--db", pg_url)
    assert code == 0 and f"migrated evidence schema 4 -> {LATEST}" in out, out
    with psycopg.connect(pg_url, autocommit=True) as conn:
        grants = conn.execute(
            "SELECT table_name FROM information_schema.role_table_grants "
            "WHERE grantee = 'shadow_auditor' AND privilege_type = 'SELECT' ORDER BY 1"
        ).fetchall()
        # schema 6's approvals view, new at the step, is granted as the attempts view is
        assert [g[0] for g in grants] == ["approvals", "attempts", "evidence"]
    with open_store(pg_url) as s:
        assert {lk.pos: lk.hash for lk in s.iter_links("T4")} == before
        seq = s.begin(attempt("new", "T4", shadow=SHADOW))
        s.finish(seq, ok())
        assert [r.shadow for r in s.query("T4", call_id="new")] == [SHADOW]
        assert verify_store(s).clean
    code, out = cli("evidence", "migrate", "--db", pg_url)
    assert code == 0 and "up to date" in out
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP OWNED BY shadow_auditor")
        conn.execute("DROP ROLE shadow_auditor")
