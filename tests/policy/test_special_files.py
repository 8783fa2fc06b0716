"""Policy paths that are not regular files: a pipe is read, never waited on; a device
is refused (``sharedos-policy check``, and the loader under it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.policy.loader import read_file

SCRIPT = Path(sys.executable).parent / "sharedos-policy"
pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX named pipes")


def _check(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "check", *args], capture_output=True, text=True, timeout=60, **kw
    )


def test_a_named_pipe_nobody_writes_to_does_not_hang_check(tmp_path: Path) -> None:
    fifo = tmp_path / "rules.sos"
    os.mkfifo(fifo)
    proc = _check(str(fifo))  # waited forever on the open before
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 file checked" in proc.stdout


def test_a_pipe_with_policy_text_is_checked(tmp_path: Path) -> None:
    read, write = os.pipe()
    os.write(write, b"forbid  ;\n")  # a syntax error: what it reports comes from the pipe
    os.close(write)
    proc = _check(f"/dev/fd/{read}", pass_fds=(read,))
    os.close(read)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "SOS" in proc.stdout + proc.stderr


def test_a_device_is_refused_not_read_forever() -> None:
    proc = _check("/dev/zero")
    assert proc.returncode == 2
    assert "not a regular file or directory: /dev/zero" in proc.stderr


def test_the_loader_never_blocks_on_or_reads_a_special_file(tmp_path: Path) -> None:
    fifo = tmp_path / "late.sos"
    os.mkfifo(fifo)
    assert read_file(fifo) == ("", None)
    text, problem = read_file(Path("/dev/zero"))
    assert text is None and problem is not None
    assert "not a regular file" in problem.message
