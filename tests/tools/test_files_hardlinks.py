"""Hard links: a second name for a forbidden file, planted inside an allowed area.

``O_NOFOLLOW`` guards symbolic links only. A hard link *is* the file (same
inode), so a link ``/public/x`` -> ``/private/secret.txt``'s inode placed by
anything that can write the tree (a harness's own shell, a sync job) would let
``files.read`` return the forbidden content and ``files.write`` change it. The
files tools refuse any regular file whose link count is above 1, checked on
the opened descriptor (not the path), and ``files.search`` neither matches nor
lists such a file.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.tools.calls import call, text, tools

SECRET = b"TOP SECRET salary table\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "public" / "sub").mkdir(parents=True)
    (r / "private").mkdir()
    (r / "public" / "a.txt").write_text("public A")
    (r / "private" / "secret.txt").write_bytes(SECRET)
    os.link(r / "private" / "secret.txt", r / "public" / "sub" / "linked.txt")
    return r


def secret_intact(root: Path) -> bool:
    return (root / "private" / "secret.txt").read_bytes() == SECRET


def test_read_of_a_hard_link_to_a_forbidden_file_is_refused(root: Path) -> None:
    result = call(tools(root)["files.read"], "/public/sub/linked.txt", path="x")
    assert result.is_error
    assert "(hard_link)" in text(result)
    assert "/public/sub/linked.txt" in text(result)
    assert "SECRET" not in text(result) and "SECRET" not in repr(result.structured)


def test_write_through_a_hard_link_is_refused_and_changes_nothing(root: Path) -> None:
    result = call(tools(root)["files.write"], "/public/sub/linked.txt", path="x", content="pwned")
    assert result.is_error and "(hard_link)" in text(result)
    assert secret_intact(root)  # not even truncated by the refused open
    assert os.stat(root / "private" / "secret.txt").st_nlink == 2


def test_search_neither_matches_content_through_nor_lists_a_hard_link(root: Path) -> None:
    ts = tools(root)
    by_text = call(ts["files.search"], "/public", root="/public", pattern="*", text="SECRET")
    assert by_text.structured is not None and by_text.structured["matches"] == []
    by_name = call(ts["files.search"], "/public", root="/public", pattern="*.txt")
    assert by_name.structured is not None
    assert by_name.structured["matches"] == ["/public/a.txt"]


def test_list_shows_a_hard_link_by_name_only(root: Path) -> None:
    listed = call(tools(root)["files.list"], "/public/sub", path="x")
    assert listed.structured is not None
    assert listed.structured["entries"] == [
        {"name": "linked.txt", "type": "hardlink", "size": None}
    ]
    assert str(len(SECRET)) not in text(listed)


def test_delete_removes_only_the_name_in_the_authorized_area(root: Path) -> None:
    result = call(tools(root)["files.delete"], "/public/sub/linked.txt", path="x")
    assert not result.is_error
    assert not (root / "public" / "sub" / "linked.txt").exists()
    assert secret_intact(root) and os.stat(root / "private" / "secret.txt").st_nlink == 1


def test_a_file_whose_other_name_is_gone_is_an_ordinary_file_again(root: Path) -> None:
    os.unlink(root / "private" / "secret.txt")  # the only name left is the public one
    result = call(tools(root)["files.read"], "/public/sub/linked.txt", path="x")
    assert not result.is_error and text(result) == SECRET.decode()


def test_the_link_count_is_checked_on_the_opened_file_while_links_come_and_go(
    root: Path,
) -> None:
    """A thread keeps replacing /public/x with a hard link to the secret and back.

    Whatever the interleaving, a read returns public content or a refusal, and
    a write never lands in the secret file.
    """
    public = root / "public" / "x"
    spare = root / "public" / "spare"
    spare.write_text("public X")
    os.link(spare, root / "public" / "keep")  # so the spare survives renames
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            tmp = root / "public" / ".tmp"
            for source in (root / "private" / "secret.txt", root / "public" / "keep"):
                try:
                    os.link(source, tmp)
                    os.replace(tmp, public)
                except FileNotFoundError:
                    pass

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    ts = tools(root)
    try:
        for i in range(300):
            got = call(ts["files.read"], "/public/x", path="x")
            assert "SECRET" not in text(got)
            call(ts["files.write"], "/public/x", path="x", content=f"w{i}")
    finally:
        stop.set()
        swapper.join()
    assert secret_intact(root)
