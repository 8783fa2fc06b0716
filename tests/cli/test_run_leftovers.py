"""A ``sharedos run`` killed outright leaves its temporary directories; the next run removes them.

SIGKILL (the OOM killer, ``kill -9``, a container stopped hard) gives a run no
chance to clean up: its run directory stayed in the temporary directory with
the harness's transcript (every tool result of the turn) and, over stdio, the
turn file with the dead turn's relay secret. Each such directory is now claimed
with a lock the kernel drops when the run dies (``sharedos.confine.leftovers``),
and the next ``sharedos run`` removes those whose lock nobody holds.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli.test_run_signals import _writing_run
from tests.timing import bound


@pytest.mark.harness("claude-code")
def test_the_next_run_removes_what_a_killed_run_left(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o700)
    env = {**os.environ, "TMPDIR": str(tmp)}
    first = tmp_path / "first"
    first.mkdir()
    argv = _writing_run(first, "stdio", 200)
    home = first / "sandbox" / "home" / "alice"
    err = tmp_path / "first.err"
    with err.open("w") as stderr:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    try:
        deadline = time.monotonic() + bound(120)
        while not any(home.iterdir()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, err.read_text()[-3000:]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=bound(30))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    found = re.search(r"run directory: (\S+) \(removed after the run", err.read_text())
    assert found is not None
    left = Path(found.group(1))
    assert left.exists(), "SIGKILL left nothing behind: the test proves nothing"
    turn_files = list(left.rglob("turn.json"))
    assert turn_files, "the stdio turn file was expected among what the killed run left"

    second = tmp_path / "second"
    second.mkdir()
    done = subprocess.run(
        _writing_run(second, "http", 1), capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not left.exists(), "the killed run's directory is still there"
    assert "left by runs that were killed" in done.stderr
    # the second run cleaned up after itself too
    runs = tmp / f"sharedos-runs-{os.getuid()}"  # where run directories are made
    for where in (tmp, runs):
        assert [p.name for p in where.iterdir() if p.name.startswith("sharedos-run-")] == []
