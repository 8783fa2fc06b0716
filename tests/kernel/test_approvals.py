"""The approval step of the kernel (issue 28): one exact call, one recorded yes, used once.

Real parts: a compiled policy with an approval rule, the files tools over a
sandbox, a SQLite evidence store, the ``sharedos approvals`` command. Replay
and tampering — an approval used twice, for other arguments, after it
lapsed, in another turn, by another principal, after a new bundle — are all
refused and recorded.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from sharedos.catalog import ToolRegistry
from sharedos.cli.main import main as cli_main
from sharedos.evidence import SqliteEvidenceStore
from sharedos.evidence.approvals import ApprovalLedger
from sharedos.evidence.postgres import PostgresEvidenceStore
from sharedos.evidence.verify import verify_store
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.kernel.approvals import ApprovalSettings
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools
from tests.fleet.pgcluster import FrozenBackends
from tests.timing import bound

POLICY = """
namespace files
requirement files.read  { action read;  resource path(args.path) }
requirement files.write { action write; resource path(args.path) }
permit read, write on "/shared/**"
forbid write on "/shared/frozen/**"
@id("release-needs-maintainer")
require approval by role "maintainer", group "release" for write on "/shared/release/**"
"""

RUN = ToolPolicy(name="all", mode=RunMode.OPEN, managed=("files.*",))
BOB = AccessContext(principal="bob", tenant="acme", roles=("developer",), turn_id="turn-1")


class Host:
    """A host over one sandbox and one store; ``policy`` may be swapped (a new bundle)."""

    def __init__(self, tmp: Path, policy_text: str = POLICY, **settings: Any) -> None:
        self.sandbox = tmp / "sandbox"
        (self.sandbox / "shared" / "release").mkdir(parents=True, exist_ok=True)
        self.db = tmp / "evidence.db"
        self.store = SqliteEvidenceStore(self.db)
        self.registry = ToolRegistry()
        register_files_tools(self.registry, self.sandbox)
        self.settings = ApprovalSettings(**settings)
        self.use(policy_text)

    def use(self, policy_text: str) -> None:
        self.policy = compile_source(policy_text, "files.sos")
        self.host = RuntimeHost(
            Kernel(self.policy, self.registry), self.store, approvals=self.settings
        )

    def call(self, args: dict[str, Any], context: AccessContext = BOB, peer: Any = None) -> Any:
        async def go() -> Any:
            return await self.host.invoke_tool(
                ToolCall(tool="files.write", arguments=args, turn_id=context.turn_id),
                context,
                RUN,
                peer=peer,
            )

        return anyio.run(go)


def approve(db: Path | str, approval_id: str, *extra: str) -> Any:
    return CliRunner().invoke(
        cli_main, ["approvals", "approve", approval_id, "--db", str(db), *extra]
    )


ARGS = {"path": "/shared/release/notes.txt", "content": "v1\n"}


def test_out_of_band_approval_then_the_same_call_runs_once(tmp_path: Path) -> None:
    h = Host(tmp_path)
    first = h.call(ARGS)
    assert first.outcome is Outcome.DENIED and first.reason is ReasonCode.APPROVAL_REQUIRED
    s = first.structured
    assert s["reason"] == "approval_required" and s["retry"] is True
    approval_id = s["approvalId"]
    assert approval_id.startswith("apr-") and approval_id in first.content[0]["text"]
    assert "role 'maintainer' or group 'release'" in s["approvers"]
    assert not (h.sandbox / "shared/release/notes.txt").exists()
    # retried before anyone answered: the same pending approval, nothing runs
    again = h.call(ARGS)
    assert again.structured["approvalId"] == approval_id
    # a developer may not approve it; a maintainer may
    denied = approve(h.db, approval_id, "--as", "dan", "--role", "developer")
    assert denied.exit_code == 1 and "may not answer" in denied.output
    ok = approve(h.db, approval_id, "--as", "maya", "--role", "maintainer")
    assert ok.exit_code == 0, ok.output
    ran = h.call(ARGS)
    assert ran.outcome is Outcome.SUCCEEDED, ran.content
    assert (h.sandbox / "shared/release/notes.txt").read_text() == "v1\n"
    # used once: the next identical call needs a new approval
    replay = h.call(ARGS)
    assert replay.reason is ReasonCode.APPROVAL_REQUIRED
    assert replay.structured["approvalId"] != approval_id
    assert f"approval {approval_id} was already used" in replay.structured["detail"]
    approval = ApprovalLedger(h.store).get(approval_id)
    assert approval is not None and approval.status == "consumed"
    assert approval.approver == "maya" and approval.via == "cli"
    assert approval.closed_call == ran.call_id
    records = {r.call_id: r for r in h.store.query("turn-1")}
    assert records[first.call_id].effect == "approval_required"
    # the approval binds the digest the record carries: an auditor can join them
    assert approval.binding.arguments_digest == records[first.call_id].arguments_digest
    assert approval.request_call == first.call_id
    assert records[first.call_id].reason is ReasonCode.APPROVAL_REQUIRED
    assert (
        records[ran.call_id].effect == "allow" and records[ran.call_id].outcome is Outcome.SUCCEEDED
    )
    assert "release-needs-maintainer" in records[ran.call_id].rule_ids
    report = verify_store(h.store)
    assert report.clean, [p.line() for p in report.problems]


def _approved(h: Host, args: dict[str, Any] = ARGS, context: AccessContext = BOB) -> str:
    approval_id = h.call(args, context).structured["approvalId"]
    assert approve(h.db, approval_id, "--as", "maya", "--group", "release").exit_code == 0
    return str(approval_id)


def test_an_approval_binds_to_the_exact_arguments(tmp_path: Path) -> None:
    h = Host(tmp_path)
    approval_id = _approved(h)
    other = h.call({**ARGS, "content": "v2\n"})
    assert other.reason is ReasonCode.APPROVAL_REQUIRED
    assert other.structured["approvalId"] != approval_id
    assert not (h.sandbox / "shared/release/notes.txt").exists()
    # the approved call itself still runs
    assert h.call(ARGS).outcome is Outcome.SUCCEEDED


def test_an_approval_binds_to_the_canonical_resource_not_its_spelling(tmp_path: Path) -> None:
    h = Host(tmp_path)
    _approved(h)
    spelled = {**ARGS, "path": "/shared/release/../release/notes.txt"}
    # another spelling is other arguments (the digest is over the arguments as sent)
    assert h.call(spelled).reason is ReasonCode.APPROVAL_REQUIRED


def test_an_approval_binds_to_the_turn_and_the_principal(tmp_path: Path) -> None:
    h = Host(tmp_path)
    _approved(h)
    other_turn = AccessContext(principal="bob", tenant="acme", roles=("developer",), turn_id="t2")
    assert h.call(ARGS, other_turn).reason is ReasonCode.APPROVAL_REQUIRED
    eve = AccessContext(principal="eve", tenant="acme", roles=("developer",), turn_id="turn-1")
    assert h.call(ARGS, eve).reason is ReasonCode.APPROVAL_REQUIRED
    other_tenant = AccessContext(principal="bob", tenant="beta", roles=(), turn_id="turn-1")
    assert h.call(ARGS, other_tenant).reason is ReasonCode.APPROVAL_REQUIRED
    assert h.call(ARGS).outcome is Outcome.SUCCEEDED  # bob, turn-1: still there for him


def test_a_new_bundle_needs_a_new_approval(tmp_path: Path) -> None:
    h = Host(tmp_path)
    approval_id = _approved(h)
    h.use(POLICY + '\npermit read on "/other/**"\n')  # another program, another bundle hash
    after = h.call(ARGS)
    assert after.reason is ReasonCode.APPROVAL_REQUIRED
    assert after.structured["approvalId"] != approval_id


def test_a_lapsed_approval_is_refused_and_recorded_expired(tmp_path: Path) -> None:
    h = Host(tmp_path)
    approval_id = h.call(ARGS).structured["approvalId"]
    ledger = ApprovalLedger(h.store)
    # approved an hour ago with a one-minute life: it lapsed
    ledger.answer(
        approval_id,
        approve=True,
        approver="maya",
        via="cli",
        ttl_s=60,
        when=datetime.now(UTC) - timedelta(hours=1) + timedelta(seconds=1),
    )
    late = h.call(ARGS)
    assert late.reason is ReasonCode.APPROVAL_REQUIRED
    assert late.structured["approvalId"] != approval_id
    got = ledger.get(approval_id)
    assert got is not None and got.status == "expired"
    assert [e.event for e in got.events] == ["requested", "approved", "expired"]
    assert not (h.sandbox / "shared/release/notes.txt").exists()


def test_a_lapsed_request_cannot_be_approved(tmp_path: Path) -> None:
    h = Host(tmp_path, request_ttl_s=0.05)
    approval_id = h.call(ARGS).structured["approvalId"]
    import time

    time.sleep(0.1)
    late = approve(h.db, approval_id, "--as", "maya", "--role", "maintainer")
    assert late.exit_code == 1 and "lapsed" in late.output
    got = ApprovalLedger(h.store).get(approval_id)
    assert got is not None and got.status == "expired"


def test_a_denied_approval_refuses_and_a_retry_asks_again(tmp_path: Path) -> None:
    h = Host(tmp_path)
    approval_id = h.call(ARGS).structured["approvalId"]
    no = CliRunner().invoke(
        cli_main,
        [
            "approvals",
            "deny",
            approval_id,
            "--db",
            str(h.db),
            "--as",
            "maya",
            "--role",
            "maintainer",
        ],
    )
    assert no.exit_code == 0, no.output
    after = h.call(ARGS)
    assert after.reason is ReasonCode.APPROVAL_REQUIRED
    assert f"approval {approval_id} was denied by maya" in after.structured["detail"]
    assert not (h.sandbox / "shared/release/notes.txt").exists()


def test_a_forbid_wins_and_asks_nobody(tmp_path: Path) -> None:
    h = Host(tmp_path)
    (h.sandbox / "shared/frozen").mkdir(parents=True)
    res = h.call({"path": "/shared/frozen/x", "content": "x"})
    assert res.reason is ReasonCode.FORBIDDEN
    assert ApprovalLedger(h.store).every() == []


def test_two_calls_racing_for_one_approval_one_wins(tmp_path: Path) -> None:
    h = Host(tmp_path)
    approval_id = _approved(h)

    async def race() -> list[Any]:
        results: list[Any] = [None, None]

        async def one(i: int) -> None:
            results[i] = await h.host.invoke_tool(
                ToolCall(tool="files.write", arguments=ARGS, turn_id="turn-1"), BOB, RUN
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, 0)
            tg.start_soon(one, 1)
        return results

    results = anyio.run(race)
    outcomes = sorted(str(r.outcome) for r in results)
    assert outcomes == ["denied", "succeeded"], [r.content for r in results]
    got = ApprovalLedger(h.store).get(approval_id)
    assert got is not None and got.status == "consumed"
    assert sum(1 for e in got.events if e.event == "consumed") == 1


def _at_once(h: Host, n: int, context: AccessContext = BOB, peer: Any = None) -> list[Any]:
    async def race() -> list[Any]:
        results: list[Any] = [None] * n

        async def one(i: int) -> None:
            results[i] = await h.host.invoke_tool(
                ToolCall(tool="files.write", arguments=ARGS, turn_id=context.turn_id),
                context,
                RUN,
                peer=peer,
            )

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        return results

    return anyio.run(race)


def test_identical_calls_at_once_make_one_request(tmp_path: Path) -> None:
    """docs/approvals.md, the flow: a request is recorded "or, when one is already pending
    for this exact call, that one is named". Identical calls at once each read no request
    and each wrote one: three pending approvals of one call, each of which an operator
    could approve (and the call then run as often); with elicitation, three questions."""
    h = Host(tmp_path)
    results = _at_once(h, 3)
    assert all(r.reason is ReasonCode.APPROVAL_REQUIRED for r in results)
    ids = {r.structured["approvalId"] for r in results}
    assert len(ids) == 1, ids
    assert all(r.structured["retry"] is True for r in results)
    assert [a.approval_id for a in ApprovalLedger(h.store).for_turn("turn-1")] == list(ids)
    # the one approval lets the call run once
    assert approve(h.db, ids.pop(), "--as", "maya", "--role", "maintainer").exit_code == 0
    outcomes = sorted(str(r.outcome) for r in _at_once(h, 2))
    assert outcomes == ["denied", "succeeded"]


def test_identical_calls_at_once_ask_the_client_once(tmp_path: Path) -> None:
    h = Host(tmp_path)
    maya = AccessContext(principal="maya", tenant="acme", roles=("maintainer",), turn_id="t")
    peer = _Peer({"action": "accept", "content": {"approve": True}}, delay=0.2)
    results = _at_once(h, 3, maya, peer)
    assert len(peer.asked) == 1, peer.asked
    assert sorted(str(r.outcome) for r in results) == ["denied", "denied", "succeeded"]
    (approval,) = ApprovalLedger(h.store).for_turn("t")
    assert approval.status == "consumed"


class _Peer:
    """A back channel answering elicitation as a client would (the bridge tests use the SDK)."""

    def __init__(self, answer: dict[str, Any] | None, delay: float = 0.0) -> None:
        self.answer = answer
        self.delay = delay
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.can_request = True

    def client_supports(self, capability: str) -> bool:
        return capability == "elicitation"

    async def elicit(self, message: str, schema: dict[str, Any]) -> dict[str, Any]:
        self.asked.append((message, schema))
        await asyncio.sleep(self.delay)
        assert self.answer is not None
        return self.answer


def test_elicitation_is_asked_only_when_the_principal_may_approve(tmp_path: Path) -> None:
    h = Host(tmp_path, groups={"release": frozenset({"rita"})}, groups_tenant="acme")
    peer = _Peer({"action": "accept", "content": {"approve": True}})
    # bob is a developer: he may not approve, so he is not asked (out of band instead)
    res = h.call(ARGS, peer=peer)
    assert res.reason is ReasonCode.APPROVAL_REQUIRED and peer.asked == []
    rita = AccessContext(principal="rita", tenant="acme", roles=(), turn_id="turn-r")
    ran = h.call(ARGS, rita, peer=peer)
    assert ran.outcome is Outcome.SUCCEEDED, ran.content
    message, schema = peer.asked[0]
    assert "files.write" in message and "/shared/release/notes.txt" in message
    assert "sha256:" in message and schema["required"] == ["approve"]
    (approval,) = ApprovalLedger(h.store).for_turn("turn-r")
    assert approval.status == "consumed"
    assert approval.approver == "rita" and approval.via == "elicitation"


def test_elicitation_decline_and_timeout_refuse(tmp_path: Path) -> None:
    h = Host(tmp_path, elicitation_timeout_s=0.2)
    maya = AccessContext(principal="maya", tenant="acme", roles=("maintainer",), turn_id="t")
    declined = h.call(ARGS, maya, peer=_Peer({"action": "decline"}))
    assert declined.reason is ReasonCode.APPROVAL_REQUIRED
    assert "declined" in declined.structured["detail"]
    said_no = h.call(ARGS, maya, peer=_Peer({"action": "accept", "content": {"approve": False}}))
    assert said_no.reason is ReasonCode.APPROVAL_REQUIRED
    slow = h.call(ARGS, maya, peer=_Peer({"action": "accept", "content": {"approve": True}}, 5))
    assert slow.reason is ReasonCode.APPROVAL_REQUIRED
    assert "no answer from the client" in slow.structured["detail"]
    statuses = [a.status for a in ApprovalLedger(h.store).for_turn("t")]
    assert statuses == ["denied", "denied", "expired"]
    assert not (h.sandbox / "shared/release/notes.txt").exists()


def test_without_a_ledger_a_call_that_needs_approval_is_refused(tmp_path: Path) -> None:
    from sharedos.kernel.recorder import RecordOnlyStore  # noqa: F401  (the store API stays)

    h = Host(tmp_path)
    h.host.approvals = None
    res = h.call(ARGS)
    assert res.reason is ReasonCode.APPROVAL_REQUIRED
    assert res.structured["retry"] is False
    assert not (h.sandbox / "shared/release/notes.txt").exists()


@pytest.mark.parametrize("status", ["pending", "all"])
def test_list_and_show(tmp_path: Path, status: str) -> None:
    h = Host(tmp_path)
    approval_id = h.call(ARGS).structured["approvalId"]
    out = CliRunner().invoke(cli_main, ["approvals", "list", "--db", str(h.db), "--status", status])
    assert out.exit_code == 0 and approval_id in out.output
    shown = CliRunner().invoke(cli_main, ["approvals", "show", approval_id, "--db", str(h.db)])
    assert shown.exit_code == 0, shown.output
    assert "files.write on /shared/release/notes.txt" in shown.output
    assert '"content": "v1\\n"' in shown.output and "release-needs-maintainer" in shown.output


def test_a_pending_approval_survives_a_restart(tmp_path: Path) -> None:
    h = Host(tmp_path)
    approval_id = h.call(ARGS).structured["approvalId"]
    h.store.close()  # the host goes away with the request pending
    again = Host(tmp_path)  # a new host process on the same store
    listed = CliRunner().invoke(cli_main, ["approvals", "list", "--db", str(again.db)])
    assert listed.exit_code == 0 and approval_id in listed.output
    assert approve(again.db, approval_id, "--as", "maya", "--role", "maintainer").exit_code == 0
    ran = again.call(ARGS)
    assert ran.outcome is Outcome.SUCCEEDED, ran.content
    got = ApprovalLedger(again.store).get(approval_id)
    assert got is not None and got.status == "consumed" and got.closed_call == ran.call_id


def test_two_hosts_sharing_postgresql_consume_an_approval_once(tmp_path: Path, pg_url: str) -> None:
    from sharedos.evidence.url import open_store

    sandbox = tmp_path / "sandbox"
    (sandbox / "shared" / "release").mkdir(parents=True)
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    policy = compile_source(POLICY, "files.sos")
    stores = [open_store(pg_url), open_store(pg_url)]
    hosts = [RuntimeHost(Kernel(policy, registry), s, approvals=ApprovalSettings()) for s in stores]
    call = ToolCall(tool="files.write", arguments=ARGS, turn_id="turn-1")
    try:
        first = anyio.run(lambda: hosts[0].invoke_tool(call, BOB, RUN))
        approval_id = first.structured["approvalId"]
        # the other host sees the same pending approval
        seen = ApprovalLedger(stores[1]).get(approval_id)
        assert seen is not None and seen.status == "pending"
        assert approve(pg_url, approval_id, "--as", "maya", "--role", "maintainer").exit_code == 0

        async def race() -> list[Any]:
            results: list[Any] = [None, None]

            async def one(i: int) -> None:
                results[i] = await hosts[i].invoke_tool(call, BOB, RUN)

            async with anyio.create_task_group() as tg:
                tg.start_soon(one, 0)
                tg.start_soon(one, 1)
            return results

        results = anyio.run(race)
        assert sorted(str(r.outcome) for r in results) == ["denied", "succeeded"]
        loser = next(r for r in results if r.outcome is Outcome.DENIED)
        assert loser.reason is ReasonCode.APPROVAL_REQUIRED
        got = ApprovalLedger(stores[0]).get(approval_id)
        assert got is not None and got.status == "consumed"
        assert [e.event for e in got.events].count("consumed") == 1
        assert verify_store(stores[1]).clean
    finally:
        for s in stores:
            s.close()


def test_identical_calls_on_two_hosts_sharing_postgresql_make_one_request(
    tmp_path: Path, pg_url: str
) -> None:
    from sharedos.evidence.url import open_store

    sandbox = tmp_path / "sandbox"
    (sandbox / "shared" / "release").mkdir(parents=True)
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    policy = compile_source(POLICY, "files.sos")
    stores = [open_store(pg_url), open_store(pg_url)]
    hosts = [RuntimeHost(Kernel(policy, registry), s, approvals=ApprovalSettings()) for s in stores]
    call = ToolCall(tool="files.write", arguments=ARGS, turn_id="turn-1")
    try:

        async def race() -> list[Any]:
            results: list[Any] = [None] * 4

            async def one(i: int) -> None:
                results[i] = await hosts[i % 2].invoke_tool(call, BOB, RUN)

            async with anyio.create_task_group() as tg:
                for i in range(4):
                    tg.start_soon(one, i)
            return results

        results = anyio.run(race)
        assert all(r.reason is ReasonCode.APPROVAL_REQUIRED for r in results)
        assert len({r.structured["approvalId"] for r in results}) == 1
        assert len(ApprovalLedger(stores[0]).for_turn("turn-1")) == 1
        assert verify_store(stores[1]).clean
    finally:
        for s in stores:
            s.close()


def test_with_a_host_file_the_approvers_roles_are_the_hosts(tmp_path: Path) -> None:
    h = Host(tmp_path)
    approval_id = h.call(ARGS).structured["approvalId"]
    host_file = tmp_path / "host.toml"
    host_file.write_text(
        "version = 1\n"
        '[harness.pi]\nprovider = "scripted"\n'
        f'[evidence]\nurl = "{h.db}"\n'
        '[approvals.approvers.maya]\nroles = ["maintainer"]\n',
        encoding="utf-8",
    )
    base = ["approvals", "approve", approval_id, "--host-file", str(host_file)]
    # roles asserted on the command line are refused when the host says who is who
    asserted = CliRunner().invoke(cli_main, [*base, "--as", "dan", "--role", "maintainer"])
    assert asserted.exit_code != 0 and "--role and --group are refused" in asserted.output
    dan = CliRunner().invoke(cli_main, [*base, "--as", "dan"])
    assert dan.exit_code == 1 and "dan may not answer" in dan.output
    maya = CliRunner().invoke(cli_main, [*base, "--as", "maya"])
    assert maya.exit_code == 0, maya.output
    got = ApprovalLedger(h.store).get(approval_id)
    assert got is not None and got.approver == "maya" and got.detail is not None
    assert f"roles and groups from {host_file}" in got.detail and "os user" in got.detail
    assert h.call(ARGS).outcome is Outcome.SUCCEEDED


def test_a_group_member_of_another_tenant_is_not_that_member(tmp_path: Path) -> None:
    """``[approvals.groups]`` names principals of one tenant: a ``rita`` of another
    tenant is not asked as a ``release`` member and cannot approve her own write."""
    h = Host(tmp_path, groups={"release": frozenset({"rita"})}, groups_tenant="acme")
    peer = _Peer({"action": "accept", "content": {"approve": True}})
    other = AccessContext(principal="rita", tenant="elsewhere", roles=(), turn_id="turn-x")
    res = h.call(ARGS, other, peer=peer)
    assert res.reason is ReasonCode.APPROVAL_REQUIRED and peer.asked == []
    (pending,) = ApprovalLedger(h.store).for_turn("turn-x")
    assert pending.status == "pending"
    # the default: the groups name principals of the tenant "default"
    d = Host(tmp_path / "d", groups={"release": frozenset({"rita"})})
    acme_rita = AccessContext(principal="rita", tenant="acme", roles=(), turn_id="turn-y")
    assert d.call(ARGS, acme_rita, peer=peer).reason is ReasonCode.APPROVAL_REQUIRED
    home_rita = AccessContext(principal="rita", roles=(), turn_id="turn-z")
    assert d.call(ARGS, home_rita, peer=peer).outcome is Outcome.SUCCEEDED


def test_an_approval_does_not_cover_an_approval_rule_that_applies_only_since(
    tmp_path: Path,
) -> None:
    """The approval rules a call needs may change within one binding (a condition on
    ``context.now``): a yes given for the rules that applied when the call asked is no yes
    to a rule that applies when it is retried (every rule that applies needs its approver)."""
    import time

    late = int(time.time()) + 2
    policy = (
        POLICY
        + '@id("late-needs-security")\n'
        + 'require approval by role "security" for write on "/shared/release/**" '
        + f"when context.now.timestamp >= {late}\n"
    )
    h = Host(tmp_path, policy)
    first = h.call(ARGS)
    if time.time() >= late:
        pytest.skip("the machine was too slow to ask before the second rule applied")
    assert first.structured["approvers"] == (
        "role 'maintainer' or group 'release' (release-needs-maintainer)"
    )
    approval_id = first.structured["approvalId"]
    assert approve(h.db, approval_id, "--as", "maya", "--role", "maintainer").exit_code == 0
    time.sleep(max(0.0, late - time.time()) + 0.1)
    # now the call also needs a security approval: maya's yes does not give it
    after = h.call(ARGS)
    assert after.reason is ReasonCode.APPROVAL_REQUIRED, after.content
    assert "late-needs-security" in after.structured["approvers"]
    assert after.structured["approvalId"] != approval_id
    assert f"approval {approval_id} was for other approval rules" in after.structured["detail"]
    assert not (h.sandbox / "shared/release/notes.txt").exists()
    got = ApprovalLedger(h.store).get(approval_id)
    assert got is not None and got.status == "approved"  # not used
    # the new request, once approved by someone who satisfies both rules, runs the call
    both = after.structured["approvalId"]
    ok = approve(h.db, both, "--as", "sam", "--role", "maintainer", "--role", "security")
    assert ok.exit_code == 0, ok.output
    assert h.call(ARGS).outcome is Outcome.SUCCEEDED


def test_a_store_that_fails_the_approval_step_fails_the_call_and_never_denies_it(
    tmp_path: Path,
) -> None:
    """The store locked by another writer past the evidence timeout while a request is
    written: the approval step cannot say whether the request landed (here it lands once
    the lock goes), so the call fails ``evidence_unavailable`` (nothing ran), recorded as a
    failure, never a denial telling the model no request exists and a retry will not help."""
    import sqlite3

    h = Host(tmp_path)
    h.host = RuntimeHost(
        Kernel(h.policy, h.registry), h.store, approvals=h.settings, evidence_timeout_s=0.5
    )
    blocker = sqlite3.connect(h.db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another writer holds the store (reads still go)

    async def go() -> Any:
        got: list[Any] = []

        async def call() -> None:
            got.append(
                await h.host.invoke_tool(
                    ToolCall(tool="files.write", arguments=ARGS, turn_id="turn-1"), BOB, RUN
                )
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await anyio.sleep(0.8)  # past the approval step's timeout
            blocker.execute("COMMIT")
        return got[0]

    try:
        res = anyio.run(go)
    finally:
        blocker.close()
    s = res.structured
    if res.outcome is Outcome.DENIED:  # the request landed in time (a slow machine)
        assert s["retry"] is True and s["approvalId"].startswith("apr-"), s
    else:
        assert res.outcome is Outcome.FAILED, s
        assert res.reason is ReasonCode.EVIDENCE_UNAVAILABLE, s
        assert "approval request could not be recorded" in s["detail"]
        assert "nothing ran" in s["detail"]
    assert not (h.sandbox / "shared/release/notes.txt").exists()
    anyio.run(h.host.settle_unwritten)
    # what the store keeps agrees with what the model was told
    (record,) = h.store.query("turn-1")
    assert record.outcome is res.outcome and record.reason is res.reason


class _AnsweredMeanwhile(_Peer):
    """A person at the client who accepts, while an operator answers the same request out of
    band (``sharedos approvals approve|deny``) before the client's answer comes back."""

    def __init__(self, db: Path, verb: str) -> None:
        super().__init__({"action": "accept", "content": {"approve": True}})
        self.db, self.verb = db, verb

    async def elicit(self, message: str, schema: dict[str, Any]) -> dict[str, Any]:
        approval_id = message.split()[2].rstrip(":")
        argv = ["approvals", self.verb, approval_id, "--db", str(self.db)]
        argv += ["--as", "rita", "--role", "maintainer"]
        out = await asyncio.to_thread(CliRunner().invoke, cli_main, argv)
        assert out.exit_code == 0, out.output
        return await super().elicit(message, schema)


@pytest.mark.parametrize("verb", ["deny", "approve"])
def test_a_request_answered_out_of_band_while_the_client_is_asked_is_said_as_it_stands(
    tmp_path: Path, verb: str
) -> None:
    """The client's answer cannot be recorded (the operator's landed first): the refusal
    names the approval as it stands now, never as still waiting for an approver."""
    h = Host(tmp_path)
    maya = AccessContext(principal="maya", tenant="acme", roles=("maintainer",), turn_id="t")
    res = h.call(ARGS, maya, peer=_AnsweredMeanwhile(h.db, verb))
    s = res.structured
    assert res.reason is ReasonCode.APPROVAL_REQUIRED and "could not be recorded" in s["detail"]
    text = res.content[0]["text"]
    assert "waiting for an approver" not in text, text
    assert not (h.sandbox / "shared/release/notes.txt").exists()
    if verb == "deny":
        assert s["approvalStatus"] == "denied" and s["retry"] is False
        assert h.call(ARGS, maya).structured["approvalId"] != s["approvalId"]  # asks anew
    else:
        assert s["approvalStatus"] == "approved" and s["retry"] is True
        assert f"Approval {s['approvalId']} has been approved: retry" in text
        assert h.call(ARGS, maya).outcome is Outcome.SUCCEEDED  # the retry runs on rita's yes


def test_the_record_of_a_call_that_ran_on_an_approval_names_it(tmp_path: Path) -> None:
    """docs/approvals.md: the attempt that used an approval is recorded ``allow`` naming the
    approver and the approval id — in its own record, so an auditor reading the call (an
    export) sees what let it run, not only an ``allow`` like a permit's."""
    h = Host(tmp_path)
    approval_id = _approved(h)
    ran = h.call(ARGS)
    assert ran.outcome is Outcome.SUCCEEDED
    record = next(r for r in h.store.query("turn-1") if r.call_id == ran.call_id)
    assert record.effect == "allow"
    assert record.diagnostics == {
        "approval": {"approvalId": approval_id, "approver": "maya", "via": "cli"}
    }
    exported = CliRunner().invoke(
        cli_main, ["evidence", "export", "--db", str(h.db), "--format", "jsonl"]
    )
    assert exported.exit_code == 0, exported.output
    assert approval_id in exported.output.splitlines()[-1]
    assert verify_store(h.store).clean


class _MovesTheStore(_Peer):
    """A person at the client who accepts, while the evidence database is moved away (a
    rotation) before the answer comes back."""

    def __init__(self, db: Path) -> None:
        super().__init__({"action": "accept", "content": {"approve": True}})
        self.db = db

    async def elicit(self, message: str, schema: dict[str, Any]) -> dict[str, Any]:
        self.db.rename(self.db.with_name("rotated.db"))
        return await super().elicit(message, schema)


def test_a_store_lost_while_the_client_is_asked_fails_the_call_as_unavailable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/approvals.md: a store that cannot be read or written during the approval step
    (a lost database) fails the call ``evidence_unavailable``. Recording the client's answer
    reads whether the turn is sealed through a connection of its own, opened by path: with
    the database gone from it, SQLite's own error escaped the approval step, and the call
    was refused ``internal_error`` with a traceback on stderr."""
    h = Host(tmp_path)
    caplog.set_level(logging.ERROR, logger="sharedos.approvals")
    maya = AccessContext(principal="maya", tenant="acme", roles=("maintainer",), turn_id="t")
    res = h.call(ARGS, maya, peer=_MovesTheStore(h.db))
    assert res.outcome is Outcome.FAILED, res.structured
    assert res.reason is ReasonCode.EVIDENCE_UNAVAILABLE, res.structured
    assert "nothing ran" in res.structured["detail"]
    assert not (h.sandbox / "shared/release/notes.txt").exists()
    assert "internal error" not in caplog.text, caplog.text


def test_a_call_cancelled_while_its_approver_is_asked_is_asked_again_on_retry(
    tmp_path: Path,
) -> None:
    """The client cancelled the call while its question was shown (the person interrupted
    the harness): the request stayed ``pending``, so the retry of the same call was never
    asked at the client — refused out of band as "waiting for an approver" until the request
    lapsed (an hour by default), though the person asked is an approver. A question that
    goes unanswered because the call went away closes its request, as silence does."""
    h = Host(tmp_path)
    maya = AccessContext(principal="maya", tenant="acme", roles=("maintainer",), turn_id="t")
    never = _Peer({"action": "accept", "content": {"approve": True}}, delay=3600)

    async def cancelled() -> None:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await h.host.invoke_tool(
                    ToolCall(tool="files.write", arguments=ARGS, turn_id="t"), maya, RUN, peer=never
                )

            tg.start_soon(call)
            with anyio.fail_after(bound(30)):
                while not never.asked:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()

    anyio.run(cancelled)
    (first,) = ApprovalLedger(h.store).for_turn("t")
    assert first.status == "expired", first
    assert first.events[-1].detail is not None and "cancelled" in first.events[-1].detail
    again = _Peer({"action": "accept", "content": {"approve": True}})
    ran = h.call(ARGS, maya, peer=again)
    assert ran.outcome is Outcome.SUCCEEDED, ran.content
    assert len(again.asked) == 1
    assert verify_store(h.store).clean


def test_an_approval_lives_no_longer_than_the_using_hosts_approval_ttl(tmp_path: Path) -> None:
    """``[approvals] approval_ttl_s`` bounds how long an approval can be used on the host.
    ``sharedos approvals approve --db ...`` (no host file, as docs/approvals.md shows it)
    stamps the default 15-minute life: a host set to 60 s ran the call on a yes given
    minutes before, its own setting never consulted."""
    h = Host(tmp_path, approval_ttl_s=60)
    approval_id = h.call(ARGS).structured["approvalId"]
    # the operator's yes, 15-minute life, given two minutes ago
    ApprovalLedger(h.store).answer(
        approval_id,
        approve=True,
        approver="maya",
        via="cli",
        ttl_s=900,
        when=datetime.now(UTC) - timedelta(minutes=2),
    )
    late = h.call(ARGS)
    assert late.reason is ReasonCode.APPROVAL_REQUIRED, late.content
    assert late.structured["approvalId"] != approval_id
    got = ApprovalLedger(h.store).get(approval_id)
    assert got is not None and got.status == "expired"
    assert not (h.sandbox / "shared/release/notes.txt").exists()
    # a yes within the host's bound still runs
    yes = approve(h.db, late.structured["approvalId"], "--as", "maya", "--role", "maintainer")
    assert yes.exit_code == 0, yes.output
    assert h.call(ARGS).outcome is Outcome.SUCCEEDED


def test_a_refused_calls_history_is_bounded_however_often_it_is_retried(
    tmp_path: Path,
) -> None:
    """Each retry of a call its client declines (``codex exec`` declines at once) writes a
    new request whose detail said what became of *every* earlier one: the request of the
    thousandth retry carried some 50 KB, the store grew with the square of the retries, and
    an out-of-band refusal read all of it to the model. The latest few are named, the rest
    counted."""
    h = Host(tmp_path)
    maya = AccessContext(principal="maya", tenant="acme", roles=("maintainer",), turn_id="t")
    for _ in range(9):
        res = h.call(ARGS, maya, peer=_Peer({"action": "decline"}))
        assert res.reason is ReasonCode.APPROVAL_REQUIRED
    # one more, from a client that cannot be asked: refused out of band, history said
    res = h.call(ARGS, maya)
    detail = res.structured["detail"]
    assert detail.count("was denied by maya") == 3, detail
    assert "6 earlier approvals of this exact call were used, denied or lapsed" in detail
    requests = ApprovalLedger(h.store).for_turn("t")
    assert len(requests) == 10
    assert all((a.events[0].detail or "").count("apr-") <= 3 for a in requests)
    # the latest are the ones named
    assert requests[-2].approval_id in detail and requests[0].approval_id not in detail


class _SlowConsume(SqliteEvidenceStore):
    """A real SQLite store whose ``consumed`` write waits until ``go`` (a store slow to take
    the write: a lock held by another writer), saying when it started."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.started = threading.Event()
        self.go = threading.Event()

    def append_approval(self, values: Any, check: Any = None, fence: Any = None) -> str:
        if "consumed" in values:
            self.started.set()
            self.go.wait(30)
        return super().append_approval(values, check, *([fence] if fence else []))


def _cancel_while_consuming(h: Host, store: _SlowConsume, context: AccessContext, peer: Any) -> Any:
    """Run the call, cancel it once its approval's ``consumed`` write has started, then let
    the write land; what the call returned (None: cancelled)."""
    got: list[Any] = []

    async def go() -> None:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                got.append(
                    await h.host.invoke_tool(
                        ToolCall(tool="files.write", arguments=ARGS, turn_id=context.turn_id),
                        context,
                        RUN,
                        peer=peer,
                    )
                )

            tg.start_soon(call)
            with anyio.fail_after(bound(30)):
                while not store.started.is_set():
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
            store.go.set()

    anyio.run(go)
    return got[0] if got else None


@pytest.mark.parametrize("flow", ["out_of_band", "elicitation"])
def test_an_approval_consumed_as_its_call_is_cancelled_is_spent_on_a_call_that_runs(
    tmp_path: Path, flow: str
) -> None:
    """An approval is spent exactly when its call runs. The client cancelled the call (its
    ``notifications/cancelled``, the deadline, the turn closing) while the approval's
    ``consumed`` event was being written: the write landed, the call was recorded
    ``cancelled`` and never ran, and the approval read "used by call …" — the retry had to
    be approved again. Once its approval is taken, the call runs to its recorded outcome."""
    h = Host(tmp_path)
    store = h.store = _SlowConsume(h.db)
    h.use(POLICY)
    maya = AccessContext(principal="maya", tenant="acme", roles=("maintainer",), turn_id="turn-1")
    if flow == "out_of_band":
        context, peer = BOB, None
        store.go.set()
        _approved(h)
        store.go.clear()
    else:
        context, peer = maya, _Peer({"action": "accept", "content": {"approve": True}})
    _cancel_while_consuming(h, store, context, peer)
    (approval,) = [a for a in ApprovalLedger(store).for_turn("turn-1") if a.status == "consumed"]
    records = {r.call_id: r for r in store.query("turn-1")}
    used_by = records[approval.closed_call]
    assert used_by.outcome is Outcome.SUCCEEDED, (used_by.outcome, used_by.error)
    assert (h.sandbox / "shared/release/notes.txt").read_text() == "v1\n"
    assert verify_store(store).clean


def test_an_approval_taken_after_the_evidence_timeout_runs_its_call(tmp_path: Path) -> None:
    """The store took the approval's ``consumed`` event after the evidence timeout (a lock
    held by another writer, waited out within the store's own busy timeout). The call was
    refused ``evidence_unavailable`` ("nothing ran") at the timeout while the abandoned
    write went on and landed: the approval was spent on a call that never ran, and the
    retry needed a new approval. Whether an approval was taken is the store's answer, so it
    is waited for; taken, the call runs."""
    h = Host(tmp_path)
    store = h.store = _SlowConsume(h.db)
    h.host = RuntimeHost(
        Kernel(h.policy, h.registry), store, approvals=h.settings, evidence_timeout_s=0.2
    )
    store.go.set()
    approval_id = _approved(h)
    store.go.clear()
    got: list[Any] = []

    async def go() -> None:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                got.append(
                    await h.host.invoke_tool(
                        ToolCall(tool="files.write", arguments=ARGS, turn_id="turn-1"), BOB, RUN
                    )
                )

            tg.start_soon(call)
            with anyio.fail_after(bound(30)):
                while not store.started.is_set():
                    await anyio.sleep(0.01)
            await anyio.sleep(0.5)  # past the evidence timeout: the store answers late
            store.go.set()

    anyio.run(go)
    (ran,) = got
    assert ran.outcome is Outcome.SUCCEEDED, ran.content
    approval = ApprovalLedger(store).get(approval_id)
    assert approval is not None and approval.closed_call == ran.call_id
    assert (h.sandbox / "shared/release/notes.txt").read_text() == "v1\n"
    assert verify_store(store).clean


def test_an_approval_the_store_refused_to_mark_used_is_used_by_the_retry(tmp_path: Path) -> None:
    """The other side of the timeout above: the store refused the ``consumed`` event (a lock
    held past its busy timeout). The approval was not taken, so the call fails
    ``evidence_unavailable`` ("nothing ran"), and its retry, once the store takes writes,
    runs on the same approval — once."""
    import sqlite3

    h = Host(tmp_path)
    approval_id = _approved(h)
    store = h.store = SqliteEvidenceStore(h.db, busy_timeout_s=0.1)
    h.host = RuntimeHost(
        Kernel(h.policy, h.registry), store, approvals=h.settings, evidence_timeout_s=1.0
    )
    blocker = sqlite3.connect(h.db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another writer holds the store (reads still go)
    try:
        refused = h.call(ARGS)
    finally:
        blocker.execute("COMMIT")
        blocker.close()
    assert refused.reason is ReasonCode.EVIDENCE_UNAVAILABLE, refused.structured
    assert "nothing ran" in refused.structured["detail"]
    got = ApprovalLedger(store).get(approval_id)
    assert got is not None and got.status == "approved"
    ran = h.call(ARGS)
    assert ran.outcome is Outcome.SUCCEEDED, ran.content
    replay = h.call(ARGS)
    assert replay.reason is ReasonCode.APPROVAL_REQUIRED
    got = ApprovalLedger(store).get(approval_id)
    assert got is not None and got.status == "consumed" and got.closed_call == ran.call_id


class _ConsumeHookedStore(PostgresEvidenceStore):
    """A PostgreSQL store that, once ``on_consume`` is set, calls it with the fence of the
    next ``consumed`` approval write (once) and makes the write with the fence it returns:
    a test stops the server there (``FrozenBackends``)."""

    on_consume: Callable[[Any], Any] | None = None

    def append_approval(self, values: Any, check: Any = None, fence: Any = None) -> str:
        hook = self.on_consume
        if hook is not None and "consumed" in values:
            self.on_consume = None
            fence = hook(fence)
        return super().append_approval(values, check, *([fence] if fence else []))


def _freezing(server: FrozenBackends) -> Callable[[Any], Any]:
    """An ``on_consume`` hook: the server stops answering as the approval is taken."""

    def hook(fence: Any) -> Any:
        server.freeze()
        return fence

    return hook


def test_an_approval_whose_store_stops_answering_fails_its_call_within_the_bound(
    tmp_path: Path, pg_url: str, postgres_cluster: Any
) -> None:
    """The ``consumed`` write is waited for past the evidence timeout (the store bounds it
    itself), but a store that does not answer at all — here the PostgreSQL server processes
    of the host's connections stopped (a frozen server; a hung disk does the same), which no
    statement timeout ends — held the call for as long as it hung, shielded from every
    cancellation: neither the caller's deadline nor the turn closing could end it, while a
    call needing no approval failed within the evidence timeout (docs/evidence.md: a hung
    store fails calls within the bound). It now fails ``timeout`` at
    ``ApprovalGate.consume_wait_s``, and its caller's cancellation goes on."""
    import time

    server = FrozenBackends(postgres_cluster, pg_url)
    h = Host(tmp_path)
    store = h.store = _ConsumeHookedStore(pg_url)
    h.host = RuntimeHost(
        Kernel(h.policy, h.registry), store, approvals=h.settings, evidence_timeout_s=0.15
    )
    approval_id = h.call(ARGS).structured["approvalId"]
    ApprovalLedger(store).answer(approval_id, approve=True, approver="maya", via="cli")
    # thawed well after the bound (4 evidence timeouts): the call must be answered before
    watchdog = threading.Timer(bound(10), server.thaw)
    store.on_consume = _freezing(server)  # the server stops answering as the approval is taken
    watchdog.start()
    try:
        t0 = time.monotonic()
        res = h.call(ARGS)
        took = time.monotonic() - t0
        still_frozen = bool(server.pids)
    finally:
        watchdog.cancel()
        server.thaw()
        store.close()
    assert still_frozen, f"the call was answered only once the server answered ({took:.1f} s)"
    assert (res.outcome, res.reason) == (Outcome.FAILED, ReasonCode.EVIDENCE_UNAVAILABLE)
    assert "nothing ran" in res.structured["detail"], res.structured
    assert not (h.sandbox / "shared/release/notes.txt").exists()


def test_an_approval_whose_consume_was_given_up_is_not_spent_by_the_write_landing_late(
    tmp_path: Path,
) -> None:
    """A ``consumed`` write given up at ``ApprovalGate.consume_wait_s`` (its call failed
    ``evidence_unavailable``, "nothing ran") went on in its abandoned thread and landed once
    the store answered again — here a SQLite store locked by another process's ``BEGIN
    EXCLUSIVE`` past the bound and released before the store's busy timeout: the approval
    read "used by call …" of a call that never ran (``sharedos approvals show`` lied to the
    approver, who had to approve again). A write given up no longer lands: the approval
    stays ``approved`` and unused, and the retry runs on it."""
    import sqlite3

    h = Host(tmp_path)
    store = h.store = SqliteEvidenceStore(h.db, busy_timeout_s=bound(3))
    # 4 evidence timeouts: 0.4 s, well inside the store's busy timeout
    h.host = RuntimeHost(
        Kernel(h.policy, h.registry), store, approvals=h.settings, evidence_timeout_s=0.1
    )
    approval_id = _approved(h)
    locker = sqlite3.connect(h.db, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        res = h.call(ARGS)
    finally:
        locker.execute("COMMIT")  # the store answers again: the abandoned write goes on
        locker.close()
    assert (res.outcome, res.reason) == (Outcome.FAILED, ReasonCode.EVIDENCE_UNAVAILABLE)
    assert "nothing ran" in res.structured["detail"], res.structured
    with store.appender.lock:  # the abandoned consume has finished, one way or the other
        pass
    got = ApprovalLedger(store).get(approval_id)
    assert got is not None and got.status == "approved", (got and got.status, got)
    shown = CliRunner().invoke(cli_main, ["approvals", "show", approval_id, "--db", str(h.db)])
    assert "used by call" not in shown.output, shown.output
    ran = h.call(ARGS)  # the retry runs on it
    assert ran.outcome is Outcome.SUCCEEDED, ran.structured
    got = ApprovalLedger(store).get(approval_id)
    assert got is not None and got.status == "consumed" and got.closed_call == ran.call_id
    assert (h.sandbox / "shared/release/notes.txt").read_text() == "v1\n"


def test_an_approval_whose_consume_was_given_up_on_a_frozen_postgresql_stays_unspent(
    tmp_path: Path, pg_url: str, postgres_cluster: Any
) -> None:
    """The same on PostgreSQL: the server processes of the host's connections stopped as the
    approval is taken (a frozen server), the call failed at the bound, and the server thawed
    afterwards finished the abandoned ``consumed`` statement and committed it. Refused at its
    commit now: the approval stays ``approved`` and the retry runs on it."""
    server = FrozenBackends(postgres_cluster, pg_url)
    h = Host(tmp_path)
    store = h.store = _ConsumeHookedStore(pg_url)
    try:
        h.host = RuntimeHost(
            Kernel(h.policy, h.registry), store, approvals=h.settings, evidence_timeout_s=0.15
        )
        approval_id = h.call(ARGS).structured["approvalId"]
        ApprovalLedger(store).answer(approval_id, approve=True, approver="maya", via="cli")
        store.on_consume = _freezing(server)
        try:
            res = h.call(ARGS)
        finally:
            server.thaw()
        assert (res.outcome, res.reason) == (Outcome.FAILED, ReasonCode.EVIDENCE_UNAVAILABLE)
        with store.appender.lock:  # the abandoned consume has finished
            pass
        got = ApprovalLedger(store).get(approval_id)
        assert got is not None and got.status == "approved", got and got.status
        ran = h.call(ARGS)
        assert ran.outcome is Outcome.SUCCEEDED, ran.structured
        got = ApprovalLedger(store).get(approval_id)
        assert got is not None and got.status == "consumed" and got.closed_call == ran.call_id
    finally:
        server.thaw()
        store.close()


@pytest.mark.parametrize(
    "frozen_at",
    ["before_the_commit", pytest.param("after_the_fence", marks=pytest.mark.stress)],
)
def test_an_approval_whose_server_froze_between_the_fence_and_the_commit_stays_unspent(
    tmp_path: Path, pg_url: str, postgres_cluster: Any, frozen_at: str
) -> None:
    """The fence (``Plan.fence``) refuses a ``consumed`` write given up while the store made
    it wait, but on PostgreSQL it ran in one round trip and the COMMIT in the next: a server
    frozen between the two (its process stopped once the fence had passed, before it read
    the COMMIT) and thawed after the call gave the write up committed it, and the approval
    read "used by call …" of a call refused "nothing ran". Now the session is told to end
    should it idle in the transaction past the give-up (``idle_in_transaction_session_
    timeout``), and the fence asked again once the server answered that: either way the
    thawed server does not commit, the approval stays ``approved`` and the retry runs."""
    import time

    server = FrozenBackends(postgres_cluster, pg_url)
    told = False

    def frozen_after(fence: Any) -> Any:
        def fenced(*_: Any) -> Any:
            nonlocal told
            left = fence()  # the fence passes: the server stops before the commit
            told = left is not None  # (it is then told how long the write may idle)
            if not server.pids:  # the backend of the open transaction (the consumed write's)
                server.freeze(
                    idle_in_transaction=True,
                    # the server is told the bound next: stop it after that
                    keep=lambda query: (
                        not (
                            frozen_at == "before_the_commit" and "set_config" not in query and told
                        )
                    ),
                )
            return left

        return fenced

    h = Host(tmp_path)
    store = h.store = _ConsumeHookedStore(pg_url)
    try:
        h.host = RuntimeHost(
            Kernel(h.policy, h.registry), store, approvals=h.settings, evidence_timeout_s=0.15
        )
        approval_id = h.call(ARGS).structured["approvalId"]
        ApprovalLedger(store).answer(approval_id, approve=True, approver="maya", via="cli")
        store.on_consume = frozen_after
        try:
            res = h.call(ARGS)
            assert server.pids, "the server was not frozen"
            time.sleep(bound(0.3))  # thawed well after the write was given up
        finally:
            server.thaw()
        assert (res.outcome, res.reason) == (Outcome.FAILED, ReasonCode.EVIDENCE_UNAVAILABLE)
        assert "nothing ran" in res.structured["detail"], res.structured
        with store.appender.lock:  # the abandoned consume has finished
            pass
        got = ApprovalLedger(store).get(approval_id)
        assert got is not None and got.status == "approved", (got and got.status, got)
        ran = h.call(ARGS)  # the retry runs on it
        assert ran.outcome is Outcome.SUCCEEDED, ran.structured
        got = ApprovalLedger(store).get(approval_id)
        assert got is not None and got.status == "consumed" and got.closed_call == ran.call_id
        assert verify_store(store).clean
    finally:
        server.thaw()
        store.close()


def test_an_approval_that_lapses_while_its_server_is_frozen_before_the_commit_is_not_used(
    tmp_path: Path, pg_url: str, postgres_cluster: Any
) -> None:
    """The ``consumed`` write's fence judges the approval's life at the commit, but on
    PostgreSQL the COMMIT follows it in another round trip: a server frozen in between (the
    fence passed, the COMMIT not read yet) and thawed once the approval had lapsed, still
    well within the wait for the write, committed it, and the call ran on a lapsed approval.
    The session is now told to end should it idle past the lapse too: the thawed server
    rolls the write back, the call runs nothing and its retry asks anew."""
    import threading
    import time

    server = FrozenBackends(postgres_cluster, pg_url)
    froze: list[float] = []  # when the server was stopped
    ttl = 1.0

    def frozen_after(fence: Any) -> Any:
        calls = 0

        def fenced() -> Any:
            nonlocal calls
            calls += 1
            left = fence()
            # the last time the fence is asked before the COMMIT: once on a host that does
            # not tell the server how long it may idle, twice on one that does
            if not froze and (left is None or calls == 2):
                froze.append(time.monotonic())
                server.freeze(idle_in_transaction=True)
                # thawed once the approval has lapsed, long before the write is given up
                wait = max(0.0, lapses - time.monotonic()) + bound(0.3)
                threading.Timer(wait, server.thaw).start()
            return left

        return fenced

    h = Host(tmp_path, approval_ttl_s=ttl)
    store = h.store = _ConsumeHookedStore(pg_url)
    try:
        # the write is waited for 4 evidence timeouts: well past the approval's life
        h.host = RuntimeHost(
            Kernel(h.policy, h.registry), store, approvals=h.settings, evidence_timeout_s=1.0
        )
        approval_id = h.call(ARGS).structured["approvalId"]
        lapses = time.monotonic() + ttl
        ApprovalLedger(store).answer(
            approval_id, approve=True, approver="maya", via="cli", ttl_s=ttl
        )
        store.on_consume = frozen_after
        res = h.call(ARGS)
        if not froze or froze[0] > lapses:  # pragma: no cover - a slow machine
            pytest.skip("the call reached its approval only after it had lapsed")
        assert res.outcome is not Outcome.SUCCEEDED, res.structured
        assert not (h.sandbox / "shared/release/notes.txt").exists()
        with store.appender.lock:  # the write has been resolved, one way or the other
            pass
        got = ApprovalLedger(store).get(approval_id)
        assert got is not None and got.status != "consumed", (got and got.status, got)
        again = h.call(ARGS)  # the lapsed approval is not used: a new request
        assert again.reason is ReasonCode.APPROVAL_REQUIRED, again.structured
        assert again.structured["approvalId"] != approval_id
        assert not (h.sandbox / "shared/release/notes.txt").exists()
        got = ApprovalLedger(store).get(approval_id)
        assert got is not None and got.status == "expired", (got and got.status, got)
        assert verify_store(store).clean
    finally:
        server.thaw()
        store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_approval_that_lapses_while_its_consumed_write_waits_is_not_used(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """An approval's life is judged when it is used. The ``consumed`` write judged it when it
    started and then waited for the store (a lock held by another writer) past the
    approval's expiry: it landed, and the call ran on an approval that had lapsed (its
    ``consumed`` event stamped with the time it started, before the expiry). It is judged
    again at the commit: lapsed, the call runs nothing, the approval is recorded ``expired``
    and a new request is made."""
    import time

    ttl = 1.0  # the call takes it within this (it starts at once)

    from sharedos.evidence.postgres import PostgresEvidenceStore

    base: Any = SqliteEvidenceStore if backend == "sqlite" else PostgresEvidenceStore

    class LateStore(base):  # type: ignore[misc,valid-type]
        """A real store whose ``consumed`` write is let in only once the approval lapsed."""

        def append_approval(self, values: Any, check: Any = None, fence: Any = None) -> str:
            if "consumed" in values:
                time.sleep(max(0.0, lapses - time.monotonic()) + 0.1)
            more = [fence] if fence else []
            return str(super().append_approval(values, check, *more))

    h = Host(tmp_path, approval_ttl_s=ttl)
    where = h.db if backend == "sqlite" else request.getfixturevalue("pg_url")
    store = h.store = LateStore(where)
    request.addfinalizer(store.close)
    h.host = RuntimeHost(Kernel(h.policy, h.registry), store, approvals=h.settings)
    approval_id = h.call(ARGS).structured["approvalId"]
    lapses = time.monotonic() + ttl
    ApprovalLedger(store).answer(approval_id, approve=True, approver="maya", via="cli", ttl_s=ttl)
    res = h.call(ARGS)
    if time.monotonic() - lapses > 1.0:  # pragma: no cover - a machine this slow took it late
        pytest.skip("the call reached its approval only after it had lapsed")
    assert res.outcome is not Outcome.SUCCEEDED, res.structured
    assert not (h.sandbox / "shared/release/notes.txt").exists()
    got = ApprovalLedger(store).get(approval_id)
    assert got is not None and got.status == "expired", got and got.status
    assert res.reason is ReasonCode.APPROVAL_REQUIRED, res.structured
    assert res.structured["approvalId"] != approval_id
    assert f"approval {approval_id} lapsed" in res.structured["detail"], res.structured
    assert verify_store(store).clean
