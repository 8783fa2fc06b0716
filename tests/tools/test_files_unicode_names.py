"""Names in another Unicode normalization form (a file made on macOS is named in NFD).

A canonical path is NFC (the policy refuses any other spelling), so the files
tools find a missing NFC name's NFD entry, as the brokered path check does.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

import anyio
import pytest

from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.kernel.result import ToolResult
from sharedos.outcomes import Outcome
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools
from tests.tools import calls

POLICY = """
namespace files
requirement files.read   { action read;   resource path(args.path) }
requirement files.write  { action write;  resource path(args.path) }
requirement files.list   { action list;   resource path(args.path) }
requirement files.delete { action delete; resource path(args.path) }

permit * on "/data/**"
"""
RUN = ToolPolicy(name="t", mode=RunMode.OPEN, managed=("files.*",))
NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "data" / f"{NFD}-dir").mkdir(parents=True)
    (r / "data" / f"{NFD}.txt").write_text("made on a mac")
    (r / "data" / f"{NFD}-dir" / "inner.txt").write_text("inner")
    return r


def invoke(root: Path, tool: str, **args: Any) -> ToolResult:
    registry = ToolRegistry()
    register_files_tools(registry, root)
    store = SqliteEvidenceStore(root.parent / "e.db")
    host = RuntimeHost(Kernel(compile_source(POLICY, "f.sos"), registry), store)

    async def go() -> ToolResult:
        return await host.invoke_tool(
            ToolCall(tool=tool, arguments=args), AccessContext(principal="alice"), RUN
        )

    return anyio.run(go)


def test_a_file_named_in_nfd_is_read_written_and_deleted_by_its_nfc_path(root: Path) -> None:
    read = invoke(root, "files.read", path=f"/data/{NFC}.txt")
    assert read.outcome is Outcome.SUCCEEDED, read
    assert read.structured is not None and read.structured["content"] == "made on a mac"
    inner = invoke(root, "files.read", path=f"/data/{NFC}-dir/inner.txt")
    assert inner.outcome is Outcome.SUCCEEDED, inner
    listed = invoke(root, "files.list", path=f"/data/{NFC}-dir")
    assert listed.outcome is Outcome.SUCCEEDED, listed
    # a write replaces the file that is there, instead of making a look-alike twin
    wrote = invoke(root, "files.write", path=f"/data/{NFC}.txt", content="edited")
    assert wrote.outcome is Outcome.SUCCEEDED, wrote
    assert sorted(p.name for p in (root / "data").iterdir()) == [f"{NFD}-dir", f"{NFD}.txt"]
    assert (root / "data" / f"{NFD}.txt").read_text() == "edited"
    deleted = invoke(root, "files.delete", path=f"/data/{NFC}.txt")
    assert deleted.outcome is Outcome.SUCCEEDED, deleted
    assert sorted(p.name for p in (root / "data").iterdir()) == [f"{NFD}-dir"]


def test_a_name_spelled_twice_in_other_forms_is_refused_not_guessed(root: Path) -> None:
    # "A" + COMBINING RING and ANGSTROM SIGN are both spellings of the NFC "\u00c5"
    (root / "data" / "A\u030a.txt").write_text("one")
    (root / "data" / "\u212b.txt").write_text("two")
    for tool, args in (("files.read", {}), ("files.write", {"content": "x"})):
        result = invoke(root, tool, path="/data/\u00c5.txt", **args)
        assert result.outcome is Outcome.FAILED, result
        assert "(equivalent_names)" in result.content[0]["text"]
    names = {p.name for p in (root / "data").iterdir()}
    assert {"A\u030a.txt", "\u212b.txt"} <= names and "\u00c5.txt" not in names
    assert (root / "data" / "A\u030a.txt").read_text() == "one"


def test_an_nfc_name_that_exists_is_used_as_it_is(root: Path) -> None:
    (root / "data" / f"{NFC}.txt").write_text("nfc twin")
    read = invoke(root, "files.read", path=f"/data/{NFC}.txt")
    assert read.structured is not None and read.structured["content"] == "nfc twin"


def test_search_finds_an_nfd_name_and_shows_the_path_a_call_can_use(root: Path) -> None:
    registry = ToolRegistry()
    register_files_tools(registry, root)
    source = POLICY.replace(
        "namespace files\n",
        "namespace files\nrequirement files.search { action search; resource path(args.root) }\n",
    )
    store = SqliteEvidenceStore(root.parent / "s.db")
    host = RuntimeHost(Kernel(compile_source(source, "f.sos"), registry), store)

    async def go() -> ToolResult:
        call = ToolCall(
            tool="files.search", arguments={"root": "/data", "pattern": "*.txt", "text": "in"}
        )
        return await host.invoke_tool(call, AccessContext(principal="alice"), RUN)

    (root / "data" / f"{NFD}.txt").write_text("made in a mac")
    found = anyio.run(go)
    assert found.outcome is Outcome.SUCCEEDED, found
    assert found.structured is not None
    assert found.structured["matches"] == [f"/data/{NFC}-dir/inner.txt", f"/data/{NFC}.txt"]
    # each path it shows is one a call can read
    for path in found.structured["matches"]:
        assert invoke(root, "files.read", path=path).outcome is Outcome.SUCCEEDED


@pytest.mark.parametrize("pattern", [f"{NFC}.txt", f"{NFD}.txt", "caf*.txt", f"*/{NFC}.txt"])
def test_a_search_by_name_matches_the_name_it_shows(root: Path, pattern: str) -> None:
    # the NFC name a call can use (and the search shows) found nothing on disk in NFD,
    # while the same name behind a "*/" did
    search = calls.tools(root)["files.search"]
    found = calls.call(search, "/data", root="/data", pattern=pattern)
    assert found.structured is not None
    assert found.structured["matches"] == [f"/data/{NFC}.txt"]
