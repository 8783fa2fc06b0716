# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)
"""A turn that closes while the store refuses writes is sealed once the store answers.

Before, a seal refused as the turn closed (another process holding the write
lock, a full disk) was never tried again: the turn stayed unsealed for good and
``evidence verify --require-seal`` reported it like a removed seal. The host now
keeps the seal with the records owed to refused calls and writes it, with the
time the turn closed, after its next write that lands or when it settles its
owed records before it exits.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.evidence.turns import evidence_turn, seal_late
from sharedos.evidence.verify import verify_store
from sharedos.kernel import AccessContext, RuntimeHost, ToolCall
from sharedos.outcomes import Outcome
from sharedos.toolpolicy import RunMode, ToolPolicy
from tests.evidence.conftest import one_tool_host
from tests.evidence.stores import Opener, backend, opener  # noqa: F401  (fixtures)
from tests.timing import bound

pytestmark = pytest.mark.anyio

RUN = ToolPolicy(name="r", mode=RunMode.OPEN, managed=("t.*",))


async def _call(host: RuntimeHost, turn_id: str, call_id: str) -> Outcome:
    ctx = AccessContext(principal="alice", turn_id=turn_id)
    call = ToolCall(call_id=call_id, tool="t.read", arguments={"p": "/public/a"})
    return (await host.invoke_tool(call, ctx, RUN)).outcome


@contextlib.contextmanager
def _another_writer(db: Path) -> Iterator[sqlite3.Connection]:
    """A second connection to ``db``, as another process would hold one: what it began
    (``BEGIN IMMEDIATE``: the write lock) is rolled back when the block ends."""
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        yield holder
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()


async def _close_t1_locked(host: RuntimeHost, store: Any, holder: sqlite3.Connection) -> None:
    """Turn T1 with one call that lands; ``holder`` takes the write lock as it closes."""
    async with evidence_turn(store, turn_id="T1", owe=host.owe_evidence):
        assert await _call(host, "T1", "c1") is Outcome.SUCCEEDED
        holder.execute("BEGIN IMMEDIATE")  # another process takes the write lock


async def _turn_closing_under_a_lock(host: RuntimeHost, store: Any, db: Path) -> float:
    """One turn with one call; another connection holds the write lock as it closes.
    Returns the wall-clock time the lock was let go."""
    with _another_writer(db) as holder:
        await _close_t1_locked(host, store, holder)
        assert not store.has_seal("T1")  # the close could not write it
    return time.time()


def _kinds(db: Path, turn_id: str) -> list[str]:
    """The kinds of the turn's chain links, in chain order."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT kind FROM chain WHERE turn_id = ? ORDER BY pos", (turn_id,))
        return [kind for (kind,) in rows]


def _seal_closed_at(db: Path, turn_id: str) -> str:
    with sqlite3.connect(db) as conn:
        (closed_at,) = conn.execute(
            "SELECT closed_at FROM seals WHERE turn_id = ?", (turn_id,)
        ).fetchone()
    return str(closed_at)


async def test_the_next_write_that_lands_writes_the_seal_of_a_turn_closed_under_a_lock(
    tmp_path: Path,
) -> None:
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=0.2)
    host = one_tool_host(store, evidence_timeout_s=1.0)
    released = await _turn_closing_under_a_lock(host, store, db)
    # another turn's call lands: the store answers again, and what it was owed follows
    assert await _call(host, "T2", "c2") is Outcome.SUCCEEDED
    deadline = time.monotonic() + bound(5.0)
    while not store.has_seal("T1") and time.monotonic() < deadline:
        await anyio.sleep(0.02)
    assert store.has_seal("T1"), "the seal of a turn closed under a lock was never written"
    # it says when the turn closed, not when it could be written
    from datetime import datetime

    closed = datetime.fromisoformat(_seal_closed_at(db, "T1").replace("Z", "+00:00"))
    assert closed.timestamp() <= released
    report = verify_store(store, "T1", require_seal=True)
    assert report.clean and report.sealed == 1, [p.to_dict() for p in report.problems]


async def test_a_host_settling_before_it_exits_writes_the_owed_seal(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=0.2)
    host = one_tool_host(store, evidence_timeout_s=1.0)
    await _turn_closing_under_a_lock(host, store, db)
    assert await host.settle_unwritten() == 0
    assert store.has_seal("T1")
    assert verify_store(store, require_seal=True).clean


async def test_an_owed_seal_is_not_written_twice(tmp_path: Path) -> None:
    """A seal given up on as it timed out may land after all: the owed one then stands down."""
    store = SqliteEvidenceStore(tmp_path / "e.db")
    async with evidence_turn(store, turn_id="T1"):
        pass
    assert store.has_seal("T1")
    assert seal_late(store, "T1", "2026-01-01T00:00:00Z") is None
    report = verify_store(store, "T1", require_seal=True)
    assert report.clean and report.sealed == 1


async def test_a_host_exiting_while_the_store_still_refuses_names_the_unsealed_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lock outlasts the host: what ``sharedos run`` says on exit. It counted the owed
    seal as a refused call's record ("1 record ... the calls they record did not run"): no
    call had been refused, and which turn was left unsealed was not said."""
    from sharedos.cli.run import _say_unwritten

    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=0.2)
    host = one_tool_host(store, evidence_timeout_s=1.0)
    with _another_writer(db) as holder:
        await _close_t1_locked(host, store, holder)  # the lock held past the host's exit
        capsys.readouterr()
        await _say_unwritten(host)
    said = capsys.readouterr().err
    assert "did not run" not in said, said  # every call ran and was recorded
    assert "seal of turn T1" in said and "unsealed" in said, said
    assert not store.has_seal("T1")
    report = verify_store(store, "T1", require_seal=True)
    assert [p.kind for p in report.problems] == ["unsealed"]


async def test_verify_names_a_refused_seal_among_the_causes_of_an_unsealed_turn(
    tmp_path: Path,
) -> None:
    """The lock outlasts the host: ``evidence verify --require-seal`` then reports the turn
    ``unsealed``. Its reason named a host that died, a turn still running, a deleted seal
    — never the store refusing the seal as the turn closed, the one cause here: an operator
    read a fault as a possible tampering."""
    from click.testing import CliRunner

    from sharedos.cli.main import main

    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=0.2)
    host = one_tool_host(store, evidence_timeout_s=1.0)
    with _another_writer(db) as holder:
        await _close_t1_locked(host, store, holder)  # the lock held past the host's exit
        assert await host.settle_unwritten() == 0 and host.unsealed_turns() == ["T1"]
    store.close()
    result = CliRunner().invoke(main, ["evidence", "verify", "--db", str(db), "--require-seal"])
    assert result.exit_code != 0
    assert "unsealed" in result.output, result.output
    assert "refused" in result.output and "as it closed" in result.output, result.output


async def test_a_call_refused_before_the_close_is_recorded_before_the_seal(
    tmp_path: Path,
) -> None:
    """A call refused under a lock is owed its record; the lock goes, the harness makes no
    further call, and the turn closes. The seal landed at once and the call's record only
    as the host settled before exit: after the seal, outside what the seal vouches for (a
    cut after the seal goes unnoticed), where with a store that answered it came before."""
    from sharedos.bridge import open_turn

    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=0.2)
    host = one_tool_host(store, evidence_timeout_s=1.0)
    ctx = AccessContext(principal="alice")
    async with open_turn(host, ctx, RUN):
        assert await _call(host, ctx.turn_id, "c1") is Outcome.SUCCEEDED
        with _another_writer(db) as holder:
            holder.execute("BEGIN IMMEDIATE")
            assert await _call(host, ctx.turn_id, "c2") is Outcome.FAILED  # unrecorded
    assert await host.settle_unwritten() == 0
    kinds = _kinds(db, ctx.turn_id)
    assert kinds == ["open", "attempt", "outcome", "attempt", "outcome", "seal"], kinds
    assert verify_store(store, ctx.turn_id, require_seal=True).clean


async def test_a_seal_waits_for_the_records_a_store_still_refusing_owes(tmp_path: Path) -> None:
    """The store still refuses as the turn closes, with a call's record owed: the seal is
    handed on at once (not tried after them, a busy wait each) and follows the record."""
    from sharedos.bridge import open_turn

    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=0.2)
    host = one_tool_host(store, evidence_timeout_s=1.0)
    ctx = AccessContext(principal="alice")
    with _another_writer(db) as holder:
        async with open_turn(host, ctx, RUN):
            holder.execute("BEGIN IMMEDIATE")
            assert await _call(host, ctx.turn_id, "c1") is Outcome.FAILED
        assert host.unsealed_turns() == [ctx.turn_id]
    assert await host.settle_unwritten() == 0 and host.unsealed_turns() == []
    kinds = _kinds(db, ctx.turn_id)
    assert kinds == ["open", "attempt", "outcome", "seal"], kinds
    assert verify_store(store, ctx.turn_id, require_seal=True).clean


async def test_an_owed_seal_the_store_then_loses_is_still_named_on_exit(tmp_path: Path) -> None:
    """The seal owed after a lock, then the database moved away (a fault that does not
    pass): the seal is lost, and the host exited saying nothing of the unsealed turn."""
    import os

    from sharedos.kernel.recorder import unwritten_note

    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=0.2)
    host = one_tool_host(store, evidence_timeout_s=1.0)
    await _turn_closing_under_a_lock(host, store, db)
    for suffix in ("", "-wal"):
        os.rename(f"{db}{suffix}", f"{tmp_path / 'moved.db'}{suffix}")
    assert await host.settle_unwritten() == 0
    assert host.unsealed_turns() == ["T1"]
    assert "seal of turn T1" in str(unwritten_note(0, host.unsealed_turns()))


async def test_an_outcome_still_refused_at_exit_is_not_said_to_be_of_a_call_that_did_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lock comes while the tool runs and lasts past the host's exit: the call ran (its
    effect done, its attempt in the store, shown ``interrupted``), only its outcome is
    owed. The exit note said "the calls they record did not run, and the store has no
    record of them": an auditor would look for no effect of a call that had one."""
    from sharedos.cli.run import _say_unwritten
    from sharedos.kernel.handlers import HandlerResult

    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=0.2)
    with _another_writer(db) as holder:

        async def locks_the_store(args: dict[str, Any], hctx: Any) -> HandlerResult:
            holder.execute("BEGIN IMMEDIATE")  # another process takes the write lock meanwhile
            return HandlerResult.text("done")

        host = one_tool_host(store, evidence_timeout_s=1.0, handler=locks_the_store)
        assert await _call(host, "T1", "c1") is Outcome.FAILED  # its outcome not recorded
        capsys.readouterr()
        await _say_unwritten(host)
    said = capsys.readouterr().err
    assert "did not run" not in said, said
    assert "outcome of 1 call whose attempt is in the store" in said, said
    assert "interrupted" in said, said
    (record,) = store.query(turn_id="T1")
    assert record.status == "interrupted"  # what the note says the store holds


def _opening(db: Path, turn_id: str) -> tuple[Any, ...]:
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT opened_at, catalog_hash, policy_hash, identity FROM turns WHERE turn_id = ?",
            (turn_id,),
        ).fetchone()
    return tuple(row)


@pytest.mark.parametrize("lock_lasts", ["open", "whole turn"])
async def test_an_opening_refused_at_the_open_is_written_before_the_seal(
    tmp_path: Path, lock_lasts: str
) -> None:
    """A lock as the turn opens (and, in the second case, until after it closed): the
    opening record, the chain's anchor, was never tried again. A turn with no call that
    landed then got a bare opening from its seal — no catalogHash, no policy, no identity
    — dated after the turn had closed."""
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=0.2)
    host = one_tool_host(store, evidence_timeout_s=1.0)
    with _another_writer(db) as holder:
        holder.execute("BEGIN IMMEDIATE")
        async with evidence_turn(
            store,
            turn_id="T1",
            catalog_hash="sha256:catalog",
            policy_hash="sha256:policy",
            identity={"harness": "h"},
            owe=host.owe_evidence,
            settle=host.settle_owed,
        ):
            if lock_lasts == "open":
                holder.execute("ROLLBACK")
    assert await host.settle_unwritten() == 0 and host.unsealed_turns() == []
    opened_at, catalog, policy, identity = _opening(db, "T1")
    assert (catalog, policy, identity) == ("sha256:catalog", "sha256:policy", '{"harness":"h"}')
    assert opened_at <= _seal_closed_at(db, "T1")
    assert verify_store(store, "T1", require_seal=True).clean


async def test_calls_given_up_on_under_a_lock_are_recorded_before_the_seal(
    tmp_path: Path,
) -> None:
    """A lock comes while eight calls wait for their attempts; their callers give up (each
    answered ``evidence_unavailable``), and the turn closes while their writes still queue
    on the writer thread. The lock goes: the seal, written on a thread of its own, took
    the store first, and the records of the turn's calls landed after it, where the seal
    vouches for none of them (docs/kernel.md: the records of a turn's calls precede its
    seal), and a host settling at its exit did not wait for them."""
    import threading

    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db, busy_timeout_s=0.6)
    host = one_tool_host(store, evidence_timeout_s=0.2)
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    with contextlib.closing(holder):
        release = threading.Timer(0.5, holder.execute, ("ROLLBACK",))
        async with evidence_turn(
            store, turn_id="T1", owe=host.owe_evidence, settle=host.settle_owed, timeout_s=1.0
        ):
            assert await _call(host, "T1", "c0") is Outcome.SUCCEEDED
            holder.execute("BEGIN IMMEDIATE")
            release.start()
            async with anyio.create_task_group() as tg:
                for i in range(1, 9):
                    tg.start_soon(_call, host, "T1", f"c{i}")
        release.join()
    assert await host.settle_unwritten() == 0 and host.unsealed_turns() == []
    kinds = _kinds(db, "T1")
    assert kinds == ["open", *["attempt", "outcome"] * 9, "seal"], kinds
    assert {r.call_id for r in store.query(turn_id="T1")} == {f"c{i}" for i in range(9)}
    assert verify_store(store, "T1", require_seal=True).clean


def test_an_owed_seal_written_while_the_given_up_seal_is_still_in_flight_stands_down(
    opener: Opener,
) -> None:
    """The close's seal gave up on its wait (a write ahead of it held the store) but its
    thread went on waiting; the owed seal looked (no seal yet) and queued behind it. Once
    the store answered, both were written: two seals on one chain, which verify took as
    clean. A seal now checks for one atomically with its append, and stands down."""
    import threading

    from sharedos.evidence.appender import Opening
    from sharedos.evidence.turns import seal_closed

    store = opener()
    store.open_turn(Opening(turn_id="T1", opened_at="2026-01-01T00:00:00Z"))
    looked = threading.Event()
    has_seal = store.has_seal

    def has_seal_then_say(turn_id: str) -> bool:
        found = has_seal(turn_id)
        looked.set()
        return found

    results: dict[str, Any] = {}
    with store.appender.lock:  # a write under way, stuck on the store
        # the close's seal: given up on by the turn, its thread still waits behind that write
        first = threading.Thread(target=lambda: results.update(first=seal_closed(store, "T1")))
        first.start()
        store.has_seal = has_seal_then_say  # type: ignore[method-assign]
        late = threading.Thread(
            target=lambda: results.update(late=seal_late(store, "T1", "2026-01-01T00:00:01Z"))
        )
        late.start()
        assert looked.wait(bound(5.0))  # the owed seal saw no seal yet
        store.has_seal = has_seal  # type: ignore[method-assign]
        time.sleep(0.05)  # both queue behind the write (their order does not matter)
    first.join(bound(10.0))
    late.join(bound(10.0))
    kinds = [lk.kind for lk in store.iter_links("T1")]
    assert kinds.count("seal") == 1, kinds
    assert [k for k in ("first", "late") if results.get(k)] != [], results
    report = verify_store(store, "T1", require_seal=True)
    assert report.clean and report.sealed == 1, [p.to_dict() for p in report.problems]
