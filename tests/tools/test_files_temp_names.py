"""A write's temporary file is no resource: no other call may read, write, delete, list
or search it while the write is in flight.

``files.write`` puts the new content in ``.sharedos-write-<random>.tmp`` next to the
target and renames it over the target. That name sits in a directory other callers may
list and write: had it been an ordinary name, another principal could read the content
meant for a file it may not read, or replace the temporary file with its own, which the
write then renamed over a target that caller may not write.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sharedos.tools.files import TEMP_PREFIX
from tests.tools.calls import call, text, tools


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "public").mkdir(parents=True)
    (r / "public" / "alice-private.txt").write_text("old")
    return r


def in_flight(
    root: Path, monkeypatch: pytest.MonkeyPatch, other: Any
) -> tuple[str, dict[str, Any]]:
    """Alice writes her file; while its temporary file exists, ``other(name)`` runs (as
    another caller would, between the content and the rename). Returns the final content."""
    real = os.fchmod
    seen: dict[str, Any] = {}

    def racing_fchmod(fd: int, mode: int) -> None:
        real(fd, mode)
        if "name" not in seen:
            (name,) = [n for n in os.listdir(root / "public") if n.startswith(TEMP_PREFIX)]
            seen["name"] = name
            seen["results"] = other(f"/public/{name}")

    monkeypatch.setattr(os, "fchmod", racing_fchmod)
    wrote = call(
        tools(root)["files.write"], "/public/alice-private.txt", path="x", content="alice's secret"
    )
    assert "name" in seen, "the write made no temporary file"
    seen["wrote"] = wrote
    return (root / "public" / "alice-private.txt").read_text(), seen


def test_another_caller_cannot_replace_a_write_s_temporary_file(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = tools(root)
    final, seen = in_flight(
        root,
        monkeypatch,
        lambda temp: call(t["files.write"], temp, path="x", content="mallory was here"),
    )
    assert "mallory" not in final
    assert seen["results"].is_error, "a temporary file was written through the tools"
    assert final == "alice's secret", text(seen["wrote"])


def test_another_caller_cannot_read_delete_list_or_search_a_write_s_temporary_file(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = tools(root)

    def snoop(temp: str) -> dict[str, Any]:
        return {
            "read": call(t["files.read"], temp, path="x"),
            "list": call(t["files.list"], "/public", path="x"),
            "search": call(t["files.search"], "/public", root="x", pattern="*", text="secret"),
            "delete": call(t["files.delete"], temp, path="x"),
        }

    final, seen = in_flight(root, monkeypatch, snoop)
    got = seen["results"]
    assert got["read"].is_error and "secret" not in text(got["read"])
    assert got["delete"].is_error
    names = [e["name"] for e in got["list"].structured["entries"]]
    assert names == ["alice-private.txt"]
    assert got["search"].structured["matches"] == []
    assert final == "alice's secret", text(seen["wrote"])
