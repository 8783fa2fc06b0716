"""Schema 4 (each row carries its link) and the commits around it (issue 27), on both stores.

* a version-3 store — rows and links written the way a version-3 SharedOS
  wrote them, seals signed — is migrated by ``sharedos evidence migrate``:
  every link keeps its hash and every attempt its seq, ``verify`` (with the
  key) passes after as before, and new writes continue each chain; what a
  tampered version-3 store held wrong is still reported after;
* a commit is one statement: one row per ``begin`` / ``finish``;
* group commit: several writes in one transaction, each answered only with
  what landed, one bad write never failing the others.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence.appender import Opening
from sharedos.evidence.chain import (
    OPEN_FIELDS,
    OUTCOME_FIELDS,
    SEAL_FIELDS,
    Signer,
    genesis,
    load_public_key,
)
from sharedos.evidence.migrate import LATEST, SQLITE_V3, V3_ATTEMPT_FIELDS, pg_migrate
from sharedos.evidence.record import OutcomeRecord
from sharedos.evidence.rows import plain_attempt_values
from sharedos.evidence.sqlite_schema import SCHEMA_V2
from sharedos.evidence.store import EvidenceStoreError
from sharedos.evidence.url import open_store
from sharedos.evidence.verify import verify_store
from sharedos.outcomes import Outcome
from tests.evidence.test_chain import attempt, ok

Run = Callable[..., Any]


def v3_hash(kind: str, prev: str, fields: tuple[str, ...], values: Any) -> str:
    """A link hash as version 3 computed it, from rfc8785 itself (not this SharedOS's encoder)."""
    import hashlib

    import rfc8785

    body = rfc8785.dumps({"kind": kind, "prev": prev, **dict(zip(fields, values, strict=True))})
    return "sha256:" + hashlib.sha256(body).hexdigest()


def write_v3_turn(run: Run, turn: str, signer: Signer, *, calls: int = 3) -> list[int]:
    """One turn as a version-3 SharedOS wrote it: opening, attempts, outcomes, signed seal."""
    opening = Opening(turn, "2026-12-01T00:00:00.000000Z", "c" * 64, "p" * 64, "r3", '{"v":3}')
    prev = genesis(turn)
    h = v3_hash("open", prev, OPEN_FIELDS, opening.values())
    run(
        "INSERT INTO turns (turn_id, opened_at, catalog_hash, policy_hash, policy_revision, "
        "identity) VALUES (?, ?, ?, ?, ?, ?)",
        *opening.values(),
    )
    _link(run, turn, 0, "open", None, prev, h)
    pos, prev, seqs = 1, h, []
    for i in range(calls):
        values = plain_attempt_values(attempt(f"{turn}.{i}", turn))[: len(V3_ATTEMPT_FIELDS)]
        cols = ", ".join(V3_ATTEMPT_FIELDS)
        marks = ", ".join("?" * len(V3_ATTEMPT_FIELDS))
        seq = run(f"INSERT INTO attempts ({cols}) VALUES ({marks}) RETURNING seq", *values)[0][0]
        seqs.append(seq)
        a_hash = v3_hash("attempt", prev, V3_ATTEMPT_FIELDS, values)
        _link(run, turn, pos, "attempt", seq, prev, a_hash)
        out = ("succeeded", None, "2026-12-01T00:00:01.000000Z", 0.5, None)
        run(
            "INSERT INTO outcomes (seq, outcome, reason, finished_at, duration_ms, error) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            seq,
            *out,
        )
        o_hash = v3_hash("outcome", a_hash, OUTCOME_FIELDS, (a_hash, *out))
        _link(run, turn, pos + 1, "outcome", seq, a_hash, o_hash)
        pos, prev = pos + 2, o_hash
    seal = (turn, "2026-12-01T00:00:02.000000Z", pos, signer.key_id)
    s_hash = v3_hash("seal", prev, SEAL_FIELDS, seal)
    run(
        "INSERT INTO seals (turn_id, pos, closed_at, links, key_id, signature) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        turn,
        pos,
        seal[1],
        pos,
        signer.key_id,
        signer.sign(s_hash),
    )
    _link(run, turn, pos, "seal", None, prev, s_hash)
    return seqs


def _link(run: Run, turn: str, pos: int, kind: str, seq: int | None, prev: str, h: str) -> None:
    run(
        "INSERT INTO links (turn_id, pos, kind, seq, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?)",
        turn,
        pos,
        kind,
        seq,
        prev,
        h,
    )


def v3_store(kind: str, location: str, signer: Signer) -> dict[str, list[int]]:
    """A version-3 store at ``location`` with two signed turns; the seqs of their attempts."""
    if kind == "sqlite":
        conn = sqlite3.connect(location, isolation_level=None)
        for statement in (*SCHEMA_V2, *SQLITE_V3):
            conn.execute(statement)

        def run(sql: str, *params: Any) -> list[Any]:
            return conn.execute(sql, params).fetchall()

        seqs = {t: write_v3_turn(run, t, signer) for t in ("T", "U")}
        conn.execute("PRAGMA user_version=3")
        conn.close()
        return seqs
    with psycopg.connect(location, autocommit=True) as pg:
        pg_migrate(pg, 3)

        def run_pg(sql: str, *params: Any) -> list[Any]:
            cur = pg.execute(sql.replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []

        return {t: write_v3_turn(run_pg, t, signer) for t in ("T", "U")}


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "v3.db")
    return "postgresql", str(request.getfixturevalue("pg_url"))


def test_a_version_3_store_migrates_with_every_hash_kept(where: tuple[str, str]) -> None:
    kind, location = where
    signer = Signer.generate()
    seqs = v3_store(kind, location, signer)
    key, key_id = load_public_key(signer.public_pem())
    result = CliRunner().invoke(main, ["evidence", "migrate", "--db", location])
    assert result.exit_code == 0 and f"3 -> {LATEST}" in result.output, result.output
    store = open_store(location, signer=signer)
    try:
        report = verify_store(store, public_keys={key_id: key})
        assert report.clean, [p.line() for p in report.problems]
        assert (report.turns, report.links, report.sealed, report.signed) == (2, 16, 2, 2)
        assert [r.seq for r in store.query("T")] == seqs["T"]  # attempts keep their seq
        assert store.query("T")[0].context is None  # recorded before schema 4
        # new rows continue each chain (after the seal: a call refused once the turn closed)
        store.finish(store.begin(attempt("new", "T")), ok())
        assert [lk.pos for lk in store.iter_links("T")] == list(range(10))
        store.finish(store.begin(attempt("fresh", "V")), ok())
        store.seal_turn("V")
        assert verify_store(store, public_keys={key_id: key}).clean
    finally:
        store.close()


def test_what_a_tampered_version_3_store_held_is_still_found(where: tuple[str, str]) -> None:
    kind, location = where
    signer = Signer.generate()
    seqs = v3_store(kind, location, signer)
    sql = "DELETE FROM outcomes WHERE seq = ?"  # the row gone, its link left
    if kind == "sqlite":
        with sqlite3.connect(location) as conn:
            conn.execute(sql, (seqs["U"][1],))
    else:
        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute(sql.replace("?", "%s"), (seqs["U"][1],))
    assert CliRunner().invoke(main, ["evidence", "migrate", "--db", location]).exit_code == 0
    with open_store(location, read_only=True) as store:
        problems = verify_store(store).problems
    assert [(p.kind, p.turn_id, p.position) for p in problems] == [("edited", "U", 4)]


def test_a_commit_is_one_row(where: tuple[str, str]) -> None:
    kind, location = where
    store = open_store(location)
    try:
        seq = store.begin(attempt("a", "T"))  # the turn's first row: its opening too
        store.finish(seq, ok())
        before = _rows(kind, location)
        seq = store.begin(attempt("b", "T"))
        assert _rows(kind, location) == before + 1
        store.finish(seq, ok())
        assert _rows(kind, location) == before + 2
    finally:
        store.close()


def _rows(kind: str, location: str) -> int:
    if kind == "sqlite":
        with sqlite3.connect(location) as conn:
            return int(conn.execute("SELECT count(*) FROM chain").fetchone()[0])
    with psycopg.connect(location, autocommit=True) as conn:
        return int((conn.execute("SELECT count(*) FROM chain").fetchone() or (0,))[0])


def test_a_group_commit_lands_whole_and_one_bad_write_fails_alone(where: tuple[str, str]) -> None:
    _kind, location = where
    store = open_store(location)
    try:
        a = store.begin(attempt("a", "T"))
        done = OutcomeRecord(Outcome.SUCCEEDED, "2026", 1.0)
        results = store.commit_group(
            [
                ("finish", (a, done)),
                ("begin", (attempt("b", "T"),)),
                ("begin", (attempt("c", "U"),)),
                ("record", (attempt("d", "T").with_outcome(done),)),
            ]
        )
        assert [ok_ for ok_, _ in results] == [True] * 4
        assert [r.call_id for r in store.query()] == ["a", "b", "c", "d"]
        assert verify_store(store).clean
        # a group with a write that cannot land: the others still do, each on its own
        results = store.commit_group(
            [
                ("finish", (a, done)),  # a second outcome: conflict
                ("begin", (attempt("e", "T"),)),
                ("finish", (999_999, done)),  # no such attempt: conflict
            ]
        )
        assert [ok_ for ok_, _ in results] == [False, True, False]
        assert all(
            isinstance(v, EvidenceStoreError) and v.cause == "conflict"
            for ok_, v in results
            if not ok_
        )
        assert [r.call_id for r in store.query()] == ["a", "b", "c", "d", "e"]
        assert verify_store(store).clean
    finally:
        store.close()


def test_concurrent_calls_share_commits_and_each_keeps_its_record(pg_url: str) -> None:
    """Many calls at once through the recorder: fewer transactions than writes, nothing lost."""
    import anyio

    from sharedos.kernel import AccessContext, ToolCall
    from tests.evidence.conftest import one_tool_host
    from tests.evidence.test_decision_context import RUN, _ok  # noqa: F401

    store = open_store(pg_url)
    # what is measured is grouping, not the deadline: 200 calls queued at once on a busy
    # machine could wait past the default 2 s and be refused (evidence_unavailable)
    host = one_tool_host(store, evidence_timeout_s=60.0)
    db = psycopg.conninfo.conninfo_to_dict(pg_url)["dbname"]

    def commits() -> int:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (db,)
            ).fetchone()
            return int(row[0]) if row else 0

    calls = 200
    outcomes: list[str] = []

    async def one(i: int) -> None:
        ctx = AccessContext(principal="alice", turn_id=f"g-{i % 20}")
        result = await host.invoke_tool(
            ToolCall(call_id=f"g{i}", tool="t.read", arguments={"p": "/public/a"}), ctx, RUN
        )
        outcomes.append(str(result.outcome))

    async def all_at_once() -> None:
        async with anyio.create_task_group() as tg:
            for i in range(calls):
                tg.start_soon(one, i)

    try:
        before = commits()
        anyio.run(all_at_once)
        import time

        time.sleep(0.7)  # the statistics collector's report interval (500 ms)
        used = commits() - before
        assert outcomes == ["succeeded"] * calls
        assert store.counts().total == calls and store.counts().interrupted == 0
        assert verify_store(store).clean
        # each call is two writes (plus the turns' openings): grouped, far fewer commits
        assert used < 2 * calls, used
    finally:
        store.close()
