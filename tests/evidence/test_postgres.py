"""The PostgreSQL store under the faults a shared database has: killed connections, a database
that stops taking connections, a write lost in flight, roles without privileges, schemas from
another version, a database replaced under the store. All against a real server.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from sharedos.evidence import EvidenceRecord, arguments_digest
from sharedos.evidence.appender import CommitUnknown
from sharedos.evidence.migrate import LATEST, pg_migrate
from sharedos.evidence.postgres import PostgresEvidenceStore, redacted_url
from sharedos.evidence.record import OutcomeRecord
from sharedos.evidence.store import EvidenceStoreError
from sharedos.evidence.verify import verify_store
from sharedos.outcomes import Outcome, ReasonCode
from tests.fleet.pgcluster import TempCluster
from tests.timing import bound


def attempt(call: str, turn: str = "T") -> EvidenceRecord:
    return EvidenceRecord(
        turn_id=turn,
        call_id=call,
        tool="files.read",
        started_at="2026-12-02T10:00:00.000000Z",
        arguments_digest=arguments_digest({"path": "/public/a"}),
        arguments={"path": "/public/a"},
        effect="allow",
        resource="/public/a",
    )


OK = OutcomeRecord(Outcome.SUCCEEDED, "2026-12-02T10:00:00.000300Z", 0.3)


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresEvidenceStore]:
    store = PostgresEvidenceStore(f"{pg_url}&application_name=under-test")
    yield store
    store.close()


def admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def terminate(url: str, application: str = "under-test") -> int:
    with admin(url) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application,),
        ).fetchall()
    return len(rows)


def test_a_killed_connection_is_replaced_and_nothing_is_lost(
    pg: PostgresEvidenceStore, pg_url: str
) -> None:
    for i in range(5):
        pg.finish(pg.begin(attempt(f"before{i}")), OK)
    assert terminate(pg_url) >= 1
    # the next writes find the connection dead, reconnect, and land once each
    for i in range(5):
        pg.finish(pg.begin(attempt(f"after{i}")), OK)
    records = pg.query()
    assert [r.call_id for r in records] == [f"before{i}" for i in range(5)] + [
        f"after{i}" for i in range(5)
    ]
    assert all(r.status == "succeeded" for r in records)
    positions = [lk.pos for lk in pg.iter_links("T")]
    assert positions == list(range(len(positions)))
    assert verify_store(pg).clean


def test_a_database_that_takes_no_connections_fails_closed_within_the_bound(
    pg: PostgresEvidenceStore, pg_url: str, postgres_cluster: TempCluster
) -> None:
    from psycopg.conninfo import conninfo_to_dict

    name = conninfo_to_dict(pg_url)["dbname"]
    pg.finish(pg.begin(attempt("a")), OK)
    with admin(postgres_cluster.database_url("postgres")) as conn:
        conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    try:
        terminate(postgres_cluster.database_url("postgres"))
        started = time.monotonic()
        with pytest.raises(EvidenceStoreError) as exc:
            pg.begin(attempt("b"))
        elapsed = time.monotonic() - started
        assert exc.value.cause in ("io", "timeout")
        assert elapsed < bound(2.0), f"failing took {elapsed:.2f} s"
    finally:
        with admin(postgres_cluster.database_url("postgres")) as conn:
            conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    # and it recovers by itself once the database is back
    deadline = time.monotonic() + 10
    while True:
        try:
            pg.finish(pg.begin(attempt("c")), OK)
            break
        except EvidenceStoreError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert [r.call_id for r in pg.query()] == ["a", "c"]
    assert verify_store(pg).clean


def test_a_write_cut_off_in_flight_is_written_once(pg: PostgresEvidenceStore, pg_url: str) -> None:
    """The connection dies while an INSERT waits: it did not commit, so it is written again."""
    pg.finish(pg.begin(attempt("first")), OK)
    locker = admin(pg_url)
    locker.execute("BEGIN")
    locker.execute("LOCK TABLE links IN EXCLUSIVE MODE")
    result: dict[str, Any] = {}

    def write() -> None:
        try:
            result["seq"] = pg.begin(attempt("cut"))
        except BaseException as exc:  # pragma: no cover - reported below
            result["error"] = exc

    thread = threading.Thread(target=write)
    thread.start()
    time.sleep(0.3)  # the INSERT is now waiting for the lock
    assert terminate(pg_url) >= 1
    locker.execute("COMMIT")
    locker.close()
    thread.join(10)
    assert "error" not in result, result.get("error")
    (rec,) = pg.query(call_id="cut")
    assert rec.seq == result["seq"] and rec.status == "interrupted"
    assert len(pg.query()) == 2
    assert verify_store(pg).clean


@pytest.mark.parametrize("read", ["approval_rows", "query", "iter_links"])
def test_a_read_cut_off_in_flight_is_repeated_once(
    pg: PostgresEvidenceStore, pg_url: str, read: str
) -> None:
    """docs/evidence.md: "A read is simply repeated once on a new connection". The reads a
    call makes through the pool (the approval step's ``approval_rows``, and whether the turn
    is sealed, ``iter_links``, when a client's answer is recorded) were not: one backend
    terminated while the read ran failed it (``io``), and with it the call that needed an
    approval, while the writes around it were resolved and went on."""
    pg.finish(pg.begin(attempt("first")), OK)
    locker = admin(pg_url)
    locker.execute("BEGIN")
    locker.execute("LOCK TABLE chain IN ACCESS EXCLUSIVE MODE")
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            if read == "approval_rows":
                result["rows"] = pg.approval_rows(turn_id="T")
            elif read == "query":
                result["rows"] = [r.call_id for r in pg.query(turn_id="T")]
            else:
                result["rows"] = [lk.kind for lk in pg.iter_links("T")]
        except BaseException as exc:  # pragma: no cover - reported below
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.3)  # the SELECT is now waiting for the lock
    assert terminate(pg_url) >= 1
    locker.execute("COMMIT")
    locker.close()
    thread.join(10)
    assert "error" not in result, result.get("error")
    assert (
        result["rows"]
        == {
            "approval_rows": [],
            "query": ["first"],
            "iter_links": ["open", "attempt", "outcome"],
        }[read]
    )


def test_a_checkpoint_cut_off_in_flight_is_written_again(
    pg: PostgresEvidenceStore, pg_url: str
) -> None:
    """The connection dies while the checkpoint's INSERT waits (a host closing as its
    server restarts): it is written on a new connection, so the rows stay covered."""
    pg.finish(pg.begin(attempt("first")), OK)
    locker = admin(pg_url)
    locker.execute("BEGIN")
    locker.execute("LOCK TABLE checkpoints IN EXCLUSIVE MODE")
    result: dict[str, Any] = {}

    def checkpoint() -> None:
        try:
            result["checkpoint"] = pg.take_checkpoint()
        except BaseException as exc:  # pragma: no cover - reported below
            result["error"] = exc

    thread = threading.Thread(target=checkpoint)
    thread.start()
    time.sleep(0.3)  # the INSERT is now waiting for the lock
    assert terminate(pg_url) >= 1
    locker.execute("COMMIT")
    locker.close()
    thread.join(10)
    assert "error" not in result, result.get("error")
    assert result["checkpoint"] is not None
    heads = {lk.turn_id: lk.pos for lk in pg.iter_links()}
    assert {turn: pos for turn, pos, _h, _n in pg.iter_coverage()} == heads
    assert verify_store(pg).clean


def test_a_write_that_committed_but_lost_its_answer_is_not_repeated(
    pg: PostgresEvidenceStore,
) -> None:
    """The commit lands, then the connection dies before the answer: the chain says it landed."""
    real = pg.execute
    cut = {"n": 0}

    def commit_then_lose_the_answer(plan: Any) -> int:
        seq = real(plan)  # really committed
        if cut["n"] == 0:
            cut["n"] += 1
            raise CommitUnknown("server closed the connection", EvidenceStoreError("lost", "io"))
        return seq

    pg.execute = commit_then_lose_the_answer  # type: ignore[method-assign]
    seq = pg.begin(attempt("once"))
    pg.finish(seq, OK)
    (rec,) = pg.query(call_id="once")
    assert rec.seq == seq and rec.status == "succeeded"
    assert verify_store(pg).clean


@pytest.mark.parametrize("landed", [True, False])
def test_a_group_whose_connection_was_lost_is_written_once(
    pg: PostgresEvidenceStore, landed: bool
) -> None:
    """A group commit cut off in flight: if it landed, it is not written again; if not, each
    write is made on its own. Either way every write is there exactly once."""
    a = pg.begin(attempt("a"))
    real = pg.execute_many

    def cut(plans: Any) -> list[int]:
        if landed:
            real(plans)  # really committed, then the answer is lost
        raise CommitUnknown("server closed the connection", EvidenceStoreError("lost", "io"))

    pg.execute_many = cut  # type: ignore[method-assign]
    results = pg.commit_group([("finish", (a, OK)), ("begin", (attempt("b"),))])
    pg.execute_many = real  # type: ignore[method-assign]
    assert [ok for ok, _ in results] == [True, True]
    records = pg.query()
    assert [(r.call_id, r.status) for r in records] == [("a", "succeeded"), ("b", "interrupted")]
    assert records[1].seq == results[1][1]
    assert verify_store(pg).clean


def test_writes_resume_once_the_database_is_writable_again(
    pg: PostgresEvidenceStore, pg_url: str
) -> None:
    """``default_transaction_read_only`` set on the database (an operator freezing it, a
    failover script) reaches a host's connections when they are made again: writes fail
    closed, ``read_only``. Reset, the writes must resume, as they do when a role gets its
    INSERT back; the connections made meanwhile were read-only for good, and kept
    every write failing until the host restarted."""
    pg.finish(pg.begin(attempt("before")), OK)
    with admin(pg_url) as conn:
        name = conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        conn.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    terminate(pg_url)
    for i in range(3):
        with pytest.raises(EvidenceStoreError) as exc:
            pg.begin(attempt(f"frozen{i}"))
        assert exc.value.cause == "read_only"
    with admin(pg_url) as conn:  # made while the default holds: read-only itself
        conn.execute("SET default_transaction_read_only = off")
        conn.execute(f"ALTER DATABASE {name} RESET default_transaction_read_only")
    landed = None
    deadline = time.monotonic() + bound(5.0)
    while landed is None and time.monotonic() < deadline:
        try:
            landed = pg.begin(attempt("after"))
        except EvidenceStoreError as err:
            assert err.cause == "read_only"
            time.sleep(0.1)
    assert landed is not None, "writes never resumed after the database was writable again"
    assert [r.call_id for r in pg.query()] == ["before", "after"]


def test_a_role_that_cannot_insert_fails_at_open(pg_url: str, pg: PostgresEvidenceStore) -> None:
    with admin(pg_url) as conn:
        conn.execute("CREATE ROLE auditor LOGIN")
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO auditor")
    url = pg_url.replace("postgresql://sharedos@", "postgresql://auditor@")
    with pytest.raises(EvidenceStoreError) as exc:
        PostgresEvidenceStore(url)
    assert exc.value.cause == "read_only" and "cannot write" in str(exc.value)
    reader = PostgresEvidenceStore(url, read_only=True)
    try:
        assert reader.counts().total == 0
    finally:
        reader.close()


def test_the_documented_least_privilege_role_can_write(
    pg_url: str, pg: PostgresEvidenceStore
) -> None:
    with admin(pg_url) as conn:
        conn.execute("CREATE ROLE sharedos_host LOGIN")
        # exactly what docs/evidence.md says a host needs
        conn.execute(
            "GRANT SELECT, INSERT ON chain, checkpoints, checkpoint_heads TO sharedos_host"
        )
        conn.execute(
            "GRANT SELECT ON attempts, outcomes, turns, links, seals, evidence TO sharedos_host"
        )
        conn.execute("GRANT SELECT, INSERT ON meta TO sharedos_host")
        conn.execute("GRANT USAGE ON SEQUENCE chain_seq_seq TO sharedos_host")
    url = pg_url.replace("postgresql://sharedos@", "postgresql://sharedos_host@")
    host = PostgresEvidenceStore(url)
    try:
        host.finish(host.begin(attempt("x")), OK)
        host.seal_turn("T")
        assert host.take_checkpoint() is not None
        assert verify_store(host).clean and verify_store(host).checkpoints == 1
    finally:
        host.close()
    # and it cannot change or remove what it wrote
    for change in (
        "UPDATE chain SET resource = '/x'",
        "UPDATE attempts SET resource = '/x'",
        "DELETE FROM chain",
        "DELETE FROM checkpoint_heads",
        # the store's id: changed, every other host would refuse to write ("replaced")
        "UPDATE meta SET value = 'another-store' WHERE key = 'store_id'",
    ):
        with psycopg.connect(url, autocommit=True) as conn, pytest.raises(psycopg.Error):
            conn.execute(change)


def test_a_host_whose_role_can_rewrite_evidence_is_warned(
    pg_url: str, pg: PostgresEvidenceStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A host needs SELECT and INSERT; one whose role can also UPDATE, DELETE or TRUNCATE
    the record (a grant too many, the tables' owner, a superuser) is told so when it opens
    the store: its credentials are then enough to rewrite what every host recorded."""
    from sharedos.evidence.url import open_configured_store

    with admin(pg_url) as conn:
        for role in ("least_host", "loose_host"):
            conn.execute(f"CREATE ROLE {role} LOGIN")
            conn.execute(f"GRANT SELECT, INSERT ON chain, checkpoints, checkpoint_heads TO {role}")
            conn.execute(f"GRANT SELECT, INSERT ON meta TO {role}")
            conn.execute(f"GRANT USAGE ON SEQUENCE chain_seq_seq TO {role}")
        conn.execute("GRANT DELETE ON chain TO loose_host")
        conn.execute("GRANT UPDATE, TRUNCATE ON checkpoint_heads TO loose_host")
    said: dict[str, list[str]] = {}
    for role in ("least_host", "loose_host", "sharedos"):
        caplog.clear()
        url = pg_url.replace("postgresql://sharedos@", f"postgresql://{role}@")
        with caplog.at_level("WARNING", logger="sharedos.evidence"):
            open_configured_store(url).close()
        said[role] = [r.getMessage() for r in caplog.records if "Least privilege" in r.getMessage()]
    assert said["least_host"] == []
    assert len(said["loose_host"]) == 1
    assert "DELETE on chain; UPDATE, TRUNCATE on checkpoint_heads in" in said["loose_host"][0]
    assert "UPDATE, DELETE, TRUNCATE on chain;" in said["sharedos"][0]  # the superuser


def test_reads_and_checkpoints_of_the_whole_store_are_not_cut_by_the_write_timeout(
    pg_url: str, pg: PostgresEvidenceStore
) -> None:
    """The store's statement timeout (1.5 s) is a call's write's bound. ``counts``,
    ``turns``, ``list``, ``checkpoint --take`` and the end of ``copy`` read (and the
    checkpoint writes) the whole store, off every call's path: under it they failed
    (``canceling statement due to statement timeout``) from a few million rows on (the
    checkpoint from some hundred thousand turns). Here the same with 50 ms and 400,000
    rows."""
    from sharedos.evidence.verify import check_checkpoints

    with admin(pg_url) as conn:
        conn.execute(
            "INSERT INTO chain (turn_id, pos, kind, prev_hash, hash, call_id, tool, started_at, "
            "arguments_digest, effect) SELECT 'turn-' || lpad((g / 4)::text, 6, '0'), g % 4, "
            "'attempt', 'sha256:0', 'sha256:' || md5(g::text), 'c' || g, 'files.read', '2026', "
            "'sha256:0', 'allow' FROM generate_series(0, 399999) g"
        )
    auditor = PostgresEvidenceStore(pg_url, statement_timeout_s=0.05, checkpoint_interval_s=None)
    try:
        assert auditor.counts().total == 400_000
        assert len(auditor.turns()) == 100_000
        assert [r.seq for r in auditor.query(outcome="interrupted", limit=2)] == [1, 2]
        taken = auditor.take_checkpoint(everything=True)
        assert taken is not None and taken.heads == 100_000
        assert auditor.uncovered_heads() == []
        assert check_checkpoints(auditor) == ([], 1)
    finally:
        auditor.close()


def test_a_newer_schema_is_refused(pg_url: str, pg: PostgresEvidenceStore) -> None:
    with admin(pg_url) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    for read_only in (False, True):
        with pytest.raises(EvidenceStoreError) as exc:
            PostgresEvidenceStore(pg_url, read_only=read_only)
        assert "schema version 99, newer than this SharedOS" in str(exc.value)
        assert f"up to {LATEST}" in str(exc.value)


def test_an_older_schema_is_refused_for_writing_until_migrated(pg_url: str) -> None:
    with admin(pg_url) as conn:
        pg_migrate(conn, 2)
        # rows written by a version-2 host
        conn.execute(
            "INSERT INTO attempts (turn_id, call_id, tool, started_at, arguments_digest) "
            "VALUES ('old', 'c1', 'files.read', '2026', 'sha256:0'), "
            "('old', 'c2', 'files.read', '2026', 'sha256:0')"
        )
        conn.execute(
            "INSERT INTO outcomes (seq, outcome, reason, finished_at, duration_ms) "
            "SELECT seq, 'denied', 'forbidden', '2026', 0.5 FROM attempts WHERE call_id = 'c1'"
        )
    with pytest.raises(EvidenceStoreError) as exc:
        PostgresEvidenceStore(pg_url)
    assert "sharedos evidence migrate --db" in str(exc.value)
    reader = PostgresEvidenceStore(pg_url, read_only=True)  # reading a version-2 store is fine
    try:
        assert reader.counts().total == 2
    finally:
        reader.close()
    with admin(pg_url) as conn:
        result = pg_migrate(conn)
    assert (result.before, result.after, result.chained_rows) == (2, LATEST, 3)
    store = PostgresEvidenceStore(pg_url)
    try:
        assert verify_store(store).clean
        store.record(
            attempt("c3", "old").with_outcome(
                OutcomeRecord(Outcome.DENIED, "2026", 0.1, ReasonCode.FORBIDDEN)
            )
        )
        assert [lk.pos for lk in store.iter_links("old")] == list(range(6))
        assert verify_store(store).clean
    finally:
        store.close()


def test_a_replaced_database_is_refused_from_then_on(
    pg: PostgresEvidenceStore, pg_url: str
) -> None:
    pg.finish(pg.begin(attempt("a")), OK)
    with admin(pg_url) as conn:
        conn.execute("UPDATE meta SET value = 'another-store' WHERE key = 'store_id'")
    terminate(pg_url)
    with pytest.raises(EvidenceStoreError) as exc:
        for _ in range(3):  # the first write may find the dead connection first
            pg.begin(attempt("b"))
    assert exc.value.cause == "replaced"
    with pytest.raises(EvidenceStoreError) as again:
        pg.begin(attempt("c"))
    assert again.value.cause == "replaced"


def test_an_unreachable_server_fails_at_open_with_one_line() -> None:
    with pytest.raises(EvidenceStoreError) as exc:
        PostgresEvidenceStore("postgresql://nobody:hunter2@127.0.0.1:1/none", connect_timeout_s=1)
    text = str(exc.value)
    assert "cannot connect" in text and "hunter2" not in text and "\n" not in text


def test_passwords_never_reach_messages() -> None:
    assert redacted_url("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    assert redacted_url("postgresql://u@h/db") == "postgresql://u@h/db"


def test_connections_the_server_closed_while_idle_are_replaced_not_waited_on(
    pg_url: str, postgres_cluster: TempCluster
) -> None:
    """A server that closes idle sessions (``idle_session_timeout``; a restart, a NAT timer
    do the same) leaves every pooled connection dead between a quiet host's calls: each is
    discarded at once and a new one made, so every call is written."""
    from psycopg.conninfo import conninfo_to_dict

    name = conninfo_to_dict(pg_url)["dbname"]
    with admin(postgres_cluster.database_url("postgres")) as conn:
        conn.execute(f"ALTER DATABASE \"{name}\" SET idle_session_timeout = '100ms'")
    store = PostgresEvidenceStore(f"{pg_url}&application_name=under-test", min_connections=3)
    try:
        for i in range(4):
            time.sleep(0.4)  # quiet: the server closes every connection of the store
            store.finish(store.begin(attempt(f"c{i}")), OK)
            assert [r.call_id for r in store.query(call_id=f"c{i}")] == [f"c{i}"]
        assert verify_store(store).clean
    finally:
        store.close()


def test_writes_resume_soon_after_a_long_outage_ends(
    pg_url: str, postgres_cluster: TempCluster
) -> None:
    """A database that refused connections for a while (a server down for maintenance)
    is written again as soon as it takes them: the pool's retries of a connection it
    could not make back off (1 s, 2 s, 4 s, ...) only within a short bound."""
    from psycopg.conninfo import conninfo_to_dict

    name = conninfo_to_dict(pg_url)["dbname"]
    store = PostgresEvidenceStore(f"{pg_url}&application_name=under-test", max_connections=2)
    try:
        store.finish(store.begin(attempt("a")), OK)
        cluster = admin(postgres_cluster.database_url("postgres"))
        cluster.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            terminate(postgres_cluster.database_url("postgres"))
            outage_ends = time.monotonic() + 8.0
            while time.monotonic() < outage_ends:  # calls keep coming, and fail closed
                with pytest.raises(EvidenceStoreError):
                    store.begin(attempt("refused"))
                time.sleep(0.5)
        finally:
            cluster.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            cluster.close()
        back = time.monotonic()
        while True:
            try:
                store.finish(store.begin(attempt("c")), OK)
                break
            except EvidenceStoreError:
                time.sleep(0.1)
        took = time.monotonic() - back
        # a connection is made within about a second of the database taking them again;
        # the old retry schedule (1, 3, 7, 15 s after the first failure) waited 5 s or more
        assert took < bound(1.5), f"writes resumed {took:.1f} s after the database was back"
        assert [r.call_id for r in store.query()] == ["a", "c"]
    finally:
        store.close()


def test_an_open_cut_off_at_any_statement_fails_with_a_store_error(pg_url: str) -> None:
    """Connections cut while a host opens the store (a restart, a proxy) make the open
    fail with one EvidenceStoreError and its cause, whichever statement they cut."""
    PostgresEvidenceStore(pg_url).close()  # the schema
    stop = threading.Event()

    def cut() -> None:
        with admin(pg_url) as conn:
            while not stop.is_set():
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'under-test'"
                )

    killer = threading.Thread(target=cut)
    killer.start()
    failed = 0
    try:
        for _ in range(25):
            try:
                PostgresEvidenceStore(f"{pg_url}&application_name=under-test").close()
            except EvidenceStoreError:
                failed += 1
    finally:
        stop.set()
        killer.join()
    assert failed  # the cuts did land


def test_an_export_read_slowly_is_read_to_the_end(pg: PostgresEvidenceStore) -> None:
    """A stream's consumer may pause between fetches longer than the store's idle-in-
    transaction bound (10 s; an export piped into a pager): the stream still ends whole."""
    for i in range(30):
        pg.finish(pg.begin(attempt(f"c{i}")), OK)
    stream = pg.iter_records(batch=10)
    first = next(stream)
    time.sleep(11.0)  # the consumer pauses, the cursor's transaction idle meanwhile
    rest = list(stream)
    assert [r.call_id for r in [first, *rest]] == [f"c{i}" for i in range(30)]


@pytest.mark.parametrize("in_flight", [True, False], ids=["a-write-in-flight", "idle"])
def test_a_server_that_stops_answering_does_not_hold_a_write_nor_the_close(
    pg_url: str, in_flight: bool
) -> None:
    """A server whose processes stop (SIGSTOP; a VM paused, a disk hung under its WAL)
    enforces no statement timeout of its own, and its socket stays open: a write to it, and
    the store's close (its closing checkpoint, its wait for the writer), waited until it
    answered again — for ever, a ``sharedos run`` whose harness had exited not ending. Both
    now end while it is still stopped: the write fails (its connection cut, its fate in
    doubt), the close returns; once it answers again, the store verifies clean."""
    store = PostgresEvidenceStore(f"{pg_url}&application_name=under-test")
    store.finish(store.begin(attempt("before")), OK)  # a head for the closing checkpoint
    with admin(pg_url) as conn:
        pids = [
            int(pid)
            for (pid,) in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'under-test'"
            )
        ]
    assert pids
    frozen: list[int] = []

    def thaw() -> None:
        while frozen:
            os.kill(frozen.pop(), signal.SIGCONT)

    result: dict[str, Any] = {}

    def write() -> None:
        try:
            result["seq"] = store.begin(attempt("frozen"))
        except EvidenceStoreError as exc:
            result["error"] = exc

    # thawed well after the bound (the server's statement timeout and a margin, twice)
    watchdog = threading.Timer(bound(20), thaw)
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)
        watchdog.start()
        if in_flight:
            writer = threading.Thread(target=write)
            writer.start()
            writer.join()
            assert frozen, "the write was answered only once the server answered again"
            assert "error" in result, result
            assert "did not answer" in str(result["error"]), result["error"]
        store.close()
        assert frozen, "the close returned only once the server answered again"
    finally:
        watchdog.cancel()
        thaw()
        store.close()
    with PostgresEvidenceStore(pg_url) as again:
        assert verify_store(again).clean
        assert [r.call_id for r in again.query() if r.call_id == "before"] == ["before"]


def _fork(run: Any) -> int:
    """Fork; the child runs ``run`` and exits 0 when it returned, 1 when it raised."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            run()
            code = 0
        finally:
            os._exit(code)
    return pid


def _exit_code(pid: int) -> int:
    """The exit code of child ``pid`` (-9: still running after the bound, killed)."""
    deadline = time.monotonic() + bound(30)
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -9


def test_a_forked_child_neither_cuts_its_parents_connections_nor_hangs(
    pg: PostgresEvidenceStore,
) -> None:
    """A process forked while its parent had a statement in flight (a host embedding the
    store forks workers; its writer thread is mid-write) inherited the watchdog's state:
    its parent's armed statements, whose descriptors the child shares — once their bound
    passed, the child's watchdog shut the parent's socket down, cutting the parent's
    connection long after that statement was answered — and its lock, held at the fork by
    the parent's writer or its watchdog's round, which the child's first write then waited
    on for ever. A child starts with a watchdog of its own."""
    from sharedos.evidence import postgres

    watchdog = postgres._WATCHDOG
    pg.finish(pg.begin(attempt("parent")), OK)
    conn = pg._writer
    assert conn is not None
    # the parent's statement in flight at the fork, answered (disarmed) just after it
    token = watchdog.arm(conn, 3.0)
    due = time.monotonic() + 3.0

    def write_after_its_bound() -> None:
        time.sleep(max(0.0, due - time.monotonic()) + 0.5)
        pg.finish(pg.begin(attempt("child")), OK)
        time.sleep(0.5)  # the child's watchdog has looked at what it inherited

    try:
        pid = _fork(write_after_its_bound)
    finally:
        watchdog.disarm(token)
    assert _exit_code(pid) == 0
    # the parent's connection is its own still
    assert conn.execute("SELECT 1").fetchone() == (1,)

    # the lock held at the fork (by the parent's writer arming, or its watchdog's round)
    with watchdog._lock:
        pid = _fork(lambda: pg.finish(pg.begin(attempt("child2")), OK))
    assert _exit_code(pid) == 0, "the child's first write waited for ever on the watchdog's lock"
    assert {r.call_id for r in pg.query()} == {"parent", "child", "child2"}
