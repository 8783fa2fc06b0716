"""``sharedos bridge`` / ``python -m sharedos.bridge``: one readable error line, and no CLI layer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.bridge.conftest import DATA


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sharedos.bridge", *args],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _private(path: Path, data: dict[str, object]) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, json.dumps(data).encode())
    os.close(fd)
    return path


def test_an_invalid_turn_file_is_one_line_not_a_pydantic_dump(tmp_path: Path) -> None:
    path = _private(
        tmp_path / "bad.json",
        {"version": 1, "context": {"principal": 5}, "rules": [str(DATA / "files.sos")], "x": 1},
    )
    proc = _run("--stdio", "--turn", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert (
        lines[0].startswith("sharedos bridge: turn file ")
        and "not a valid SharedOS turn file" in lines[0]
    )
    assert "more problem" in lines[0]
    assert "errors.pydantic.dev" not in proc.stderr and "Traceback" not in proc.stderr


def test_a_deleted_turn_file_exits_2_with_one_line(tmp_path: Path) -> None:
    proc = _run("--stdio", "--turn", str(tmp_path / "gone" / "turn.json"))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "cannot open turn file" in proc.stderr
    # a harness relaunching its server after the turn closed is told why, not only ENOENT
    assert "its turn has closed" in proc.stderr


def test_the_bridge_entry_point_does_not_import_the_cli_layer() -> None:
    code = "import sys, sharedos.bridge.__main__; print(sorted(m for m in sys.modules if m.startswith('sharedos.cli')))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"
