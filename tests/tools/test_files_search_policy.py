"""``files.search`` reaches nothing a rule keeps from its caller, below an allowed root.

A search is authorized on its root; a policy that permits searching ``/data`` but
forbids ``/data/secret`` must not have its forbidden files named, or their
content confirmed, by a search of ``/data`` (each directory entered and each file
matched is decided as a search rooted there, through the real kernel).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.evidence.approvals import ApprovalLedger
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.kernel.approvals import ApprovalSettings
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools

POLICY = """
namespace files
requirement files.search { action search; resource path(args.root) }
requirement files.read   { action read;   resource path(args.path) }

permit read, search on "/data/**"
forbid * on "/data/secret/**" unless "admin" in context.roles
forbid search on "/data/team/{context.principal}-private.txt"
"""
RUN = ToolPolicy(name="t", mode=RunMode.OPEN, managed=("files.*",))
SECRET = "TOP-SECRET-salaries"


@pytest.fixture
def host(tmp_path: Path) -> RuntimeHost:
    root = tmp_path / "root"
    for d in ("data/secret/deeper", "data/team"):
        (root / d).mkdir(parents=True)
    (root / "data" / "notes.txt").write_text(f"public notes, not {SECRET[:3]}")
    (root / "data" / "secret" / "salaries.txt").write_text(SECRET)
    (root / "data" / "secret" / "deeper" / "more.txt").write_text(SECRET)
    (root / "data" / "team" / "bob-private.txt").write_text(SECRET)
    (root / "data" / "team" / "plan.txt").write_text(SECRET)
    registry = ToolRegistry()
    register_files_tools(registry, root)
    store = SqliteEvidenceStore(tmp_path / "e.db")
    return RuntimeHost(Kernel(compile_source(POLICY, "f.sos"), registry), store)


def search(host: RuntimeHost, who: AccessContext, **args: Any) -> list[str]:
    async def go() -> Any:
        return await host.invoke_tool(ToolCall(tool="files.search", arguments=args), who, RUN)

    result = anyio.run(go)
    assert result.outcome is Outcome.SUCCEEDED, result
    matches: list[str] = result.structured["matches"]
    return matches


def test_a_forbidden_subtree_is_neither_named_nor_searched(host: RuntimeHost) -> None:
    bob = AccessContext(principal="bob")
    assert search(host, bob, root="/data", pattern="*.txt") == [
        "/data/notes.txt",
        "/data/team/plan.txt",
    ]
    assert search(host, bob, root="/data", pattern="*", text=SECRET) == ["/data/team/plan.txt"]


def test_what_the_caller_may_search_is_found(host: RuntimeHost) -> None:
    admin = AccessContext(principal="root", roles=("admin",))
    found = search(host, admin, root="/data", pattern="*", text=SECRET)
    assert found == [
        "/data/secret/deeper/more.txt",
        "/data/secret/salaries.txt",
        "/data/team/bob-private.txt",
        "/data/team/plan.txt",
    ]


APPROVAL_POLICY = """
namespace files
requirement files.search { action search; resource path(args.root) }
permit search on "/data/**"
require approval by role "maintainer" for search on "/data/archive/**"
require approval by role "security" for search on "/data/archive/keys/**"
"""


def test_an_approved_search_finds_what_its_approval_covers(tmp_path: Path) -> None:
    # each file below an approved search's root needed an approval of its own, so the
    # approved search answered "no match" for a tree full of matches
    root = tmp_path / "root"
    for d in ("data/archive/2024", "data/archive/keys"):
        (root / d).mkdir(parents=True)
    for f in ("data/archive/a.txt", "data/archive/2024/b.txt", "data/archive/keys/k.txt"):
        (root / f).write_text("x")
    registry = ToolRegistry()
    register_files_tools(registry, root)
    store = SqliteEvidenceStore(tmp_path / "e.db")
    host = RuntimeHost(
        Kernel(compile_source(APPROVAL_POLICY, "f.sos"), registry),
        store,
        approvals=ApprovalSettings(),
    )
    bob = AccessContext(principal="bob", turn_id="turn-1")
    call = ToolCall(
        tool="files.search",
        arguments={"root": "/data/archive", "pattern": "*.txt"},
        turn_id="turn-1",
    )

    async def go() -> Any:
        return await host.invoke_tool(call, bob, RUN)

    asked = anyio.run(go)
    assert asked.reason is ReasonCode.APPROVAL_REQUIRED, asked
    ApprovalLedger(store).answer(
        asked.structured["approvalId"], approve=True, approver="maya", via="cli"
    )
    ran = anyio.run(go)
    assert ran.outcome is Outcome.SUCCEEDED, ran
    # what the maintainer's approval covers, not the subtree that asks a security officer
    assert ran.structured["matches"] == ["/data/archive/2024/b.txt", "/data/archive/a.txt"]
    # and nothing without an approval: the same search again asks anew
    assert anyio.run(go).reason is ReasonCode.APPROVAL_REQUIRED


READ_FORBIDDEN_POLICY = """
namespace files
requirement files.search { action search; resource path(args.root) }
requirement files.read   { action read;   resource path(args.path) }
permit read, search on "/data/**"
permit search on "/logs/**"
forbid read on "/data/pay/**"
"""


def test_a_text_search_does_not_read_what_the_caller_may_not_read(tmp_path: Path) -> None:
    # a search permit let a caller refused files.read confirm a file's content, guess
    # by guess: the forbid on reading it was overridden by the search's 'text'
    root = tmp_path / "root"
    for d in ("data/pay", "logs"):
        (root / d).mkdir(parents=True)
    (root / "data" / "pay" / "bob.txt").write_text("salary=123456")
    (root / "data" / "notes.txt").write_text("salary=unknown")
    (root / "logs" / "app.log").write_text("salary=123456")
    registry = ToolRegistry()
    register_files_tools(registry, root)
    store = SqliteEvidenceStore(tmp_path / "e.db")
    host = RuntimeHost(Kernel(compile_source(READ_FORBIDDEN_POLICY, "f.sos"), registry), store)
    bob = AccessContext(principal="bob")
    # the names are the search's to show; the content is not
    assert search(host, bob, root="/data", pattern="*.txt") == [
        "/data/notes.txt",
        "/data/pay/bob.txt",
    ]
    assert search(host, bob, root="/data", pattern="*", text="salary=1") == []
    assert search(host, bob, root="/data", pattern="*", text="salary=") == ["/data/notes.txt"]
    # nor where no rule permits reading at all (default deny)
    assert search(host, bob, root="/logs", pattern="*.log") == ["/logs/app.log"]
    assert search(host, bob, root="/logs", pattern="*", text="salary") == []
