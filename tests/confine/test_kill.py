"""``sharedos run`` killed with SIGKILL: no process of the run outlives it.

A real ``sharedos run`` drives the real Claude Code through the real bridge;
the scripted model makes a call to the fixture upstream's ``gate`` tool, which
holds until a file appears, so the harness and the upstream are both alive
and busy when the run is killed. Every process below the run (the sandbox,
the CLI, its helpers, the upstream) is noted just before the ``SIGKILL``, and
each must be gone soon after — confined (bubblewrap: ``--die-with-parent`` and
its own PID namespace) and unconfined (SharedOS's supervisor: a child
subreaper with a parent-death signal). The turn's token file is not left on
disk either way. Before this, Claude Code was still running 15 s later.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sharedos.confine.supervise import descendants
from tests.upstream.conftest import FIXTURE, FIXTURE_RULES, PY

SHAREDOS = str(Path(PY).parent / "sharedos")
pytestmark = pytest.mark.harness


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return None if fields[0] == "Z" else fields[19]


def _setup(tmp: Path, mode: str) -> list[str]:
    shared = tmp / "fx"
    shared.mkdir()
    host = tmp / "host.toml"
    host.write_text(
        f"[harness.claude-code]\n\n[upstream.fx]\ncommand = {json.dumps(PY)}\n"
        f"args = {json.dumps([str(FIXTURE), '--log', str(shared / 'log.jsonl')])}\n"
        'pinning = "off"\ntimeouts = { call_s = 120 }\n'
        f'roots = [{{ path = {json.dumps(str(shared))}, mode = "rw" }}]\n',
        encoding="utf-8",
    )
    rules = tmp / "rules.sos"
    rules.write_text(
        FIXTURE_RULES
        + "requirement fx.gate { action read; resource path(args.path) }\n"
        + f'toolpolicy run {{ mode {mode}\n managed fx.*\n harness_local "shell" }}\n',
        encoding="utf-8",
    )
    plan = tmp / "plan.json"
    gate = {"until": str(shared / "never"), "seconds": 100, "path": "/public/x"}
    plan.write_text(json.dumps([{"tool": "fx.gate", "arguments": gate}]))
    return [
        SHAREDOS, "run", "--host-config", str(host), "--harness", "claude-code",
        "--rules", str(rules), "--policy", "run", "--principal", "bob",
        "--evidence", str(tmp / "evidence.sqlite"), "--plan", str(plan),
        "--workdir", str(tmp / "work"), "--timeout", "150", "call the gate",
    ]  # fmt: skip


@pytest.mark.parametrize("mode", ["strict", "open"])
def test_no_process_of_a_killed_run_outlives_it(tmp_path: Path, mode: str) -> None:
    if not Path(SHAREDOS).exists() or (shutil.which("bwrap") is None and mode == "strict"):
        pytest.skip("needs the sharedos console script and bubblewrap")
    argv = _setup(tmp_path, mode)
    log = tmp_path / "run.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        # wait until the harness sits in the gate call: the upstream logged it
        fx_log = tmp_path / "fx" / "log.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if fx_log.exists() and '"gate"' in fx_log.read_text():
                break
            time.sleep(0.1)
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.5)
        alive = {pid: _start_time(pid) for pid in descendants(proc.pid)}
        names = {pid: Path(f"/proc/{pid}/comm").read_text().strip() for pid in alive}
        # the CLI, the sandbox (or supervisor) and the upstream are all below the run
        assert any("claude" in n for n in names.values()), names
        assert len(alive) >= 2, names
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        end = time.monotonic() + 15
        left = dict(alive)
        while left and time.monotonic() < end:
            left = {p: t for p, t in left.items() if t is not None and _start_time(p) == t}
            time.sleep(0.1)
        assert left == {}, {p: names[p] for p in left}
    finally:
        if proc.poll() is None:
            proc.kill()
    # the turn's token file (Claude Code's --mcp-config) holds no token on disk
    configs = list((tmp_path / "work").rglob("claude-mcp.json"))
    assert all(p.stat().st_size == 0 for p in configs), configs
    text = log.read_text()
    assert ("confined by bubblewrap" in text) == (mode == "strict") or "turn run-" in text
