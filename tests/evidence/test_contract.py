# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)
"""The evidence store contract, run against every backend (SQLite file, real PostgreSQL).

One suite, parametrised: whatever a host relies on — two-phase writes,
interrupted attempts, outcomes written once, append-only reads, counts,
hostile text, many writers, refusing what it cannot use — holds the same on
both stores (``sharedos.evidence.store`` states the contract).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sharedos.evidence import EvidenceRecord, EvidenceStore, arguments_digest
from sharedos.evidence.record import OutcomeRecord
from sharedos.evidence.store import EvidenceStoreError
from sharedos.evidence.verify import verify_store
from sharedos.outcomes import Outcome, ReasonCode
from tests.evidence.stores import Opener, backend, opener, store  # noqa: F401  (fixtures)


def attempt(call: str = "c1", turn: str = "t1", **kw: Any) -> EvidenceRecord:
    base: dict[str, Any] = {
        "turn_id": turn,
        "call_id": call,
        "tool": "files.write",
        "started_at": "2026-12-02T10:00:00.000000Z",
        "arguments_digest": arguments_digest({"path": "/public/x"}),
        "arguments": {"path": "/public/x"},
        "effect": "allow",
        "resource": "/public/x",
        "namespace": "files",
        "action": "write",
        "rule_ids": ("files.sos:3",),
    }
    base.update(kw)
    return EvidenceRecord(**base)


def done(
    outcome: Outcome = Outcome.SUCCEEDED, reason: ReasonCode | None = None, error: str | None = None
) -> OutcomeRecord:
    return OutcomeRecord(outcome, "2026-12-02T10:00:00.000500Z", 0.5, reason, error)


def denied(call: str = "d1", turn: str = "t1") -> EvidenceRecord:
    return attempt(
        call,
        turn,
        effect="deny",
        resource="/private/x",
        outcome=Outcome.DENIED,
        reason=ReasonCode.FORBIDDEN,
        finished_at="2026-12-02T10:00:00.000100Z",
        duration_ms=0.1,
    )


def test_the_store_implements_the_protocol(store: Any) -> None:
    assert isinstance(store, EvidenceStore)


def test_an_attempt_reads_as_interrupted_until_its_outcome_lands(store: Any) -> None:
    a = store.begin(attempt("a"))
    b = store.begin(attempt("b"))
    assert b > a
    store.finish(a, done())
    rec_a, rec_b = store.query("t1")
    assert (rec_a.seq, rec_a.status, rec_a.outcome) == (a, "succeeded", Outcome.SUCCEEDED)
    assert (rec_b.seq, rec_b.status, rec_b.outcome) == (b, "interrupted", None)
    assert rec_b.finished_at is None and rec_b.resource == "/public/x"
    assert [r.call_id for r in store.query(outcome="interrupted")] == ["b"]
    counts = store.counts()
    assert (counts.total, counts.interrupted) == (2, 1)
    assert counts.by_outcome == {"interrupted": 1, "succeeded": 1}
    assert counts.by_reason == {"interrupted": 1, "succeeded": 1}


def test_a_record_is_one_commit_of_attempt_and_outcome(store: Any) -> None:
    seq = store.record(denied())
    (back,) = store.query("t1")
    assert back.seq == seq and back.status == "denied" and back.reason is ReasonCode.FORBIDDEN
    assert back.duration_ms == pytest.approx(0.1)
    with pytest.raises(ValueError):
        store.record(attempt("no-outcome"))


def test_an_outcome_is_written_once(store: Any) -> None:
    seq = store.begin(attempt())
    store.finish(seq, done())
    with pytest.raises(EvidenceStoreError) as twice:
        store.finish(seq, done(Outcome.FAILED, ReasonCode.HANDLER_ERROR))
    assert twice.value.cause == "conflict"
    with pytest.raises(EvidenceStoreError) as unknown:
        store.finish(seq + 1000, done())
    assert unknown.value.cause == "conflict"
    (back,) = store.query()
    assert back.outcome is Outcome.SUCCEEDED and back.reason is None
    assert store.counts().total == 1


def test_every_field_survives_the_round_trip(store: Any) -> None:
    original = attempt(
        "full",
        catalog_hash="ab" * 32,
        policy_hash="cd" * 32,
        principal="alice",
        tenant="acme",
        rule_ids=("files.sos:9", "files.sos:10"),
        arguments={"path": "/x", "nested": {"list": [1, 2.5, None, True, "é"]}},
        diagnostics={"alias": "mcp__sharedos__files_read", "meta": {"progressToken": 1}},
        identity={"harness": "claude-code", "harnessVersion": "2.1", "catalogHash": "ab" * 32},
    )
    seq = store.begin(original)
    store.finish(seq, done(Outcome.FAILED, ReasonCode.HANDLER_ERROR, "disk on fire"))
    (back,) = store.query("t1", call_id="full")
    expected = original.with_outcome(done(Outcome.FAILED, ReasonCode.HANDLER_ERROR, "disk on fire"))
    assert back.to_dict() == {**expected.to_dict(), "seq": seq}


def test_hostile_text_is_stored_never_refused(store: Any) -> None:
    # NUL, a lone surrogate, control characters: a call carrying them must still be recorded
    weird = "a\x00b\ud800c\x1b[31m"
    seq = store.begin(attempt(weird, tool=weird, resource=weird, principal=weird))
    store.finish(seq, done(Outcome.FAILED, ReasonCode.HANDLER_ERROR, error=weird))
    store.record(denied("d\x00"))
    assert store.counts().total == 2
    back = store.query()[0]
    assert back.status == "failed" and back.tool.startswith("a") and "c" in back.tool


def test_an_ascii_error_holding_nul_is_stored_never_refused(store: Any) -> None:
    """An error text that is ASCII but holds a NUL (an upstream tool's error message, a
    refusal's detail quoting an argument) must be recorded as any other. PostgreSQL
    ``text`` cannot hold NUL: the outcome was written raw, refused (cause ``io``), and the
    call answered ``evidence_unavailable`` with its attempt left ``interrupted``; a refused
    call's whole record was lost."""
    nul = "upstream said: no such key 'a\x00b'"
    seq = store.begin(attempt("ran"))
    store.finish(seq, done(Outcome.FAILED, ReasonCode.HANDLER_ERROR, error=nul))
    store.record(
        attempt(
            "refused",
            outcome=Outcome.FAILED,
            reason=ReasonCode.INVALID_ARGUMENTS,
            error=nul,
            finished_at="2026-12-02T10:00:00.000100Z",
            duration_ms=0.1,
        )
    )
    back = {r.call_id: r for r in store.query()}
    assert (back["ran"].status, back["refused"].status) == ("failed", "failed")
    for rec in back.values():
        assert rec.error is not None and rec.error.startswith("upstream said: no such key 'a")
    assert verify_store(store).clean


def test_filters_order_and_limit(store: Any) -> None:
    for i in range(5):
        store.record(denied(f"d{i}", turn="t1" if i % 2 else "t2"))
    seqs = [r.seq for r in store.query()]
    assert seqs == sorted(seqs) and len(seqs) == 5
    assert [r.call_id for r in store.query("t1")] == ["d1", "d3"]
    assert [r.call_id for r in store.query(limit=2)] == ["d0", "d1"]
    assert store.query(outcome="succeeded") == []
    assert len(store.query(outcome="denied")) == 5
    assert [r.call_id for r in store.query(call_id="d4")] == ["d4"]
    assert store.turns() == [("t2", 3), ("t1", 2)]
    assert store.counts("t1").total == 2


def test_counts_sum_to_the_total(store: Any) -> None:
    a = store.begin(attempt("a"))
    store.finish(a, done())
    b = store.begin(attempt("b"))
    store.finish(b, done(Outcome.FAILED, ReasonCode.TIMEOUT))
    store.begin(attempt("c"))
    store.record(denied())
    counts = store.counts()
    assert counts.total == 4
    assert sum(counts.by_outcome.values()) == sum(counts.by_reason.values()) == 4
    assert counts.by_reason == {"forbidden": 1, "interrupted": 1, "succeeded": 1, "timeout": 1}
    assert counts.denial_rate == 0.25


def test_a_closed_store_refuses_writes(store: Any) -> None:
    store.close()
    with pytest.raises(EvidenceStoreError) as exc:
        store.begin(attempt())
    assert exc.value.cause == "closed"


def test_a_read_only_store_reads_and_refuses_writes(store: Any, opener: Opener) -> None:
    store.record(denied())
    reader = opener(read_only=True)
    assert reader.counts().total == 1
    with pytest.raises(EvidenceStoreError) as exc:
        reader.record(denied("d2"))
    assert exc.value.cause == "read_only"
    assert store.counts().total == 1


def test_many_threads_write_without_losing_a_row(store: Any) -> None:
    errors: list[BaseException] = []
    seqs: list[int] = []
    lock = threading.Lock()

    def work(worker: int) -> None:
        try:
            for i in range(40):
                seq = store.begin(attempt(f"w{worker}-{i}", turn=f"turn-{worker % 3}"))
                store.finish(seq, done())
                with lock:
                    seqs.append(seq)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(set(seqs)) == 240
    counts = store.counts()
    assert counts.total == 240 and counts.by_outcome == {"succeeded": 240}


def test_two_store_instances_share_one_record(store: Any, opener: Opener) -> None:
    # two hosts (here: two stores in one process, each with its own connection)
    other = opener()
    for i in range(20):
        s = store if i % 2 else other
        seq = s.begin(attempt(f"c{i}"))
        (other if i % 2 else store).finish(seq, done())
    assert store.counts().by_outcome == {"succeeded": 20}
    assert other.counts().total == 20
