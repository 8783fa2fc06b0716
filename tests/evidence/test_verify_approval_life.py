"""``sharedos evidence verify`` checks each approval's life, not only its links' hashes.

docs/approvals.md: every step of an approval (asked, approved, denied, lapsed,
used) is a link of the turn's chain, "so `sharedos evidence verify` covers
them". It covered their hashes only: anyone who can write the store could
append a well-hashed ``consumed`` for an approval nobody approved — a call
that ran on no yes — and ``verify`` said the store was clean. Real SQLite
store, real CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence import SqliteEvidenceStore
from sharedos.evidence.appender import Opening
from sharedos.evidence.approvals import ApprovalLedger, Binding, event_values
from tests.approval_data import release_binding

BINDING = release_binding()
APPROVERS = ((("role", "maintainer"),),)


def _verify(db: Path) -> tuple[int, list[dict[str, object]]]:
    out = CliRunner().invoke(main, ["evidence", "verify", "--db", str(db), "--format", "json"])
    assert out.exit_code in (0, 1), out.output
    return out.exit_code, json.loads(out.output)["problems"]


def _store(tmp_path: Path) -> tuple[Path, SqliteEvidenceStore, ApprovalLedger]:
    db = tmp_path / "evidence.db"
    store = SqliteEvidenceStore(db)
    store.open_turn(Opening(turn_id=BINDING.turn_id, opened_at="2026-12-07T00:00:00Z"))
    return db, store, ApprovalLedger(store)


def test_an_approval_used_without_being_approved_is_a_finding(tmp_path: Path) -> None:
    db, store, ledger = _store(tmp_path)
    asked = ledger.request(BINDING, call_id="c1", rule_ids=("r",), approvers=APPROVERS)
    # a writer of the store appends "consumed" straight after the request: no yes
    store.append_approval(
        event_values(
            asked.approval_id,
            "consumed",
            BINDING,
            call_id="c2",
            rule_ids=("r",),
            approvers=APPROVERS,
        )
    )
    store.close()
    code, problems = _verify(db)
    assert code == 1
    assert [p["kind"] for p in problems] == ["approval"]
    assert "'consumed' after 'requested'" in str(problems[0]["detail"])


def test_events_of_an_unrequested_or_rebound_approval_are_findings(tmp_path: Path) -> None:
    db, store, ledger = _store(tmp_path)
    asked = ledger.request(BINDING, call_id="c1", rule_ids=("r",), approvers=APPROVERS)
    other = Binding(**{**{f: getattr(BINDING, f) for f in BINDING.__slots__}, "tool": "rm"})
    for approval_id, event, binding in (
        ("apr-neverrequested00000", "approved", BINDING),
        (asked.approval_id, "approved", other),
    ):
        store.append_approval(
            event_values(
                approval_id,
                event,
                binding,
                call_id=None,
                rule_ids=("r",),
                approvers=APPROVERS,
                approver="maya",
                via="cli",
            )
        )
    store.close()
    code, problems = _verify(db)
    assert code == 1
    details = [str(p["detail"]) for p in problems]
    assert [p["kind"] for p in problems] == ["approval", "approval"], details
    assert "no request before it" in details[0]
    assert "another call than its request" in details[1]


def test_every_life_the_ledger_writes_verifies_clean(tmp_path: Path) -> None:
    db, store, ledger = _store(tmp_path)
    used = ledger.request(BINDING, call_id="c1", rule_ids=("r",), approvers=APPROVERS)
    used = ledger.answer(used.approval_id, approve=True, approver="maya", via="cli")
    ledger.consume(used, call_id="c2")
    denied = ledger.request(BINDING, call_id="c3", rule_ids=("r",), approvers=APPROVERS)
    ledger.answer(denied.approval_id, approve=False, approver="maya", via="cli")
    lapsed = ledger.request(BINDING, call_id="c4", rule_ids=("r",), approvers=APPROVERS)
    lapsed = ledger.answer(lapsed.approval_id, approve=True, approver="maya", via="cli")
    ledger.expire(lapsed, detail="the turn closed")
    ledger.expire(ledger.request(BINDING, call_id="c5", rule_ids=("r",), approvers=APPROVERS))
    store.seal_turn(BINDING.turn_id)
    store.close()
    assert _verify(db) == (0, [])


def test_an_approval_event_after_the_seal_is_a_finding(tmp_path: Path) -> None:
    """docs/approvals.md: "no approval event is appended after a seal" — the ledger refuses
    a request or an answer on a sealed turn, and a closing turn expires every approval still
    open before its seal. The chain may still grow past the seal (a stdio bridge refusing a
    late call), and a signed seal vouches only for what precedes it: a whole approval life
    (asked, approved by "maya", used) appended by a writer of the store after the seal,
    each link well hashed, verified clean and was listed as a real approval."""
    db, store, _ledger = _store(tmp_path)
    store.seal_turn(BINDING.turn_id)
    approval_id = "apr-afterthesealaaaaaa"
    for event, call_id, approver in (
        ("requested", "c1", None),
        ("approved", None, "maya"),
        ("consumed", "c2", None),
    ):
        values = event_values(
            approval_id,
            event,
            BINDING,
            call_id=call_id,
            rule_ids=("r",),
            approvers=APPROVERS,
            approver=approver,
            via="cli" if approver else None,
        )
        store.append_approval(values)
    store.close()
    code, problems = _verify(db)
    assert code == 1
    assert [p["kind"] for p in problems] == ["approval"] * 3, problems
    assert all("after the turn's seal" in str(p["detail"]) for p in problems), problems
