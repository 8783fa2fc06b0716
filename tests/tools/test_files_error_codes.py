"""Each refusal carries the code docs/files-tools.md gives it ("Errors"): the code is a
refusal's stable last word, the one a model or a script acts on."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.tools.calls import call, tools


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "public").mkdir(parents=True)
    (r / "private").mkdir()
    (r / "private" / "s.txt").write_text("SECRET")
    os.symlink(r / "private", r / "public" / "linked")  # a link to a directory
    return r


def code(root: Path, tool: str, resource: str, **args: Any) -> object:
    result = call(tools(root)[tool], resource, **args)
    assert result.is_error and result.structured is not None
    return result.structured["code"]


@pytest.mark.parametrize(
    ("tool", "resource", "args"),
    [
        ("files.read", "/public/linked/s.txt", {}),
        ("files.write", "/public/linked/s.txt", {"content": "x"}),
        ("files.write", "/public/linked/new/s.txt", {"content": "x"}),
        ("files.delete", "/public/linked/s.txt", {}),
        ("files.list", "/public/linked", {}),
        ("files.search", "/public/linked", {"pattern": "*"}),
    ],
)
def test_a_link_to_a_directory_on_the_way_is_refused_as_a_link(
    root: Path, tool: str, resource: str, args: dict[str, Any]
) -> None:
    # "A symbolic link anywhere on the way or as the final name ... is refused (symlink)";
    # it was "/public/linked is not a directory (not_a_directory)"
    assert code(root, tool, resource, **args) == "symlink"
    assert (root / "private" / "s.txt").read_text() == "SECRET"


@pytest.mark.parametrize(
    ("tool", "resource", "expected"),
    [
        ("files.read", "/public/dir", "is_a_directory"),
        ("files.write", "/public/dir", "is_a_directory"),
        ("files.delete", "/public/dir", "is_a_directory"),
        ("files.read", "/public/linked", "symlink"),
        ("files.write", "/public/linked", "symlink"),
        ("files.delete", "/public/linked", "symlink"),
        ("files.read", "/public/fifo", "not_a_regular_file"),
        ("files.write", "/public/fifo", "not_a_regular_file"),
        ("files.delete", "/public/fifo", "not_a_regular_file"),
    ],
)
def test_each_tool_names_a_directory_a_link_and_a_fifo_alike(
    root: Path, tool: str, resource: str, expected: str
) -> None:
    # a read or delete of a directory, and a delete of a link, said not_a_regular_file
    # (the code of a FIFO or device) while a write of the same path said what it was
    (root / "public" / "dir").mkdir()
    os.mkfifo(root / "public" / "fifo")
    assert code(root, tool, resource, content="x") == expected
    assert (root / "public" / "dir").is_dir() and (root / "public" / "linked").is_symlink()
