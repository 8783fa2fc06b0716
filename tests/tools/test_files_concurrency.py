"""Other processes change the tree while a files tool runs: skip, retry or refuse cleanly.

An entry that vanishes between a directory read and its ``stat`` must not
fail a whole listing or search; a directory that appears between
``files.write``'s check and its ``mkdir`` is used (it is checked like any
other) instead of escaping as ``FileExistsError``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tools.calls import call, text, tools


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "public" / "sub").mkdir(parents=True)
    for i in range(20):
        (r / "public" / f"f{i:02}.txt").write_text(f"file {i} needle")
    (r / "public" / "sub" / "deep.txt").write_text("deep needle")
    return r


def vanishing_scandir(monkeypatch: pytest.MonkeyPatch, victims: list[Path]) -> None:
    """``os.scandir`` lists the directory, then the victims are renamed away before any stat."""
    real = os.scandir

    def fake(path: Any = ".") -> Any:
        entries = list(real(path))
        for v in victims:
            if v.exists():
                os.rename(v, v.with_name(v.name + ".moved"))

        class It:
            def __iter__(self) -> Iterator[os.DirEntry[str]]:
                return iter(entries)

            def __enter__(self) -> It:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

            def close(self) -> None:
                pass

        return It()

    monkeypatch.setattr(os, "scandir", fake)


def test_list_skips_an_entry_renamed_away_while_listing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vanishing_scandir(monkeypatch, [root / "public" / "f03.txt"])
    listed = call(tools(root)["files.list"], "/public", path="x")
    assert not listed.is_error, text(listed)
    names = [e["name"] for e in listed.structured["entries"]]  # type: ignore[index]
    assert "f03.txt" not in names and "f04.txt" in names and "sub" in names


def test_search_skips_entries_renamed_away_while_searching(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vanishing_scandir(monkeypatch, [root / "public" / "f05.txt", root / "public" / "sub"])
    found = call(tools(root)["files.search"], "/public", root="x", pattern="*.txt", text="needle")
    assert not found.is_error, text(found)
    matches = found.structured["matches"]  # type: ignore[index]
    assert "/public/f05.txt" not in matches and "/public/f06.txt" in matches


def test_write_uses_a_directory_that_appears_between_its_check_and_its_mkdir(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.mkdir

    def racing_mkdir(path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real(path, mode, dir_fd=dir_fd)  # another writer got there first
        real(path, mode, dir_fd=dir_fd)  # so ours finds it: FileExistsError

    monkeypatch.setattr(os, "mkdir", racing_mkdir)
    wrote = call(tools(root)["files.write"], "/public/new/a/b.txt", path="x", content="ok")
    assert not wrote.is_error, text(wrote)
    assert (root / "public" / "new" / "a" / "b.txt").read_text() == "ok"


def test_write_refuses_cleanly_when_a_file_appears_where_a_directory_was_to_be_made(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.mkdir

    def racing_mkdir(path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=dir_fd))
        real(path, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "mkdir", racing_mkdir)
    wrote = call(tools(root)["files.write"], "/public/new/b.txt", path="x", content="ok")
    assert wrote.is_error
    assert text(wrote).startswith("/public/new") and str(root) not in text(wrote)


def test_concurrent_writers_creating_the_same_directories_all_succeed(root: Path) -> None:
    ts = tools(root)
    results: list[Any] = []

    def writer(i: int) -> None:
        for j in range(20):
            results.append(
                call(ts["files.write"], f"/public/d{j}/e/w{i}.txt", path="x", content=str(i))
            )

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [text(r) for r in results if r.is_error]
    assert failed == []
    assert (root / "public" / "d7" / "e" / "w3.txt").read_text() == "3"


def test_list_and_search_keep_answering_while_files_are_renamed_underneath(root: Path) -> None:
    stop = threading.Event()

    def renamer() -> None:
        public = root / "public"
        while not stop.is_set():
            for i in range(20):
                a, b = public / f"f{i:02}.txt", public / f"g{i:02}.txt"
                try:
                    os.rename(a, b)
                    os.rename(b, a)
                except FileNotFoundError:
                    pass
            try:
                os.rename(public / "sub", public / "sub2")
                os.rename(public / "sub2", public / "sub")
            except FileNotFoundError:
                pass

    thread = threading.Thread(target=renamer, daemon=True)
    thread.start()
    ts = tools(root)
    try:
        for _ in range(100):
            listed = call(ts["files.list"], "/public", path="x")
            found = call(ts["files.search"], "/public", root="x", pattern="*", text="needle")
            assert not listed.is_error, text(listed)
            assert not found.is_error, text(found)
    finally:
        stop.set()
        thread.join()


def test_paths_deeper_than_the_limit_are_refused_and_search_stops_there(root: Path) -> None:
    from sharedos.pathwalk import MAX_DEPTH

    ts = tools(root)
    deep = "/public/" + "/".join(["d"] * (MAX_DEPTH - 1))  # MAX_DEPTH components
    assert not call(ts["files.write"], deep, path="x", content="needle").is_error
    too_deep = call(ts["files.write"], deep + "/x", path="x", content="needle")
    assert too_deep.is_error and "(path_too_deep)" in text(too_deep)
    assert str(root) not in text(too_deep)
    found = call(ts["files.search"], "/", root="x", pattern="*", text="needle")
    assert deep in found.structured["matches"]  # type: ignore[index]
    # a directory made deeper by other means is not entered
    below = (root / deep.lstrip("/")).parent / "e" / "f"  # g.txt: MAX_DEPTH + 1 components
    below.mkdir(parents=True)
    (below / "g.txt").write_text("needle")
    again = call(ts["files.search"], "/", root="x", pattern="*", text="needle")
    assert again.structured["truncated"] is True  # type: ignore[index]


def test_paths_longer_than_any_call_can_name_are_left_out_of_search_and_said_so(
    root: Path,
) -> None:
    from sharedos.policy.paths import MAX_PATH_CHARS

    ts = tools(root)
    # 17 directories of 250 characters: a file below them is past the 4,096 a path may have
    # (made one level at a time: the host path is past PATH_MAX too)
    fd = os.open(root / "public", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(17):
            name = f"{i:02d}" + "d" * 248
            os.mkdir(name, dir_fd=fd)
            fd, parent = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
            os.close(parent)
        file_fd = os.open("g.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(file_fd, b"zq-needle")
        os.close(file_fd)
    finally:
        os.close(fd)
    (root / "public" / "near.txt").write_text("zq-needle")
    found = call(ts["files.search"], "/", root="/public", pattern="*.txt", text="zq-needle")
    matches = found.structured["matches"]  # type: ignore[index]
    assert matches == ["/public/near.txt"]
    assert all(len(m) <= MAX_PATH_CHARS for m in matches)
    assert found.structured["truncated"] is True  # type: ignore[index]
