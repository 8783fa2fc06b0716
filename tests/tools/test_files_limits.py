"""Limits of the files tools: what a huge directory, a long file or a cut character costs
and what the result says about it."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.kernel.result import ToolResult
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.policy import compile_source
from sharedos.policy.paths import MAX_PATH_CHARS
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import files as files_module
from tests.timing import cpu_bound
from tests.tools.calls import call, text, tools

SEARCH_RULES = """
namespace files
requirement files.search { action search; resource path(args.root) }
permit search on "/data/**"
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "public").mkdir(parents=True)
    return r


def _touch_many(directory: Path, n: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        os.close(os.open(directory / f"f{i:06d}.txt", os.O_CREAT | os.O_WRONLY, 0o644))


def test_list_of_a_huge_directory_is_bounded_and_says_it_was_cut(root: Path) -> None:
    limit = files_module.MAX_LIST_ENTRIES
    _touch_many(root / "public" / "big", limit + 5)
    result = call(tools(root)["files.list"], "/public/big", path="/public/big", within_s=60)
    assert not result.is_error
    assert result.structured is not None
    entries = result.structured["entries"]
    assert len(entries) == limit
    # the first entries by name, as an uncut listing would start
    assert entries[0]["name"] == "f000000.txt"
    assert entries[-1]["name"] == f"f{limit - 1:06d}.txt"
    assert result.structured["truncated"] is True
    assert f"the first {limit} of {limit + 5} entries" in text(result)


def test_list_of_an_ordinary_directory_is_whole_and_says_so(root: Path) -> None:
    _touch_many(root / "public" / "small", 3)
    result = call(tools(root)["files.list"], "/public/small", path="/public/small")
    assert result.structured is not None
    assert [e["name"] for e in result.structured["entries"]] == [
        "f000000.txt",
        "f000001.txt",
        "f000002.txt",
    ]
    assert result.structured["truncated"] is False
    assert "truncated" not in text(result)


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_a_read_cut_inside_a_character_ends_before_it(root: Path, cut: int) -> None:
    # "€" is 3 bytes and "😀" 4: a limit inside either must not show a U+FFFD the file lacks
    (root / "public" / "u.txt").write_text("ab€😀z", encoding="utf-8")
    limit = 2 + 3 + cut  # inside the 4-byte character
    result = call(tools(root)["files.read"], "/public/u.txt", path="/public/u.txt", max_bytes=limit)
    assert not result.is_error
    assert result.content[0]["text"] == "ab€"
    assert result.structured == {
        "path": "/public/u.txt",
        "bytes": 5,
        "truncated": True,
        "utf8": True,
        "content": "ab€",
    }


def test_a_read_cut_between_characters_and_invalid_bytes_are_kept_as_they_are(
    root: Path,
) -> None:
    (root / "public" / "u.txt").write_bytes("ab€".encode() + b"\xff" + "😀".encode())
    read = tools(root)["files.read"]
    whole = call(read, "/public/u.txt", path="/public/u.txt", max_bytes=5)
    assert whole.content[0]["text"] == "ab€" and whole.structured["bytes"] == 5  # type: ignore[index]
    bad = call(read, "/public/u.txt", path="/public/u.txt", max_bytes=6)
    assert bad.content[0]["text"] == "ab€\ufffd" and bad.structured["bytes"] == 6  # type: ignore[index]


def test_search_says_when_text_was_not_looked_for_in_all_of_a_file(root: Path) -> None:
    limit = files_module.MAX_READ_BYTES
    (root / "public" / "big.log").write_bytes(b"." * limit + b"zq-needle")
    (root / "public" / "small.log").write_bytes(b"zq-needle")
    search = tools(root)["files.search"]
    found = call(search, "/public", root="/public", pattern="*.log", text="zq-needle")
    assert found.structured is not None
    assert found.structured["matches"] == ["/public/small.log"]
    assert found.structured["truncated"] is True
    # a file found in its first MiB, and a small one without the text, cut nothing
    (root / "public" / "big.log").write_bytes(b"zq-needle" + b"." * limit)
    (root / "public" / "small.log").write_bytes(b"nothing")
    again = call(search, "/public", root="/public", pattern="*.log", text="zq-needle")
    assert again.structured is not None
    assert again.structured["matches"] == ["/public/big.log"]
    assert again.structured["truncated"] is False


def test_search_of_a_tree_larger_than_its_budget_stops_and_says_so(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a small budget stands for MAX_SEARCH_ENTRIES (100,000): the walk is the same
    monkeypatch.setattr(files_module, "MAX_SEARCH_ENTRIES", 50, raising=False)
    for d in range(4):
        _touch_many(root / "public" / f"d{d}", 20)  # 84 entries in all
    search = tools(root)["files.search"]
    found = call(search, "/public", root="/public", pattern="nomatch")
    assert found.structured is not None
    assert found.structured["matches"] == []
    assert found.structured["truncated"] is True  # "no match" would be a claim it cannot make
    some = call(search, "/public", root="/public", pattern="*.txt")
    assert some.structured is not None
    assert 0 < len(some.structured["matches"]) < 80
    assert some.structured["truncated"] is True
    # within the budget, nothing is cut
    monkeypatch.setattr(files_module, "MAX_SEARCH_ENTRIES", 84, raising=False)
    whole = call(search, "/public", root="/public", pattern="*.txt")
    assert whole.structured is not None
    assert len(whole.structured["matches"]) == 80
    assert whole.structured["truncated"] is False


def test_search_reads_no_more_content_than_its_budget_and_says_so(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files_module, "MAX_SEARCH_READ_BYTES", 1000, raising=False)
    for i in range(10):
        (root / "public" / f"f{i}.txt").write_bytes(b"." * 400)
    search = tools(root)["files.search"]
    found = call(search, "/public", root="/public", pattern="*.txt", text="zq-needle")
    assert found.structured is not None
    assert found.structured["matches"] == []
    assert found.structured["truncated"] is True
    monkeypatch.setattr(files_module, "MAX_SEARCH_READ_BYTES", 4000, raising=False)
    whole = call(search, "/public", root="/public", pattern="*.txt", text="zq-needle")
    assert whole.structured is not None
    assert whole.structured["truncated"] is False


def test_a_new_file_and_its_parents_get_the_host_s_umask(root: Path) -> None:
    write = tools(root)["files.write"]
    old = os.umask(0o077)
    try:
        made = call(write, "/public/new/secret.txt", path="x", content="private")
    finally:
        os.umask(old)
    assert not made.is_error
    assert stat.S_IMODE((root / "public" / "new" / "secret.txt").stat().st_mode) == 0o600
    assert stat.S_IMODE((root / "public" / "new").stat().st_mode) == 0o700
    old = os.umask(0o022)
    try:
        call(write, "/public/new/open.txt", path="x", content="public")
        # a replaced file keeps its own bits, whatever the umask
        (root / "public" / "new" / "secret.txt").chmod(0o640)
        call(write, "/public/new/secret.txt", path="x", content="private 2")
    finally:
        os.umask(old)
    assert stat.S_IMODE((root / "public" / "new" / "open.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((root / "public" / "new" / "secret.txt").stat().st_mode) == 0o640
    assert (root / "public" / "new" / "secret.txt").read_text() == "private 2"
    # a group-shared tree (umask 002): the file and its new parents are group-writable
    old = os.umask(0o002)
    try:
        call(write, "/public/shared/notes.txt", path="x", content="team")
    finally:
        os.umask(old)
    assert stat.S_IMODE((root / "public" / "shared").stat().st_mode) == 0o775
    assert stat.S_IMODE((root / "public" / "shared" / "notes.txt").stat().st_mode) == 0o664


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner needs root")
def test_a_replaced_file_keeps_its_owner_and_group(root: Path) -> None:
    # a host running as root made every file it replaced root's: the user whose file it
    # was could no longer change it
    mine = root / "public" / "mine.txt"
    mine.write_text("v1")
    os.chown(mine, 65534, 65533)
    mine.chmod(0o640)
    wrote = call(tools(root)["files.write"], "/public/mine.txt", path="x", content="v2")
    assert not wrote.is_error, text(wrote)
    st = mine.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65533, 0o640)
    assert mine.read_text() == "v2"
    # a new file is the writing process's, as any program makes one
    call(tools(root)["files.write"], "/public/new.txt", path="x", content="n")
    assert (root / "public" / "new.txt").stat().st_uid == os.geteuid()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (a real full disk), when this host lets the test mount one."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        (mnt / "root" / "public").mkdir(parents=True)
        yield mnt / "root"
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_write_that_fails_on_a_full_disk_leaves_nothing_behind(small_disk: Path) -> None:
    root = small_disk
    (root / "public" / "a.txt").write_text("OLD CONTENT")
    write = tools(root)["files.write"]
    big = "x" * (2 * 1024 * 1024)
    over = call(write, "/public/a.txt", path="x", content=big)
    assert over.is_error and "(no_space)" in text(over)
    assert (root / "public" / "a.txt").read_text() == "OLD CONTENT"
    new = call(write, "/public/new/deeper/b.txt", path="x", content=big)
    assert new.is_error and "(no_space)" in text(new)
    # neither a temporary file nor the directories made for the failed write remain
    assert sorted(os.listdir(root / "public")) == ["a.txt"]
    # a directory that existed before the call is kept, even when empty
    (root / "public" / "kept").mkdir()
    again = call(write, "/public/kept/c.txt", path="x", content=big)
    assert again.is_error
    assert sorted(os.listdir(root / "public")) == ["a.txt", "kept"]
    assert os.listdir(root / "public" / "kept") == []
    ok = call(write, "/public/new/deeper/b.txt", path="x", content="small")
    assert not ok.is_error
    assert (root / "public" / "new" / "deeper" / "b.txt").read_text() == "small"


@pytest.mark.parametrize(
    "data",
    [
        "café\r\n".encode("latin-1"),  # a Latin-1 text file
        "hello".encode("utf-16"),  # UTF-16 with its BOM
        bytes(range(256)),  # not text at all
    ],
)
def test_a_file_that_is_not_utf8_is_read_with_a_warning_that_says_so(
    root: Path, data: bytes
) -> None:
    (root / "public" / "f").write_bytes(data)
    result = call(tools(root)["files.read"], "/public/f", path="/public/f")
    assert not result.is_error
    assert result.structured is not None
    assert result.structured["utf8"] is False
    shown, warning = result.content
    assert shown["text"] == data.decode("utf-8", errors="replace")
    assert result.structured["content"] == shown["text"]
    assert "/public/f is not UTF-8 text" in warning["text"]
    assert "U+FFFD" in warning["text"]


def test_the_warning_says_how_many_bytes_one_replacement_stands_for(root: Path) -> None:
    # "Each byte of it that is not UTF-8 is shown as U+FFFD": the two bytes of a cut
    # "€" (and a Latin-1 byte) are one U+FFFD each, as the text the model got showed
    (root / "public" / "f").write_bytes(b"a\xe2\x82b\xe9")
    shown, warning = call(tools(root)["files.read"], "/public/f", path="/public/f").content
    assert shown["text"] == "a\ufffdb\ufffd"
    assert "Each byte" not in warning["text"]
    assert (
        "sequence of bytes in it that is not UTF-8 is shown above as one U+FFFD"
        in (warning["text"])
    )


@pytest.mark.parametrize(
    "data", [b"plain\n", "caf\u00e9\r\n\ufeffbom".encode(), "\ufeffwith BOM".encode()]
)
def test_a_utf8_file_is_read_exactly_with_no_warning(root: Path, data: bytes) -> None:
    (root / "public" / "f").write_bytes(data)
    read = call(tools(root)["files.read"], "/public/f", path="/public/f")
    assert read.structured is not None and read.structured["utf8"] is True
    assert [b["text"] for b in read.content] == [data.decode("utf-8")]
    # and it survives a round trip, CRLF and BOM included
    assert not call(
        tools(root)["files.write"], "/public/f", path="x", content=read.content[0]["text"]
    ).is_error
    assert (root / "public" / "f").read_bytes() == data


def test_a_cut_read_and_a_cut_search_say_so_in_their_text(root: Path) -> None:
    # the files tools declare no output schema: a client may show the model the text only
    (root / "public" / "long.txt").write_text("0123456789")
    ts = tools(root)
    read = call(ts["files.read"], "/public/long.txt", path="x", max_bytes=4)
    assert [b["text"] for b in read.content] == [
        "0123",
        "[files.read: only the first 4 bytes of /public/long.txt are shown; the file is longer.]",
    ]
    whole = call(ts["files.read"], "/public/long.txt", path="x", max_bytes=10)
    assert [b["text"] for b in whole.content] == ["0123456789"]
    for i in range(3):
        (root / "public" / f"m{i}.txt").write_text("x")
    cut = call(ts["files.search"], "/public", root="/public", pattern="m*", max_results=2)
    assert text(cut).splitlines()[:2] == ["/public/m0.txt", "/public/m1.txt"]
    assert "truncated" in text(cut).splitlines()[-1]
    full = call(ts["files.search"], "/public", root="/public", pattern="m*")
    assert text(full).splitlines() == ["/public/m0.txt", "/public/m1.txt", "/public/m2.txt"]


def test_a_search_pattern_is_no_longer_than_a_path(tmp_path: Path) -> None:
    # a pattern is compiled to a regular expression in time that grows faster than its
    # length: a 200,000-character one took seconds of CPU, a 4 MiB one outlasted the
    # handler's timeout (its thread walking on), and each stayed in fnmatch's cache
    (tmp_path / "root" / "data").mkdir(parents=True)
    (tmp_path / "root" / "data" / "a.txt").write_text("x")
    registry = ToolRegistry()
    files_module.register_files_tools(registry, tmp_path / "root")
    rules = compile_source(SEARCH_RULES, "f.sos")
    host = RuntimeHost(Kernel(rules, registry), SqliteEvidenceStore(tmp_path / "e.db"))
    run = ToolPolicy(name="t", mode=RunMode.OPEN, managed=("files.*",))

    def search(pattern: str) -> tuple[ToolResult, float]:
        async def go() -> ToolResult:
            call = ToolCall(tool="files.search", arguments={"root": "/data", "pattern": pattern})
            return await host.invoke_tool(call, AccessContext(principal="a"), run)

        t0 = time.process_time()
        result = anyio.run(go)
        return result, time.process_time() - t0

    longest = "*" * (MAX_PATH_CHARS - 5) + "a.txt"  # as long as the longest path
    found, _ = search(longest)
    assert found.outcome is Outcome.SUCCEEDED, found
    assert found.structured is not None and found.structured["matches"] == ["/data/a.txt"]
    refused, cpu = search("*a" * 100_000)
    assert refused.outcome is Outcome.FAILED, refused
    assert refused.reason is ReasonCode.INVALID_ARGUMENTS
    assert cpu < cpu_bound(1.0)
