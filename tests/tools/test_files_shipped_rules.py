"""The files tools under the shipped rules (rules/files.sos), through the real RuntimeHost."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.policy import compile_paths
from sharedos.resources import shipped_dir
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools

pytestmark = pytest.mark.anyio
RUN = ToolPolicy(name="files", mode=RunMode.OPEN, managed=("files.*",))


@pytest.fixture
def host(tmp_path: Path) -> RuntimeHost:
    root = tmp_path / "root"
    for d in ("public/docs", "private", "home/bob", "shared"):
        (root / d).mkdir(parents=True)
    (root / "public" / "docs" / "readme.txt").write_text("hello")
    (root / "private" / "keys.txt").write_text("SECRET KEYS")
    (root / "public" / "docs" / "keys.txt").symlink_to(root / "private" / "keys.txt")
    registry = ToolRegistry()
    register_files_tools(registry, root)
    kernel = Kernel(compile_paths([shipped_dir("rules") / "files.sos"]), registry)
    return RuntimeHost(kernel, SqliteEvidenceStore(tmp_path / "e.db"))


async def test_shipped_rules_and_files_tools_agree(host: RuntimeHost) -> None:
    bob = AccessContext(principal="bob")
    catalog = host.kernel.list_tools(bob, RUN)
    assert {"files.read", "files.write", "files.search"} <= catalog.names

    async def go(tool: str, **args: str) -> tuple[Outcome, ReasonCode | None, str]:
        r = await host.invoke_tool(ToolCall(tool=tool, arguments=args), bob, RUN, catalog=catalog)
        return r.outcome, r.reason, r.content[0]["text"]

    assert (await go("files.read", path="/public/docs/readme.txt"))[:2] == (Outcome.SUCCEEDED, None)
    assert (await go("files.read", path="/private/keys.txt"))[1] is ReasonCode.FORBIDDEN
    assert (await go("files.write", path="/public/docs/x.txt", content="x"))[
        1
    ] is ReasonCode.NO_MATCHING_PERMIT
    wrote = await go("files.write", path="/home/bob/notes/n.txt", content="mine")
    assert wrote[0] is Outcome.SUCCEEDED
    linked = await go("files.read", path="/public/docs/keys.txt")
    assert linked[:2] == (Outcome.FAILED, ReasonCode.HANDLER_ERROR) and "SECRET" not in linked[2]
    found = await host.invoke_tool(
        ToolCall(tool="files.search", arguments={"root": "/public", "pattern": "*.txt"}), bob, RUN
    )
    assert found.structured == {
        "root": "/public",
        "pattern": "*.txt",
        "matches": ["/public/docs/readme.txt"],
        "truncated": False,
    }


async def test_a_hard_link_refusal_is_recorded_with_its_code(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for d in ("public", "private"):
        (root / d).mkdir(parents=True)
    (root / "private" / "keys.txt").write_text("SECRET KEYS")
    (root / "public" / "keys.txt").hardlink_to(root / "private" / "keys.txt")
    registry = ToolRegistry()
    register_files_tools(registry, root)
    kernel = Kernel(compile_paths([shipped_dir("rules") / "files.sos"]), registry)
    store = SqliteEvidenceStore(tmp_path / "e.db")
    host = RuntimeHost(kernel, store)
    bob = AccessContext(principal="bob")
    r = await host.invoke_tool(
        ToolCall(tool="files.read", arguments={"path": "/public/keys.txt"}), bob, RUN
    )
    assert (r.outcome, r.reason) == (Outcome.FAILED, ReasonCode.HANDLER_ERROR)
    assert "(hard_link)" in r.content[0]["text"] and "SECRET" not in r.content[0]["text"]
    (record,) = store.query(call_id=r.call_id)
    assert record.reason is ReasonCode.HANDLER_ERROR
    assert record.error is not None and record.error.endswith("(hard_link)")
    assert str(tmp_path) not in record.error
