"""``ApprovalLedger`` reads, on a real SQLite store: what ``sharedos approvals list`` shows.

docs/approvals.md: ``list`` shows the approvals "oldest first". The store
hands approval events back turn by turn (each turn's in chain order, turns in
the order of their ids), so without ordering the approvals themselves an
approval asked in a later turn whose id sorts first was listed before one
asked earlier — the operator answering the head of the queue answered the
wrong one.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence import SqliteEvidenceStore
from sharedos.evidence.appender import Opening
from sharedos.evidence.approvals import ApprovalLedger
from tests.approval_data import release_binding

BINDING = release_binding("turn-z")
APPROVERS = ((("role", "maintainer"),),)
APPROVERS_M = ((("role", "m"),),)


def test_every_approval_is_listed_oldest_first_whatever_its_turn_is_called(
    tmp_path: Path,
) -> None:
    db = tmp_path / "evidence.db"
    store = SqliteEvidenceStore(db)
    ledger = ApprovalLedger(store)
    asked = [
        ledger.request(
            replace(BINDING, turn_id=turn),
            call_id=f"call-{turn}",
            rule_ids=("r",),
            approvers=APPROVERS,
        ).approval_id
        for turn in ("turn-z", "turn-a", "turn-m")
    ]
    assert [a.approval_id for a in ledger.every()] == asked
    store.close()
    out = CliRunner().invoke(main, ["approvals", "list", "--db", str(db), "--format", "json"])
    assert out.exit_code == 0, out.output
    import json

    assert [a["approval_id"] for a in json.loads(out.output)] == asked
    text = CliRunner().invoke(main, ["approvals", "list", "--db", str(db)])
    assert [line.split()[0] for line in text.output.splitlines()] == asked


def _close_turn_when_read(monkeypatch: Any, db: Path, turn_id: str, *, seal: bool) -> list[int]:
    """Make the host close ``turn_id`` (its own connection: expire what is open, then seal)
    right after the answering process has read the approval as pending: the moment a
    real turn's close lands between ``sharedos approvals approve``'s read and its write."""
    from sharedos.evidence.turns import expire_open_approvals

    original = ApprovalLedger.turn_closed
    closed: list[int] = []

    def turn_closed(self: ApprovalLedger, turn: str) -> bool:
        answer = original(self, turn)
        if not closed:
            closed.append(1)
            host = SqliteEvidenceStore(db)
            try:
                closed.append(expire_open_approvals(host, turn_id))
                if seal:
                    host.seal_turn(turn_id)
            finally:
                host.close()
        return answer

    monkeypatch.setattr(ApprovalLedger, "turn_closed", turn_closed)
    return closed


@pytest.mark.parametrize("verb", ["approve", "deny"])
@pytest.mark.parametrize("seal", [False, True])
def test_an_answer_racing_the_turn_closing_is_refused_not_reported_done(
    tmp_path: Path, monkeypatch: Any, verb: str, seal: bool
) -> None:
    """docs/approvals.md: ``approve`` and ``deny`` exit 1 when the request lapsed or its turn
    closed. The turn's close (``expired``, then the seal) written by the host after the CLI
    read the request as pending, before it wrote its answer, left the CLI saying "approved
    ... it can be used once" for an approval the store folds as expired — an answer after
    the approval's end, and after the seal, in the chain."""
    db = tmp_path / "evidence.db"
    store = SqliteEvidenceStore(db)
    store.open_turn(Opening(turn_id=BINDING.turn_id, opened_at="2026-12-07T00:00:00Z"))
    ledger = ApprovalLedger(store)
    asked = ledger.request(BINDING, call_id="c1", rule_ids=("r",), approvers=APPROVERS_M)
    store.close()
    closed = _close_turn_when_read(monkeypatch, db, BINDING.turn_id, seal=seal)
    out = CliRunner().invoke(
        main,
        ["approvals", verb, asked.approval_id, "--db", str(db), "--as", "maya", "--role", "m"],
    )
    assert closed == [1, 1]  # the host's close landed in the window
    assert out.exit_code == 1, out.output
    assert "expired, not pending" in out.output
    store = SqliteEvidenceStore(db, read_only=True)
    try:
        again = ApprovalLedger(store).get(asked.approval_id)
        assert again is not None
        assert [e.event for e in again.events] == ["requested", "expired"]
        assert again.status == "expired"
    finally:
        store.close()


def test_a_call_reads_the_approvals_of_its_own_call_not_of_its_whole_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that needs approval looks for one of its exact call twice (the gate's read,
    then the check under the store's writer as its request is appended). Each read folded
    every approval event of the turn: a model asking 1,000 distinct calls made each next
    one cost as much as all of them (quadratic; some 60 ms a call at 2,000, every other
    call's evidence write held meanwhile). It reads the events of its own arguments."""
    from sharedos.evidence.approvals import event_values, new_approval_id

    store = SqliteEvidenceStore(tmp_path / "evidence.db")
    store.open_turn(Opening(turn_id=BINDING.turn_id, opened_at="2026-12-07T00:00:00Z"))
    ledger = ApprovalLedger(store)
    for i in range(200):  # 200 other calls' requests, appended as a flood would leave them
        other = replace(BINDING, arguments_digest=f"sha256:{i:064x}")
        store.append_approval(
            event_values(
                new_approval_id(),
                "requested",
                other,
                call_id=f"c{i}",
                rule_ids=("r",),
                approvers=APPROVERS,
                expires_at="2999-01-01T00:00:00Z",
            )
        )
    mine = ledger.request(BINDING, call_id="mine", rule_ids=("r",), approvers=APPROVERS)
    read: list[int] = []
    real = store.approval_rows

    def counted(**where: Any) -> Any:
        rows = real(**where)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(store, "approval_rows", counted)
    assert [a.approval_id for a in ledger.matching(BINDING)] == [mine.approval_id]
    again = replace(BINDING, arguments_digest="sha256:" + "e" * 64)
    ledger.request(again, call_id="next", rule_ids=("r",), approvers=APPROVERS, same=lambda a: True)
    assert [a.approval_id for a in ledger.matching(again)] != []
    assert read and max(read) <= 1, read
    # the whole turn is still there for the operator
    assert len(ledger.for_turn(BINDING.turn_id)) == 202
    store.close()
