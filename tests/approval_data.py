"""The approval the approval tests ask for: bob's ``files.write`` of the release notes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sharedos.evidence import SqliteEvidenceStore
from sharedos.evidence.appender import Opening
from sharedos.evidence.approvals import Approval, ApprovalLedger, Binding


def release_binding(turn_id: str = "turn-1") -> Binding:
    """What an approval of bob's ``files.write`` of ``/shared/release/notes.txt`` in
    ``turn_id`` is bound to."""
    return Binding(
        turn_id=turn_id,
        principal="bob",
        tenant="acme",
        tool="files.write",
        resource="/shared/release/notes.txt",
        arguments_digest="sha256:" + "a" * 64,
        policy_hash="p" * 64,
    )


def pending_approval(db: Path, binding: Binding) -> tuple[Any, ApprovalLedger, Approval]:
    """A SQLite store at ``db`` with ``binding``'s turn open and one approval of it asked
    (call ``c1``, approvers: role ``m``): (the store, its ledger, the approval)."""
    store = SqliteEvidenceStore(db)
    store.open_turn(Opening(turn_id=binding.turn_id, opened_at="2026-12-07T00:00:00Z"))
    ledger = ApprovalLedger(store)
    asked = ledger.request(binding, call_id="c1", rule_ids=("r",), approvers=((("role", "m"),),))
    return store, ledger, asked
