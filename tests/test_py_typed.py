"""The package is typed for its users: ``sharedos/py.typed`` ships in the wheel (PEP 561)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest


def test_py_typed_is_in_the_source_tree(repo_root: Path) -> None:
    assert (repo_root / "sharedos" / "py.typed").is_file()


@pytest.mark.slow
def test_the_wheel_ships_py_typed(repo_root: Path, tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(repo_root),
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path),
        ],
        check=True,
        timeout=240,
    )
    (wheel,) = tmp_path.glob("sharedos-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "sharedos/py.typed" in names
    assert "sharedos/compat/uvicorn.py" in names
