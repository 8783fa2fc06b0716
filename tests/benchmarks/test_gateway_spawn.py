"""``bench_gateways`` starts its servers so that none can block on its own output.

A peer that logs to stdout (mcp-proxy's uvicorn writes an access-log line per
request) must not be given a pipe nobody reads: once the pipe's buffer is full
its next write blocks, the server stops answering, and the run dies of a
client timeout. Only the server that announces itself on stdout (SharedOS's
turn, one JSON line) gets a pipe. ``psutil`` (the ``bench`` extra) is needed to
import the script.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

pytest.importorskip("psutil")
pytest.importorskip("httpx2")

from benchmarks.bench_gateways import _spawn  # noqa: E402

#: far more than a pipe buffer holds (64 KiB on Linux)
CHATTER = (
    "import sys\nfor _ in range(20000): sys.stdout.write('x' * 63 + '\\n')\nsys.stdout.flush()\n"
)


def test_a_peer_that_writes_to_stdout_runs_to_its_end() -> None:
    proc = _spawn([sys.executable, "-c", CHATTER])
    try:
        # a generous bound that only a blocked process reaches (not a speed check)
        assert proc.wait(timeout=120) == 0
        assert proc.stdout is None  # nobody would read it
    finally:
        if proc.poll() is None:
            proc.kill()
        if proc.stdin is not None:
            proc.stdin.close()


def test_the_announcing_server_keeps_its_pipe() -> None:
    proc = _spawn([sys.executable, "-c", 'print(\'{"url": "u"}\')'], announces=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == '{"url": "u"}'
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stdin is not None:
            proc.stdin.close()
