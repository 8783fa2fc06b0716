"""The full conformance matrix, run once per session and read by the tests that check it.

``sharedos conformance run`` with every column (scripted, live, mcp, client), every
harness and both transports, inside a loopback-only network namespace when running as
root. Two test modules read the one run: tests/cli/test_conformance_columns.py (the
report the CLI writes) and tests/harness/test_harness_mcp.py (every column as it ran,
``--columns-out``: each attempt with what the harness side saw). Running it once instead
of once per module keeps ``make test`` well inside its time budget; the fixture is
``full_matrix`` in tests/conftest.py.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_MAIN = "import sys; from sharedos.cli.main import main; sys.exit(main())"

#: The full matrix that `make test` leaves behind (git-ignored); tests/conftest.py
#: prints its text report at the end of the run.
FULL_MATRIX_DIR = REPO / "reports" / "full-matrix"


def sharedos_argv(*args: str) -> list[str]:
    """The CLI, inside a loopback-only namespace when running as root."""
    script = Path(sys.executable).parent / "sharedos"
    argv = [str(script), *args] if script.exists() else [sys.executable, "-c", _MAIN, *args]
    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip"):
        inner = " ".join(shlex.quote(a) for a in argv)
        return ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {inner}"]
    return argv


@dataclass(frozen=True)
class FullMatrix:
    """What one full run left: its process, the report directory and the two JSON documents."""

    proc: subprocess.CompletedProcess[str]
    out: Path
    #: the JSON report (``<stem>.json``)
    report: dict[str, Any]
    #: ``--columns-out``: ``{"columns": [...], "grades": {column id: {row id: cell}}}``
    columns: dict[str, Any]


def run_full_matrix(workdir: Path) -> FullMatrix:
    """Run the whole matrix (asserting the CLI exited 0) and read what it wrote."""
    out = FULL_MATRIX_DIR
    shutil.rmtree(out, ignore_errors=True)
    columns_out = workdir / "columns.json"
    argv = sharedos_argv(
        "conformance", "run",
        "--column", "scripted", "--column", "live", "--column", "mcp", "--column", "client",
        "--harness", "all", "--transport", "all",
        "--host-config", str(REPO / "tests/data/harness/host.offline.toml"),
        "--out", str(out),
        "--columns-out", str(columns_out),
        # two columns at once, each in its own kernel, store and sandbox: the matrix takes
        # most of a serial suite's time, and the report does not depend on the order
        "--jobs", "2",
    )  # fmt: skip
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=1400, cwd=workdir, check=False
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(next(out.glob("*.json")).read_text())
    return FullMatrix(proc, out, report, json.loads(columns_out.read_text()))


def full_matrix_document(workdir: Path) -> dict[str, Any]:
    """Run the whole matrix in ``workdir`` and return what it left, as JSON."""
    matrix = run_full_matrix(workdir)
    return {
        "args": matrix.proc.args,
        "returncode": matrix.proc.returncode,
        "stdout": matrix.proc.stdout,
        "stderr": matrix.proc.stderr,
        "out": str(matrix.out),
        "report": matrix.report,
        "columns": matrix.columns,
    }


def full_matrix_of(doc: dict[str, Any]) -> FullMatrix:
    """The ``FullMatrix`` a ``full_matrix_document`` describes."""
    proc = subprocess.CompletedProcess(doc["args"], doc["returncode"], doc["stdout"], doc["stderr"])
    return FullMatrix(proc, Path(doc["out"]), doc["report"], doc["columns"])
