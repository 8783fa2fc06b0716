"""Many hosts, one PostgreSQL evidence store: a host SIGKILLed mid-turn, another's connection killed.

Four real host processes (``tests/fleet/host_proc.py``: a ``RuntimeHost`` with
the files tools, each running 25 concurrent turns of real calls) write to one
database on a real PostgreSQL server. One host is SIGKILLed mid-turn; the
database connections of another are terminated (``pg_terminate_backend``)
while its turns are open. Then:

* every result a host returned is recorded exactly once, with the outcome
  and the seq it was answered with;
* every effect (a file a write created) has an attempt record;
* each turn's chain is gap-free (positions 0..n-1) and verifies;
* ``sharedos evidence counts`` over the whole fleet equals the calls made
  (the killed host: the attempts it committed, each returned one included);
* the host whose connections were killed lost nothing and failed nothing
  closed: the store reconnected.

``make test`` runs 4 hosts x 25 turns x 12 calls; ``make stress`` (the
``stress`` marker) 40 calls per turn.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sharedos.evidence.url import open_store
from sharedos.evidence.verify import verify_store
from tests.conftest import Figures

REPO = Path(__file__).resolve().parents[2]
HOSTS = 4
TURNS = 25
QUICK_CALLS = 12
LONG_CALLS = 40


class Host:
    """One host process and what it printed."""

    def __init__(
        self, name: str, url: str, sandbox: Path, calls: int, *, pause: bool = False
    ) -> None:
        args = [
            sys.executable,
            "-m",
            "tests.fleet.host_proc",
            "--db",
            f"{url}&application_name=fleet-{name}",
            "--host",
            name,
            "--sandbox",
            str(sandbox),
            "--turns",
            str(TURNS),
            "--calls",
            str(calls),
        ]
        if pause:
            args += ["--pause-after", str(calls // 2)]
        self.name = name
        self.proc = subprocess.Popen(
            args,
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.results: list[tuple[str, str, str, str, int]] = []
        self.made: int | None = None
        self.paused = threading.Event()
        self.stderr = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_err, daemon=True)
        self._err_reader.start()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if not line.endswith("\n") or not parts:
                continue  # a line cut by SIGKILL was not returned
            if parts[0] == "R":
                _, turn, call, outcome, reason, seq = parts
                self.results.append((turn, call, outcome, reason, int(seq)))
            elif parts[0] == "PAUSED":
                self.paused.set()
            elif parts[0] == "DONE":
                self.made = int(parts[1])

    def wait(self, timeout: float = 120) -> None:
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(timeout=10)
        self._err_reader.join(timeout=10)


def _sandbox(root: Path) -> Path:
    (root / "public").mkdir(parents=True)
    (root / "public" / "a.txt").write_text("public\n")
    (root / "private").mkdir()
    (root / "private" / "s.txt").write_text("secret\n")
    for h in range(HOSTS):
        for n in range(TURNS):
            (root / "home" / f"h{h}-p{n}").mkdir(parents=True)
    return root


def _terminate_backends(url: str, application: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application,),
        ).fetchall()
    return sum(1 for (ok,) in rows if ok)


def test_a_fleet_of_hosts_loses_nothing(tmp_path: Path, pg_url: str) -> None:
    _fleet(tmp_path, pg_url, QUICK_CALLS)


@pytest.mark.stress
def test_a_longer_fleet_loses_nothing(tmp_path: Path, pg_url: str, stress_figures: Figures) -> None:
    stress_figures.add(_fleet(tmp_path, pg_url, LONG_CALLS))


def _fleet(tmp_path: Path, pg_url: str, calls: int) -> str:
    """Run the fleet and check it; returns its figures line."""
    kill_after = TURNS * calls // 3  # results returned before the SIGKILL: mid-turn for every turn
    sandbox = _sandbox(tmp_path / "sandbox")
    open_store(pg_url).close()  # the schema, once, before the fleet starts
    started = time.perf_counter()
    hosts = [
        Host("h0", pg_url, sandbox, calls),
        Host("h1", pg_url, sandbox, calls),  # SIGKILLed mid-turn
        Host("h2", pg_url, sandbox, calls, pause=True),  # its connections are terminated
        Host("h3", pg_url, sandbox, calls),
    ]
    killed, severed = hosts[1], hosts[2]
    try:
        deadline = time.monotonic() + 90
        while len(killed.results) < kill_after and killed.proc.poll() is None:
            assert time.monotonic() < deadline, f"h1 printed {len(killed.results)} results"
            time.sleep(0.01)
        killed.proc.send_signal(signal.SIGKILL)
        assert severed.paused.wait(90), "h2 never paused"
        terminated = _terminate_backends(pg_url, "fleet-h2")
        assert terminated >= 1
        assert severed.proc.stdin is not None
        severed.proc.stdin.write("go\n")
        severed.proc.stdin.flush()
        for host in hosts:
            host.wait()
    finally:
        for host in hosts:
            if host.proc.poll() is None:
                host.proc.kill()
    elapsed = time.perf_counter() - started
    assert killed.proc.returncode == -signal.SIGKILL
    for host in (hosts[0], severed, hosts[3]):
        assert host.proc.returncode == 0, (
            f"{host.name} exited {host.proc.returncode}:\n{host.stderr}"
        )
        assert host.made == TURNS * calls and len(host.results) == TURNS * calls

    store = open_store(pg_url, read_only=True)
    try:
        records = store.query()
        by_call: dict[str, list[Any]] = {}
        for rec in records:
            by_call.setdefault(rec.call_id, []).append(rec)
        # 1. every returned result is recorded once, as it was answered
        returned = [r for host in hosts for r in host.results]
        assert len(killed.results) >= kill_after
        for turn, call, outcome, _reason, seq in returned:
            recs = by_call.get(call, [])
            assert len(recs) == 1, f"{call}: {len(recs)} records"
            assert (recs[0].turn_id, str(recs[0].outcome), recs[0].seq) == (turn, outcome, seq)
        # 2. every effect has an attempt
        effects = [p.stem for p in (sandbox / "home").glob("*/*.txt")]
        assert effects, "no write took effect"
        assert [c for c in effects if c not in by_call] == []
        # 3. each turn's chain: gap-free positions, and it verifies
        positions: dict[str, list[int]] = {}
        for link in store.iter_links():
            positions.setdefault(link.turn_id, []).append(link.pos)
        assert len(positions) == HOSTS * TURNS
        for turn_id, pos in positions.items():
            assert pos == list(range(len(pos))), f"{turn_id}: {pos}"
        report = verify_store(store)
        assert report.clean, [p.line() for p in report.problems][:10]
        assert report.sealed == 3 * TURNS  # the killed host's turns never closed
        # 4. counts over the fleet equal the calls made
        killed_recs = [r for r in records if r.turn_id.startswith("h1-")]
        made = sum(h.made or 0 for h in hosts) + len(killed_recs)
        counts = json.loads(_cli(["evidence", "counts", "--db", pg_url, "--format", "json"]))
        assert counts["total"] == made == len(records)
        # the killed host: each of its turns had at most one call in flight
        interrupted = Counter(r.turn_id for r in killed_recs if r.outcome is None)
        assert all(n <= 1 for n in interrupted.values())
        assert counts["interrupted"] == sum(interrupted.values())
        # 5. the severed host reconnected: nothing of it failed closed
        unavailable = [r for r in severed.results if r[3] == "evidence_unavailable"]
        assert unavailable == []
    finally:
        store.close()
    calls = len(records)
    return (
        f"fleet on PostgreSQL: {HOSTS} hosts x {TURNS} turns, {calls} calls in {elapsed:.1f} s "
        f"({calls / elapsed:.0f} calls/s), one host SIGKILLed and one's connections "
        f"terminated; lost 0, double-counted 0, chain problems 0"
    )


def _cli(args: list[str]) -> str:
    from sharedos.cli.main import main

    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output
