"""A closed turn has none of its approvals open, whatever is asked as it closes.

docs/approvals.md: "the turn closes with an approval pending or approved and
unused | ``expired`` recorded (detail ``the turn closed``) before the seal",
and an approval of a closed turn can no longer be answered. The close read the
turn's approvals, expired the open ones, then sealed; a call still being
decided meanwhile — a stdio bridge that has not yet seen the close, another
process writing the same store — could write its request after that read:

* after the seal: the model was told to "retry once approved" (``retry``
  true) an approval that ``sharedos approvals approve`` then refuses (the turn
  has closed), and ``approvals list`` showed it pending for ``request_ttl_s``;
* between the expiry and the seal: left pending in a sealed turn, same.

Real SQLite store, the real runtime and ``evidence_turn``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from click.testing import CliRunner

from sharedos.catalog import ToolRegistry
from sharedos.cli.main import main
from sharedos.evidence import SqliteEvidenceStore, turns
from sharedos.evidence.approvals import ApprovalLedger
from sharedos.evidence.turns import evidence_turn
from sharedos.evidence.verify import verify_store
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.kernel.approvals import ApprovalGate, ApprovalSettings
from sharedos.outcomes import ReasonCode
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools

POLICY = """
namespace files
requirement files.write { action write; resource path(args.path) }
permit write on "/shared/**"
@id("release-needs-maintainer")
require approval by role "maintainer" for write on "/shared/release/**"
"""
RUN = ToolPolicy(name="all", mode=RunMode.OPEN, managed=("files.*",))
BOB = AccessContext(principal="bob", tenant="acme", roles=("developer",), turn_id="turn-1")
ARGS = {"path": "/shared/release/notes.txt", "content": "v1\n"}


def _host(tmp_path: Path) -> tuple[Path, SqliteEvidenceStore, RuntimeHost]:
    sandbox = tmp_path / "sandbox"
    (sandbox / "shared" / "release").mkdir(parents=True)
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    db = tmp_path / "evidence.db"
    store = SqliteEvidenceStore(db)
    policy = compile_source(POLICY, "files.sos")
    host = RuntimeHost(Kernel(policy, registry), store, approvals=ApprovalSettings())
    return db, store, host


def _open_after_seal(store: SqliteEvidenceStore) -> list[str]:
    kinds = [lk.kind for lk in store.iter_links("turn-1")]
    assert "seal" in kinds, kinds
    return kinds[kinds.index("seal") + 1 :]


def test_a_call_reaching_a_closed_turn_asks_for_no_approval(tmp_path: Path) -> None:
    db, store, host = _host(tmp_path)

    async def go() -> Any:
        async with evidence_turn(store, turn_id="turn-1"):
            pass
        # a stdio bridge that has not seen the close yet hands the call on
        call = ToolCall(tool="files.write", arguments=ARGS, turn_id="turn-1")
        return await host.invoke_tool(call, BOB, RUN)

    try:
        result = anyio.run(go)
        assert result.reason is ReasonCode.APPROVAL_REQUIRED
        assert result.structured["retry"] is False, result.structured
        assert "has closed" in result.structured["detail"]
        assert "approval" not in _open_after_seal(store)
        assert ApprovalLedger(store).for_turn("turn-1") == []
        assert verify_store(store, "turn-1").clean
    finally:
        store.close()
    listed = CliRunner().invoke(main, ["approvals", "list", "--db", str(db)])
    assert listed.exit_code == 0 and listed.output.strip() == "no pending approvals"


def test_a_request_written_between_the_closes_expiry_and_its_seal_is_expired(
    tmp_path: Path, monkeypatch: Any
) -> None:
    db, store, host = _host(tmp_path)
    gate = host.approvals
    assert isinstance(gate, ApprovalGate)
    expire = turns.expire_open_approvals
    asked: list[str] = []

    def expire_then_a_call_asks(s: Any, turn_id: str) -> int:
        closed = expire(s, turn_id)
        if not asked:
            # another process of the turn (its own connection) writes a request now
            other = SqliteEvidenceStore(db)
            try:
                binding = ApprovalGate.binding(
                    "turn-1", "bob", "acme", "files.write", "/shared/release/x", {}, "p" * 64
                )
                made = ApprovalLedger(other).request(
                    binding, call_id="c9", rule_ids=("r",), approvers=((("role", "m"),),)
                )
                asked.append(made.approval_id)
            finally:
                other.close()
        return closed

    monkeypatch.setattr(turns, "expire_open_approvals", expire_then_a_call_asks)

    async def go() -> None:
        async with evidence_turn(store, turn_id="turn-1"):
            pass

    try:
        anyio.run(go)
        assert asked
        approval = ApprovalLedger(store).get(asked[0])
        assert approval is not None and approval.status == "expired"
        assert _open_after_seal(store) == []
        assert verify_store(store, "turn-1").clean
    finally:
        store.close()
