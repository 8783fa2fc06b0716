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
