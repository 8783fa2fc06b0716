"""A host secret in the resource of a call that needs an approval.

docs/kernel.md, "Secrets": host secrets are scrubbed from every record field;
docs/approvals.md: ``show`` adds the arguments "(as recorded, redacted as every
record is)". The attempt row has the resource scrubbed, but the approval
request written beside it (the ``approval`` row of the chain) keeps the raw
canonical resource, and ``sharedos approvals list`` prints it.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.evidence.record import arguments_digest
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.kernel.approvals import ApprovalSettings
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.policy import compile_paths, compile_source
from sharedos.resources import shipped_dir
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools
from tests.adversarial.planted import SecretScan, plant, sharedos_cli

pytestmark = pytest.mark.anyio
RUN = ToolPolicy(name="files", mode=RunMode.OPEN, managed=("files.*",))
ALICE = AccessContext(principal="alice", turn_id="alice-turn")


def every_text_column(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        out = []
        for (table,) in con.execute("select name from sqlite_master where type='table'"):
            for row in con.execute(f"select * from {table}"):
                out += [f"{table}: {v}" for v in row if isinstance(v, str)]
        return "\n".join(out)
    finally:
        con.close()


async def test_an_approval_request_does_not_keep_a_host_secret(tmp_path: Path) -> None:
    secret = plant("host")
    root = tmp_path / "root"
    (root / "home" / "alice" / "release").mkdir(parents=True)
    registry = ToolRegistry()
    register_files_tools(registry, root)
    kernel = Kernel(compile_paths([shipped_dir("rules") / "files.sos"]), registry)
    db = tmp_path / "evidence.db"
    store = SqliteEvidenceStore(db)
    host = RuntimeHost(kernel, store, host_secrets=[secret])
    result = await host.invoke_tool(
        ToolCall(
            tool="files.write",
            arguments={"path": f"/home/alice/release/{secret}.txt", "content": "v1"},
        ),
        ALICE,
        RUN,
    )
    assert result.reason is ReasonCode.APPROVAL_REQUIRED
    store.close()
    scan = SecretScan(secret)
    scan.json_value("the answer", result.to_mcp())
    scan.text("the store's rows", every_text_column(db))
    listed = subprocess.run(
        [*sharedos_cli(), "approvals", "list", "--db", str(db), "--format", "json"],
        capture_output=True,
        check=True,
        timeout=120,
    )
    scan.text("sharedos approvals list", listed.stdout)
    scan.assert_clean()
    assert "[redacted]" in listed.stdout.decode()  # the approval is listed, scrubbed


async def test_an_approved_call_with_a_host_secret_in_its_path_still_runs_once(
    tmp_path: Path,
) -> None:
    secret = plant("host")
    root = tmp_path / "root"
    (root / "home" / "alice" / "release").mkdir(parents=True)
    registry = ToolRegistry()
    register_files_tools(registry, root)
    kernel = Kernel(compile_paths([shipped_dir("rules") / "files.sos"]), registry)
    db = tmp_path / "evidence.db"
    store = SqliteEvidenceStore(db)
    host = RuntimeHost(kernel, store, host_secrets=[secret])
    call = ToolCall(
        tool="files.write", arguments={"path": f"/home/alice/release/{secret}.txt", "content": "v1"}
    )
    first = await host.invoke_tool(call, ALICE, RUN)
    assert first.reason is ReasonCode.APPROVAL_REQUIRED
    approval_id = first.structured["approvalId"]
    subprocess.run(
        [
            *sharedos_cli(),
            "approvals",
            "approve",
            approval_id,
            "--db",
            str(db),
            "--as",
            "maya",
            "--role",
            "maintainer",
        ],
        capture_output=True,
        check=True,
        timeout=120,
    )
    ran = await host.invoke_tool(call, ALICE, RUN)
    assert ran.reason is None or ran.reason is ReasonCode.ALLOWED, ran.content
    assert (root / "home" / "alice" / "release" / f"{secret}.txt").read_text() == "v1"
    again = await host.invoke_tool(call, ALICE, RUN)
    assert again.reason is ReasonCode.APPROVAL_REQUIRED  # used once
    store.close()


MAINTAINER = ("--as", "maya", "--role", "maintainer")
PIN_POLICY = """
namespace bank
requirement bank.transfer { action write; resource path(args.account) }
permit write on "/accounts/**"
require approval by role "maintainer" for write on "/accounts/**"
"""


def _pin_tool(ran: list[str]) -> ToolDefinition:
    async def transfer(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        ran.append(str(args["pin"]))
        return HandlerResult(content=[{"type": "text", "text": "transferred"}])

    return ToolDefinition(
        name="bank.transfer",
        description="Transfer from an account (test tool; the PIN is a secret argument).",
        input_schema={
            "type": "object",
            "properties": {"account": {"type": "string"}, "pin": {"type": "string"}},
            "required": ["account", "pin"],
        },
        handler=transfer,
        secret_arguments=frozenset({"pin"}),
    )


async def test_an_approval_digest_does_not_give_back_a_short_secret_argument(
    tmp_path: Path,
) -> None:
    """A field a tool declares secret is recorded ``[redacted]`` whatever its length; but
    the approval's arguments digest (its row, ``approvals show``, the client's question)
    was a plain SHA-256 over the arguments, so the other, recorded, fields and the 10,000
    candidates of a 4-digit PIN gave the PIN back. The PIN enters the digest keyed now,
    and the approval still binds the exact call: the same PIN runs once, another asks
    again."""
    ran: list[str] = []
    db = tmp_path / "evidence.db"
    store = SqliteEvidenceStore(db)
    kernel = Kernel(compile_source(PIN_POLICY, "bank.sos"), ToolRegistry([_pin_tool(ran)]))
    host = RuntimeHost(kernel, store, approvals=ApprovalSettings())
    run = ToolPolicy(name="bank", mode=RunMode.OPEN, managed=("bank.*",))
    args = {"account": "/accounts/7", "pin": "4821"}
    first = await host.invoke_tool(ToolCall(tool="bank.transfer", arguments=args), ALICE, run)
    assert first.reason is ReasonCode.APPROVAL_REQUIRED
    approval_id = first.structured["approvalId"]
    shown = subprocess.run(
        [*sharedos_cli(), "approvals", "show", approval_id, "--db", str(db), "--format", "json"],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout.decode()
    assert json.loads(shown)["arguments"] == {"account": "/accounts/7", "pin": "[redacted]"}
    everything = every_text_column(db) + shown + json.dumps(first.to_mcp())
    guessed = [
        pin
        for pin in (f"{n:04d}" for n in range(10_000))
        if arguments_digest({**args, "pin": pin}).removeprefix("sha256:") in everything
    ]
    assert guessed == [], f"the PIN was recovered from the approval's digest: {guessed}"
    # still one exact call: approved, the same PIN runs once; another PIN is asked again
    subprocess.run(
        [*sharedos_cli(), "approvals", "approve", approval_id, "--db", str(db), *MAINTAINER],
        capture_output=True,
        check=True,
        timeout=120,
    )
    other = await host.invoke_tool(
        ToolCall(tool="bank.transfer", arguments={**args, "pin": "1111"}), ALICE, run
    )
    assert other.reason is ReasonCode.APPROVAL_REQUIRED and ran == []
    same = await host.invoke_tool(ToolCall(tool="bank.transfer", arguments=args), ALICE, run)
    assert same.outcome is Outcome.SUCCEEDED and ran == ["4821"]
    store.close()


async def test_one_principals_calls_are_no_oracle_for_anothers_secret_argument(
    tmp_path: Path,
) -> None:
    """The key a secret field enters an approval's digest under was one per host process:
    in a host serving several people, mallory's own calls (in her own turn) got the same
    digest for the same PIN as bob's approval, which she can read (``approvals show``, an
    approver's view), so trying the 10,000 PINs in her turn gave bob's back. The key is
    the turn's now (and its principal's): another turn, or another person, never gets
    the digest of one's own call; the same call in its own turn still binds."""
    from sharedos.evidence.approvals import ApprovalLedger

    ran: list[str] = []
    store = SqliteEvidenceStore(tmp_path / "evidence.db")
    kernel = Kernel(compile_source(PIN_POLICY, "bank.sos"), ToolRegistry([_pin_tool(ran)]))
    host = RuntimeHost(kernel, store, approvals=ApprovalSettings())
    run = ToolPolicy(name="bank", mode=RunMode.OPEN, managed=("bank.*",))
    args = {"account": "/accounts/7", "pin": "4821"}
    ledger = ApprovalLedger(store)

    async def digest(context: AccessContext) -> str:
        asked = await host.invoke_tool(ToolCall(tool="bank.transfer", arguments=args), context, run)
        assert asked.reason is ReasonCode.APPROVAL_REQUIRED
        approval = ledger.get(asked.structured["approvalId"])
        assert approval is not None
        return approval.binding.arguments_digest

    bob = await digest(AccessContext(principal="bob", turn_id="bob-turn"))
    mallory = await digest(AccessContext(principal="mallory", turn_id="mallory-turn"))
    bob_again = await digest(AccessContext(principal="bob", turn_id="bob-next-turn"))
    assert bob != mallory, "another principal's call gave the same digest for the same PIN"
    assert bob != bob_again, "another turn's call gave the same digest for the same PIN"
    # within its own turn the digest is stable: the retry is the same call
    assert await digest(AccessContext(principal="bob", turn_id="bob-turn")) == bob
    assert ran == []
    store.close()
