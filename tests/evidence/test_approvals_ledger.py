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

from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence import SqliteEvidenceStore
from sharedos.evidence.approvals import ApprovalLedger, Binding

BINDING = Binding(
    turn_id="turn-z",
    principal="bob",
    tenant="acme",
    tool="files.write",
    resource="/shared/release/notes.txt",
    arguments_digest="sha256:" + "a" * 64,
    policy_hash="p" * 64,
)
APPROVERS = ((("role", "maintainer"),),)


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
