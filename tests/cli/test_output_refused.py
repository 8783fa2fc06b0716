"""A command whose standard output refuses a write says so in one line and exits 6.

``sharedos run > /dev/full`` ran its turn, then died on the answer with a traceback and
exit 1 (documented as "nothing ran"); ``sharedos-policy check > /dev/full`` reported
the full disk as an internal error, "a bug in sharedos-policy".
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.upstream.conftest import PY

BIN = Path(PY).parent
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


def assert_one_line_and_exit_6(argv: list[str]) -> None:
    """``argv`` run with its standard output on ``/dev/full``: exit 6, and one line saying so."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            argv, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, check=False
        )
    assert proc.returncode == 6, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: cannot write to standard output: No space left on device"
    ], proc.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["sharedos-policy", "check", str(REPO / "rules")],
        ["sharedos-policy", "fmt", str(REPO / "rules" / "fs.sos")],
        ["sharedos", "host", "--help"],
        ["sharedos", "evidence", "--help"],
        # before any command runs: sharedos-policy's guard was each command's, and its
        # --help and --version were a traceback, exit 1
        ["sharedos-policy", "--help"],
        ["sharedos-policy", "check", "--help"],
        ["sharedos-policy", "--version"],
    ],
)
def test_output_that_cannot_be_written_is_one_line_and_exit_6(argv: list[str]) -> None:
    assert_one_line_and_exit_6([str(BIN / argv[0]), *argv[1:]])


@pytest.mark.parametrize("command", ["verify", "counts"])
def test_an_evidence_command_whose_output_cannot_be_written_exits_6(
    command: str, tmp_path: Path
) -> None:
    """`sharedos evidence` turned a full standard output into exit 1 ("Error: cannot write
    the output"), which for `verify` reads as "something was found" in the store."""
    from sharedos.evidence import SqliteEvidenceStore

    db = tmp_path / "evidence.sqlite"
    SqliteEvidenceStore(db).close()
    assert_one_line_and_exit_6([str(BIN / "sharedos"), "evidence", command, "--db", str(db)])


def test_an_error_writing_a_file_is_not_taken_for_standard_output(tmp_path: Path) -> None:
    """Only standard output is "the output": a command failing on another file keeps its
    own message and exit status."""
    proc = subprocess.run(
        [str(BIN / "sharedos-policy"), "check", str(tmp_path / "missing.sos")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "standard output" not in proc.stderr


def test_a_run_whose_answer_cannot_be_written_exits_6(
    tmp_path: Path,
) -> None:
    """Not exit 1 ("nothing ran"), nor a traceback: the turn ran, and only the answer was lost."""
    import json
    import sys

    harness = tmp_path / "harness.py"
    harness.write_text(
        "import sys\n"
        'if "--version" in sys.argv:\n'
        '    print("2.1.0 (Claude Code)"); sys.exit(0)\n'
        'print(\'{"type":"result","result":"the answer"}\', flush=True)\n',
        encoding="utf-8",
    )
    host = tmp_path / "host.toml"
    host.write_text(
        f"[harness.claude-code]\ncommand = {json.dumps([sys.executable, str(harness)])}\n",
        encoding="utf-8",
    )
    rules = tmp_path / "rules.sos"
    rules.write_text(
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'toolpolicy run { mode open\n managed files.*\n harness_local "shell" }\n',
        encoding="utf-8",
    )
    (tmp_path / "sandbox").mkdir()
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [
                str(BIN / "sharedos"),
                "run",
                "--host-config",
                str(host),
                "--harness",
                "claude-code",
                "--rules",
                str(rules),
                "--policy",
                "run",
                "--principal",
                "bob",
                "--sandbox",
                str(tmp_path / "sandbox"),
                "--evidence",
                str(tmp_path / "evidence.sqlite"),
                "--workdir",
                str(tmp_path / "work"),
                "--timeout",
                "60",
                "answer",
            ],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=180,
            check=False,
        )
    assert proc.returncode == 6, proc.stderr[-2000:]
    assert "error: cannot write to standard output: No space left on device" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "turn run-" in proc.stderr  # it ran: only its answer was lost
