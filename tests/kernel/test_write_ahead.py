"""Evidence before effect: the attempt is durable before a handler runs; a store that cannot
write makes calls fail closed within the bound, without freezing the event loop."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.evidence import (
    EvidenceCounts,
    EvidenceRecord,
    OutcomeRecord,
    SqliteEvidenceStore,
)
from sharedos.evidence.verify import verify_store
from sharedos.kernel import Kernel, RuntimeHost, ToolCall, ToolResult
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.outcomes import Outcome, ReasonCode
from tests.mounts import MountFn, fill
from tests.timing import bound

from .conftest import ALICE, ALL, misc_tool

pytestmark = pytest.mark.anyio


async def call(host: RuntimeHost, tool: str, arguments: Any, call_id: str = "c1") -> ToolResult:
    return await host.invoke_tool(
        ToolCall(call_id=call_id, tool=tool, arguments=arguments), ALICE, ALL
    )


def _host(kernel: Kernel, store: Any, tool: ToolDefinition, **kw: Any) -> RuntimeHost:
    return RuntimeHost(Kernel(kernel.policy, ToolRegistry([tool])), store, **kw)


async def test_the_attempt_is_durable_before_the_handler_runs(
    kernel: Kernel, tmp_path: Path
) -> None:
    db = tmp_path / "e.db"
    seen: list[EvidenceRecord] = []

    def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        # another connection, as another process would read it, while the handler runs
        seen.extend(SqliteEvidenceStore(db, read_only=True).query(call_id=hctx.call.call_id))
        return HandlerResult.text("ran")

    host = _host(kernel, SqliteEvidenceStore(db), misc_tool(handler))
    result = await call(host, "misc.echo", {"path": "/x"})
    assert result.outcome is Outcome.SUCCEEDED
    (during,) = seen
    assert (during.status, during.resource, during.effect) == ("interrupted", "/x", "allow")
    assert during.seq == result.evidence_seq
    (after,) = SqliteEvidenceStore(db, read_only=True).query(call_id="c1")
    assert after.status == "succeeded" and after.seq == during.seq


async def test_no_attempt_no_effect_and_one_report_per_cause(
    host: RuntimeHost, sandbox: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{tmp_path / 'evidence.db'}{suffix}").unlink(missing_ok=True)
    caplog.set_level(logging.ERROR, logger="sharedos.evidence")
    results = [
        await call(
            host,
            "files.write",
            {"path": f"/home/alice/w{i}.txt", "content": "x"},
            call_id=f"w{i}",
        )
        for i in range(5)
    ]
    for result in results:
        assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.EVIDENCE_UNAVAILABLE)
        assert result.to_mcp()["isError"] is True
        assert "the tool was not run and the call had no effect" in result.content[0]["text"]
        assert str(tmp_path) not in str(result.to_mcp())  # the store's path stays in the log
    assert not list((sandbox / "home" / "alice").glob("w*.txt"))  # no effect without a record
    reports = [r for r in caplog.records if r.name == "sharedos.evidence"]
    assert len(reports) == 1 and "replaced" in reports[0].getMessage()
    # a denied call needs its one commit too: it fails closed the same way
    denied = await call(host, "files.read", {"path": "/private/a.txt"})
    assert denied.reason is ReasonCode.EVIDENCE_UNAVAILABLE


async def test_an_outcome_that_cannot_be_committed_is_said_honestly(
    kernel: Kernel, tmp_path: Path
) -> None:
    db = tmp_path / "e.db"
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)

    def locks_the_store(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        holder.execute("BEGIN IMMEDIATE")  # from now on nobody else can commit
        return HandlerResult.text("the effect happened")

    store = SqliteEvidenceStore(db, busy_timeout_s=0.2)
    host = _host(kernel, store, misc_tool(locks_the_store), evidence_timeout_s=1.0)
    try:
        result = await call(host, "misc.echo", {"path": "/x"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.EVIDENCE_UNAVAILABLE)
    text = result.content[0]["text"]
    assert "The tool ran" in text and "may have taken effect" in text
    assert result.structured is not None and "(locked)" in result.structured["detail"]
    (rec,) = store.query(call_id="c1")
    assert rec.status == "interrupted" and rec.seq == result.evidence_seq  # the attempt stands


async def test_a_locked_store_fails_closed_within_the_bound_while_the_loop_stays_live(
    kernel: Kernel, tmp_path: Path
) -> None:
    db = tmp_path / "locked.db"
    store = SqliteEvidenceStore(db)
    ran: list[str] = []

    async def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        ran.append(hctx.call.call_id)
        return HandlerResult.text("ran")

    locked_host = _host(kernel, store, misc_tool(handler))
    healthy_host = _host(kernel, SqliteEvidenceStore(tmp_path / "ok.db"), misc_tool(handler))
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
    gaps: list[float] = []
    outcomes: dict[str, tuple[ToolResult, float]] = {}
    stop = anyio.Event()

    async def ticker() -> None:
        last = time.monotonic()
        while not stop.is_set():
            await anyio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async def timed(host: RuntimeHost, call_id: str) -> None:
        t0 = time.monotonic()
        result = await call(host, "misc.echo", {"path": "/x"}, call_id=call_id)
        outcomes[call_id] = (result, time.monotonic() - t0)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            async with anyio.create_task_group() as calls:
                for i in range(3):
                    calls.start_soon(timed, locked_host, f"locked{i}")
                await anyio.sleep(0.2)
                calls.start_soon(timed, healthy_host, "healthy")  # another turn's store
            stop.set()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    for i in range(3):
        result, took = outcomes[f"locked{i}"]
        assert result.reason is ReasonCode.EVIDENCE_UNAVAILABLE
        assert took <= bound(2.5), f"a locked store held a call for {took:.2f} s"
    healthy, took = outcomes["healthy"]
    assert healthy.outcome is Outcome.SUCCEEDED and took < bound(1.0)
    assert ran == ["healthy"]  # no handler ran without its attempt on record
    assert max(gaps) < bound(0.25), f"the event loop froze for {max(gaps):.2f} s"


async def test_calls_refused_while_the_store_was_locked_are_recorded_once_it_answers(
    kernel: Kernel, tmp_path: Path
) -> None:
    """A call answered ``evidence_unavailable`` because its write found the store locked is
    recorded with that answer once the store takes writes again: before, such a call (its
    attempt, a refusal, or a ran tool's outcome) was answered and never written, even long
    after the lock went -- while a write still queued when its caller gave up was."""
    db = tmp_path / "e.db"
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    ran: list[str] = []

    def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        ran.append(hctx.call.call_id)
        if hctx.call.call_id == "outcome-locked":
            holder.execute("BEGIN IMMEDIATE")  # another process takes the write lock
        return HandlerResult.text("ran")

    store = SqliteEvidenceStore(db, busy_timeout_s=0.2)
    host = _host(kernel, store, misc_tool(handler), evidence_timeout_s=1.0)
    try:
        told = {
            "outcome-locked": await call(host, "misc.echo", {"path": "/x"}, "outcome-locked"),
            "attempt-locked": await call(host, "misc.echo", {"path": "/y"}, "attempt-locked"),
            "refusal-locked": await call(host, "no.such.tool", {}, "refusal-locked"),
        }
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    for result in told.values():
        assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.EVIDENCE_UNAVAILABLE)
    assert ran == ["outcome-locked"]  # no handler ran without its attempt on record
    after = await call(host, "misc.echo", {"path": "/z"}, "after")  # the store answers again
    assert after.outcome is Outcome.SUCCEEDED
    deadline = time.monotonic() + bound(5.0)
    while True:
        records = {r.call_id: r for r in store.query()}
        settled = all(c in records and records[c].status != "interrupted" for c in told)
        if settled or time.monotonic() > deadline:
            break
        await anyio.sleep(0.02)
    for call_id in told:
        assert call_id in records, f"{call_id} was answered and never recorded"
        rec = records[call_id]
        assert (rec.status, rec.reason) == ("failed", ReasonCode.EVIDENCE_UNAVAILABLE), call_id
    assert records["outcome-locked"].seq == told["outcome-locked"].evidence_seq
    assert "the tool had finished: succeeded" in (records["outcome-locked"].error or "")
    assert "nothing ran" in (records["attempt-locked"].error or "")
    assert "nothing ran" in (records["refusal-locked"].error or "")
    assert records["after"].status == "succeeded"


async def test_a_call_refused_for_a_full_disk_is_recorded_with_that_cause(
    kernel: Kernel, tmpfs: MountFn
) -> None:
    """A call refused because the disk was full is recorded, once space returns, as what it
    was: before, its record said "the attempt could not be committed within 2 s", the text
    of a store that did not answer in time, though the store had refused it at once
    (``disk_full``): an auditor read a slow disk where there was a full one."""
    mnt = tmpfs("1m")
    ran: list[str] = []

    def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        ran.append(hctx.call.call_id)
        return HandlerResult.text("ran")

    store = SqliteEvidenceStore(mnt / "e.db")
    host = _host(kernel, store, misc_tool(handler, pad={"type": "string"}))
    pad = "x" * 60_000  # more than the pages the WAL already holds can take
    assert (await call(host, "misc.echo", {"path": "/x"}, "before")).reason is None
    filler = fill(mnt)
    refused = await call(host, "misc.echo", {"path": "/y", "pad": pad}, "refused")
    assert (refused.outcome, refused.reason) == (Outcome.FAILED, ReasonCode.EVIDENCE_UNAVAILABLE)
    filler.unlink()
    assert (await call(host, "misc.echo", {"path": "/z"}, "after")).reason is None
    deadline = time.monotonic() + bound(5.0)
    while "refused" not in (records := {r.call_id: r for r in store.query()}):
        assert time.monotonic() < deadline, "the refused call was never recorded"
        await anyio.sleep(0.02)
    assert ran == ["before", "after"]
    rec = records["refused"]
    assert (rec.status, rec.reason) == ("failed", ReasonCode.EVIDENCE_UNAVAILABLE)
    assert rec.error == "the attempt could not be committed (disk_full); nothing ran"


class HangingStore:
    """A real SQLite store behind a disk that stops answering (an NFS hang) until released."""

    def __init__(self, inner: SqliteEvidenceStore) -> None:
        self.inner = inner
        self.release = threading.Event()

    def begin(self, attempt: EvidenceRecord) -> int:
        self.release.wait(30)
        return self.inner.begin(attempt)

    def finish(self, seq: int, outcome: OutcomeRecord) -> None:
        self.inner.finish(seq, outcome)

    def record(self, record: EvidenceRecord) -> int:
        self.release.wait(30)
        return self.inner.record(record)

    def query(self, *args: Any, **kwargs: Any) -> list[EvidenceRecord]:
        return self.inner.query(*args, **kwargs)

    def counts(self, turn_id: str | None = None) -> EvidenceCounts:
        return self.inner.counts(turn_id)


async def test_a_hung_store_fails_calls_fast_and_the_count_is_honest_once_it_answers(
    kernel: Kernel, tmp_path: Path
) -> None:
    inner = SqliteEvidenceStore(tmp_path / "e.db")
    store = HangingStore(inner)
    ran: list[str] = []

    async def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        ran.append(hctx.call.call_id)
        return HandlerResult.text("ran")

    host = _host(kernel, store, misc_tool(handler), evidence_timeout_s=0.3)
    t0 = time.monotonic()
    first = await call(host, "misc.echo", {"path": "/x"}, call_id="first")
    took_first = time.monotonic() - t0
    await anyio.sleep(0.4)  # the writer has now made no progress for longer than the bound
    t1 = time.monotonic()
    second = await call(host, "misc.echo", {"path": "/x"}, call_id="second")
    took_second = time.monotonic() - t1
    assert first.reason is second.reason is ReasonCode.EVIDENCE_UNAVAILABLE
    assert 0.25 <= took_first < bound(1.0) and took_second < bound(0.1)
    assert ran == []
    store.release.set()  # the disk answers again: what the callers were told is written
    deadline = time.monotonic() + 10
    while inner.counts().total < 2 and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    records = {r.call_id: r for r in inner.query()}
    assert set(records) == {"first", "second"}
    for rec in records.values():
        assert (rec.outcome, rec.reason) == (Outcome.FAILED, ReasonCode.EVIDENCE_UNAVAILABLE)
        assert rec.error is not None and "nothing ran" in rec.error


async def test_a_cancelled_call_is_recorded_cancelled(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    started = anyio.Event()

    async def waits(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        started.set()
        await anyio.sleep(30)
        return HandlerResult.text("never")

    host = _host(kernel, store, misc_tool(waits))
    async with anyio.create_task_group() as tg:
        tg.start_soon(call, host, "misc.echo", {"path": "/x"})
        await started.wait()
        (during,) = store.query(call_id="c1")
        assert during.status == "interrupted"  # written ahead
        tg.cancel_scope.cancel()
    (rec,) = store.query(call_id="c1")
    assert (rec.outcome, rec.reason) == (Outcome.CANCELLED, ReasonCode.CANCELLED)


async def test_a_handler_names_its_failure_reason_and_may_pass_its_result_through(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    own = {"content": [{"type": "text", "text": "upstream says: rate limited"}]}

    async def upstream(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        mode = args.get("mode")
        if mode == "pass":
            return HandlerResult(
                content=list(own["content"]),
                structured={"retryAfter": 3},
                is_error=True,
                reason=ReasonCode.UPSTREAM_ERROR,
                passthrough=True,
            )
        if mode == "timeout":
            return HandlerResult(
                content=[{"type": "text", "text": "no answer"}],
                is_error=True,
                reason=ReasonCode.UPSTREAM_TIMEOUT,
            )
        # a handler cannot claim a denial, nor any reason that is not a failure of its own
        return HandlerResult(
            content=[{"type": "text", "text": "sneaky"}], is_error=True, reason=ReasonCode.FORBIDDEN
        )

    tool = misc_tool(upstream, mode={"type": "string"})
    host = _host(kernel, store, tool)
    passed = await call(host, "misc.echo", {"path": "/x", "mode": "pass"}, call_id="p")
    assert (passed.outcome, passed.reason) == (Outcome.FAILED, ReasonCode.UPSTREAM_ERROR)
    assert passed.content == own["content"] and passed.structured == {"retryAfter": 3}
    assert passed.to_mcp()["isError"] is True
    timed = await call(host, "misc.echo", {"path": "/x", "mode": "timeout"}, call_id="t")
    assert timed.reason is ReasonCode.UPSTREAM_TIMEOUT
    assert (
        "not a policy denial" in timed.content[0]["text"]
        and "no answer" in timed.content[0]["text"]
    )
    sneaky = await call(host, "misc.echo", {"path": "/x", "mode": "x"}, call_id="s")
    assert (sneaky.outcome, sneaky.reason) == (Outcome.FAILED, ReasonCode.HANDLER_ERROR)
    reasons = {r.call_id: r.reason for r in store.query()}
    assert reasons == {
        "p": ReasonCode.UPSTREAM_ERROR,
        "t": ReasonCode.UPSTREAM_TIMEOUT,
        "s": ReasonCode.HANDLER_ERROR,
    }
    assert {r.call_id: r.error for r in store.query()}["p"] == "upstream says: rate limited"


class RecordOnly:
    """A backend written against the version-1 protocol (``record`` only)."""

    def __init__(self) -> None:
        self.records: list[EvidenceRecord] = []

    def record(self, record: EvidenceRecord) -> int:
        self.records.append(record)
        return len(self.records)

    def query(self, *args: Any, **kwargs: Any) -> list[EvidenceRecord]:
        return list(self.records)

    def counts(self, turn_id: str | None = None) -> EvidenceCounts:
        return EvidenceCounts(total=len(self.records))


async def test_a_record_only_store_still_works_and_says_it_cannot_write_ahead(
    kernel: Kernel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sharedos.evidence")
    store = RecordOnly()
    host = _host(kernel, store, misc_tool())
    assert any("no write-ahead guarantee" in r.getMessage() for r in caplog.records)
    result = await call(host, "misc.echo", {"path": "/x"})
    assert result.outcome is Outcome.SUCCEEDED and result.evidence_seq == 1
    assert [r.outcome for r in store.records] == [Outcome.SUCCEEDED]


async def test_synchronous_full_can_be_chosen_at_construction(
    kernel: Kernel, tmp_path: Path
) -> None:
    host = RuntimeHost(kernel, tmp_path / "full.db", synchronous="FULL")
    assert isinstance(host.evidence, SqliteEvidenceStore) and host.evidence.synchronous == "FULL"
    conn = host.evidence._conn
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    with pytest.raises(ValueError, match="synchronous"):
        RuntimeHost(kernel, SqliteEvidenceStore(tmp_path / "n.db"), synchronous="FULL")


async def test_commits_taken_without_the_writer_thread_keep_the_wal_bounded(
    kernel: Kernel, tmp_path: Path
) -> None:
    db = tmp_path / "wal.db"
    store = SqliteEvidenceStore(db)
    host = _host(kernel, store, misc_tool())
    wal = Path(f"{db}-wal")
    largest = 0
    for i in range(3000):  # 6,000 commits of about 1.5 KiB: 9 MB of WAL if never folded back
        result = await call(host, "misc.echo", {"path": "/x", "pad": "p" * 1200}, call_id=f"c{i}")
        assert result.outcome is Outcome.SUCCEEDED
        if i % 100 == 0:
            largest = max(largest, wal.stat().st_size)
    assert store.counts().total == 3000 and store.counts().interrupted == 0
    assert largest < 8 * 1024 * 1024, f"the WAL grew to {largest} bytes"


async def test_records_still_owed_at_exit_are_written_if_they_can_be_and_counted_if_not(
    kernel: Kernel, tmpfs: MountFn
) -> None:
    """A call refused for a full disk is written later, once a write lands. A host that
    exits before any does (the disk still full, or freed with no call after) dropped it
    without a word: the exhaustion hunt saw a run report 0 failed calls while its harness
    had been told 29 failed. ``settle_unwritten`` tries once more at exit and says how
    many are still missing (``sharedos run`` prints it)."""
    mnt = tmpfs("1m")
    store = SqliteEvidenceStore(mnt / "e.db")
    host = _host(
        kernel, store, misc_tool(lambda a, h: HandlerResult.text("ran"), pad={"type": "string"})
    )
    pad = "x" * 60_000
    assert (await call(host, "misc.echo", {"path": "/x"}, "before")).reason is None
    filler = fill(mnt)
    for n in range(3):
        refused = await call(host, "misc.echo", {"path": f"/y{n}", "pad": pad}, f"refused{n}")
        assert refused.reason is ReasonCode.EVIDENCE_UNAVAILABLE
    assert await host.settle_unwritten() == 3  # still full: nothing can be written
    filler.unlink()
    assert await host.settle_unwritten() == 0  # space again: written now, at exit
    records = {r.call_id: r for r in store.query()}
    for n in range(3):
        rec = records[f"refused{n}"]
        assert (rec.status, rec.reason) == ("failed", ReasonCode.EVIDENCE_UNAVAILABLE)
        assert rec.error == "the attempt could not be committed (disk_full); nothing ran"


async def test_a_call_cancelled_while_its_outcome_waits_says_the_tool_had_finished(
    kernel: Kernel, tmp_path: Path
) -> None:
    """The handler ran (its effect is done); its outcome's write waits behind another call's,
    on a store another process holds locked; the caller cancels. The outcome written for it
    (``cancelled``: nobody was answered) must still say that the tool had finished, and how:
    a bare ``cancelled`` reads as a call that may never have done anything."""
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db)
    effects: list[str] = []
    release = threading.Event()

    def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        if hctx.call.call_id == "writer":
            release.wait(10)
            effects.append("written")  # the effect: done before the outcome is written
        return HandlerResult.text("done")

    host = _host(kernel, store, misc_tool(handler))
    holder = sqlite3.connect(db, isolation_level=None)
    results: dict[str, ToolResult] = {}

    writer_scope = anyio.CancelScope()

    async def writer() -> None:
        with writer_scope:
            await call(host, "misc.echo", {"path": "/x"}, call_id="writer")

    async def other() -> None:
        results["other"] = await call(host, "misc.echo", {"path": "/y"}, call_id="other")

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer)
            with anyio.fail_after(5):
                while not store.query(call_id="writer"):  # its attempt is on record
                    await anyio.sleep(0.01)
            holder.execute("BEGIN IMMEDIATE")  # another process takes the write lock
            tg.start_soon(other)  # its attempt waits on the writer thread for the lock
            await anyio.sleep(0.2)
            release.set()  # the tool finishes; its outcome queues behind that attempt
            with anyio.fail_after(5):
                while not effects:
                    await anyio.sleep(0.01)
            await anyio.sleep(0.1)
            writer_scope.cancel()  # the caller goes away
            await anyio.sleep(0.1)
            holder.execute("ROLLBACK")
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
    assert effects == ["written"]
    (rec,) = store.query(call_id="writer")
    assert rec.outcome is Outcome.CANCELLED
    assert rec.error is not None and "the tool had finished: succeeded" in rec.error, rec


async def test_calls_refused_by_a_postgresql_statement_timeout_are_recorded_once_it_answers(
    kernel: Kernel, pg_url: str
) -> None:
    """PostgreSQL: another session holds a lock on ``chain`` longer than the store's
    statement timeout, while calls come in. Each write is cancelled (cause ``timeout``:
    nothing of it landed) and its call answered ``evidence_unavailable``, whether its caller
    was still waiting when the store refused it, or had given up while it ran, or before it
    started. Once the lock goes and a write lands, every one of those answers must be
    written, as for ``locked`` and ``disk_full`` (docs/evidence.md: "as for a server down").
    Before, the first two kinds left no record at all."""
    import psycopg

    from sharedos.evidence.postgres import PostgresEvidenceStore

    ran: list[str] = []

    async def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        ran.append(hctx.call.call_id)
        return HandlerResult.text("ran")

    store = PostgresEvidenceStore(pg_url, statement_timeout_s=0.4)
    host = _host(kernel, store, misc_tool(handler), evidence_timeout_s=1.0)
    told: dict[str, ToolResult] = {}

    async def one(call_id: str) -> None:
        told[call_id] = await call(host, "misc.echo", {"path": "/y"}, call_id)

    try:
        assert (await call(host, "misc.echo", {"path": "/x"}, "before")).reason is None
        with psycopg.connect(pg_url) as holder:  # a transaction holding the table's lock
            holder.execute("LOCK TABLE chain IN ACCESS EXCLUSIVE MODE")
            async with anyio.create_task_group() as tg:
                for i in range(6):
                    tg.start_soon(one, f"refused{i}")
                    await anyio.sleep(0.15)
            holder.rollback()
        for result in told.values():
            assert (result.outcome, result.reason) == (
                Outcome.FAILED,
                ReasonCode.EVIDENCE_UNAVAILABLE,
            )
        assert ran == ["before"]
        await anyio.sleep(0.5)  # the writer's backlog drains
        after = await call(host, "misc.echo", {"path": "/z"}, "after")
        assert after.outcome is Outcome.SUCCEEDED
        deadline = time.monotonic() + bound(5.0)
        while True:
            records = {r.call_id: r for r in store.query()}
            if all(c in records for c in told) or time.monotonic() > deadline:
                break
            await anyio.sleep(0.02)
        unrecorded = sorted(c for c in told if c not in records)
        assert unrecorded == [], "answered evidence_unavailable, never recorded"
        for call_id in told:
            rec = records[call_id]
            assert (rec.status, rec.reason) == ("failed", ReasonCode.EVIDENCE_UNAVAILABLE)
            assert "nothing ran" in (rec.error or "")
        assert host._recorder.unwritten() == 0
    finally:
        store.close()


async def _calls_under_a_held_lock(
    kernel: Kernel,
    tmp_path: Path,
    *,
    busy_timeout_s: float,
    evidence_timeout_s: float,
    calls: int,
    spacing_s: float,
    hold_s: float = 0.0,
) -> tuple[RuntimeHost, dict[str, ToolResult], dict[str, Any]]:
    """``calls`` calls, ``spacing_s`` apart, while another process holds the SQLite write
    lock (and ``hold_s`` after the last); then the lock goes and one call succeeds. Every
    call meanwhile must have been refused and not run; returns the host, what each call
    was told, and the records once every refused call has its own (or a bound passed)."""
    db = tmp_path / "e.db"
    ran: list[str] = []

    async def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        ran.append(hctx.call.call_id)
        return HandlerResult.text("ran")

    store = SqliteEvidenceStore(db, busy_timeout_s=busy_timeout_s)
    host = _host(kernel, store, misc_tool(handler), evidence_timeout_s=evidence_timeout_s)
    told: dict[str, ToolResult] = {}

    async def one(call_id: str) -> None:
        told[call_id] = await call(host, "misc.echo", {"path": "/y"}, call_id)

    assert (await call(host, "misc.echo", {"path": "/x"}, "before")).reason is None
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        async with anyio.create_task_group() as tg:
            for i in range(calls):
                tg.start_soon(one, f"refused{i}")
                await anyio.sleep(spacing_s)
        await anyio.sleep(hold_s)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert all(r.reason is ReasonCode.EVIDENCE_UNAVAILABLE for r in told.values())
    assert ran == ["before"]
    await anyio.sleep(0.5)
    assert (await call(host, "misc.echo", {"path": "/z"}, "after")).reason is None
    deadline = time.monotonic() + bound(5.0)
    while True:
        records = {r.call_id: r for r in store.query()}
        if all(c in records for c in told) or time.monotonic() > deadline:
            return host, told, records
        await anyio.sleep(0.02)


async def test_calls_whose_write_was_refused_after_their_caller_gave_up_are_recorded(
    kernel: Kernel, tmp_path: Path
) -> None:
    """SQLite: another process holds the write lock for a while, calls keep coming. A write
    queued behind others starts late, its caller gives up waiting (``evidence_unavailable``)
    while it runs, and the store then refuses it (``locked``). Nobody was left to owe its
    record: those calls were answered and never written, though the docs promise every
    call refused meanwhile is recorded once the lock goes."""
    _, told, records = await _calls_under_a_held_lock(
        kernel, tmp_path, busy_timeout_s=0.6, evidence_timeout_s=1.0, calls=8, spacing_s=0.15
    )
    assert sorted(c for c in told if c not in records) == []
    for call_id in told:
        assert (records[call_id].status, records[call_id].reason) == (
            "failed",
            ReasonCode.EVIDENCE_UNAVAILABLE,
        )


async def test_records_written_instead_while_the_store_is_still_locked_are_kept(
    kernel: Kernel, tmp_path: Path
) -> None:
    """A write whose caller gave up before it started is replaced by the record of what the
    caller was told; under a lock held longer than the writer's backlog takes, that record
    meets the lock too. It must be kept and written once the lock goes, not dropped: before,
    it was "a record nobody waits for", lost, and the call answered but never recorded."""
    host, told, records = await _calls_under_a_held_lock(
        kernel,
        tmp_path,
        busy_timeout_s=0.3,
        evidence_timeout_s=0.6,
        calls=10,
        spacing_s=0.1,
        hold_s=2.0,  # the writer works through its backlog, all of it refused
    )
    assert sorted(c for c in told if c not in records) == []
    assert host._recorder.unwritten() == 0


@pytest.mark.parametrize("fault", ["read_only_database", "insert_revoked"])
async def test_calls_refused_while_the_postgresql_store_cannot_be_written_are_recorded_after(
    kernel: Kernel, pg_url: str, fault: str
) -> None:
    """PostgreSQL: the database is made read-only (``default_transaction_read_only``, as a
    failover script does), or the host's role loses ``INSERT``, for a while. Calls fail
    closed, cause ``read_only``: the statement was refused, nothing of it landed. Once the
    store takes writes again, every call answered ``evidence_unavailable`` meanwhile must
    be recorded as it was answered, as after a lock or a full disk (docs/evidence.md:
    "nothing lost"). Before, those calls were answered and never recorded."""
    import psycopg

    from sharedos.evidence.postgres import PostgresEvidenceStore

    ran: list[str] = []

    async def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        ran.append(hctx.call.call_id)
        return HandlerResult.text("ran")

    PostgresEvidenceStore(pg_url).close()  # the schema, made by its owner
    with psycopg.connect(pg_url, autocommit=True) as conn:
        name = conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        role = f"{name}_host"  # roles are the cluster's: one of this test's own
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA public TO {role}")
        conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}")
    host_url = pg_url.replace("postgresql://sharedos@", f"postgresql://{role}@")
    host_url += "&application_name=read-only-host"
    store = PostgresEvidenceStore(host_url)
    host = _host(kernel, store, misc_tool(handler), evidence_timeout_s=1.0)
    try:
        assert (await call(host, "misc.echo", {"path": "/x"}, "before")).reason is None
        with psycopg.connect(pg_url, autocommit=True) as conn:
            if fault == "insert_revoked":
                conn.execute(f"REVOKE INSERT ON chain FROM {role}")
            else:
                conn.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'read-only-host'"
                )
        told = {
            c: await call(host, "misc.echo", {"path": "/y"}, c) for c in ("refused0", "refused1")
        }
        for result in told.values():
            assert (result.outcome, result.reason) == (
                Outcome.FAILED,
                ReasonCode.EVIDENCE_UNAVAILABLE,
            )
        assert ran == ["before"]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("SET default_transaction_read_only = off")
            conn.execute(f"ALTER DATABASE {name} RESET default_transaction_read_only")
            conn.execute(f"GRANT INSERT ON chain TO {role}")
        deadline = time.monotonic() + bound(5.0)
        while (await call(host, "misc.echo", {"path": "/z"}, "after")).reason is not None:
            assert time.monotonic() < deadline, "writes never resumed"
            await anyio.sleep(0.1)
        while True:
            records = {r.call_id: r for r in store.query()}
            if all(c in records for c in told) or time.monotonic() > deadline:
                break
            await anyio.sleep(0.02)
        assert sorted(c for c in told if c not in records) == [], "answered, never recorded"
        for call_id in told:
            rec = records[call_id]
            assert (rec.status, rec.reason) == ("failed", ReasonCode.EVIDENCE_UNAVAILABLE)
            assert "(read_only); nothing ran" in (rec.error or ""), rec.error
        assert host._recorder.unwritten() == 0
    finally:
        store.close()


async def test_writes_still_queued_at_exit_are_counted_as_unwritten(
    kernel: Kernel, tmp_path: Path
) -> None:
    """Another process holds the write lock from before three calls to the host's exit.
    Their callers gave up (each answered ``evidence_unavailable``) while two of their
    writes still queued on the writer thread, where settling at exit did not look:
    ``settle_unwritten`` said 1 (the one the store had refused) and the host exited
    saying nothing of the others, whose calls have no record."""
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=0.3)
    host = _host(kernel, store, misc_tool(), evidence_timeout_s=0.1)
    assert (await call(host, "misc.echo", {"path": "/x"}, "before")).reason is None
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(call, host, "misc.echo", {"path": "/y"}, f"refused{n}")
        missing = await host.settle_unwritten()
        recorded = {r.call_id for r in store.query()}  # the lock is still held
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    unrecorded = {f"refused{n}" for n in range(3)} - recorded
    assert missing >= len(unrecorded) == 3, (missing, recorded)


@pytest.mark.parametrize("lost_at", ["attempt", "outcome"])
async def test_a_write_whose_connection_was_lost_while_the_server_was_gone_is_recorded_after(
    kernel: Kernel, pg_url: str, postgres_cluster: Any, lost_at: str
) -> None:
    """PostgreSQL: the server goes away (a restart longer than the bound, here the database
    refusing connections after the host's were cut) with the host idle. The next write
    finds its connection dead: whether it landed cannot be told before the server is back,
    so it failed ``io`` and was never thought of again. A call whose attempt met it was
    answered ``evidence_unavailable`` and left no record at all; a call whose outcome met
    it stayed ``interrupted`` though the tool had finished. Once the server is back the
    store can tell (the chain at the write's place): what landed stands, and what did not
    is written as the call was answered."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from sharedos.evidence.postgres import PostgresEvidenceStore

    admin_url = postgres_cluster.database_url("postgres")
    store = PostgresEvidenceStore(pg_url, connect_timeout_s=0.3, write_deadline_s=0.5)
    name = conninfo_to_dict(pg_url)["dbname"]

    def server_gone(gone: bool) -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(not gone).lower()}')
            if gone:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    (name,),
                )

    def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        if lost_at == "outcome" and hctx.call.call_id == "lost":
            server_gone(True)
        return HandlerResult.text("ran")

    host = _host(kernel, store, misc_tool(handler), evidence_timeout_s=1.0)
    try:
        assert (await call(host, "misc.echo", {"path": "/x"}, "before")).reason is None
        if lost_at == "attempt":
            server_gone(True)
        told = await call(host, "misc.echo", {"path": "/y"}, "lost")
        assert (told.outcome, told.reason) == (Outcome.FAILED, ReasonCode.EVIDENCE_UNAVAILABLE)
        server_gone(False)
        deadline = time.monotonic() + bound(5.0)
        while (await call(host, "misc.echo", {"path": "/z"}, "after")).reason is not None:
            assert time.monotonic() < deadline, "writes never resumed"
            await anyio.sleep(0.1)
        while (rec := {r.call_id: r for r in store.query()}.get("lost")) is None or (
            rec.status == "interrupted"
        ):
            if time.monotonic() > deadline:
                break
            await anyio.sleep(0.02)
        assert rec is not None, "answered evidence_unavailable, never recorded"
        assert (rec.status, rec.reason) == ("failed", ReasonCode.EVIDENCE_UNAVAILABLE)
        if lost_at == "attempt":
            assert "nothing ran" in (rec.error or ""), rec.error
        else:
            assert "the tool had finished: succeeded" in (rec.error or ""), rec.error
        assert verify_store(store).clean
    finally:
        server_gone(False)
        store.close()
