"""Three processes writing one turn at once (the documented case of two writers of a turn,
pushed): every write lands, the chain stays one chain. A real PostgreSQL server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sharedos.evidence.url import open_store
from sharedos.evidence.verify import verify_store

REPO = Path(__file__).resolve().parents[2]
WRITERS = 3
CALLS = 300


def test_writers_racing_for_one_turns_head_all_land(pg_url: str) -> None:
    open_store(pg_url).close()  # the schema, once
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.fleet.turn_writer", pg_url, f"w{n}-", str(CALLS)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(WRITERS)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        outputs.append(out.strip().splitlines()[-1])
    # a writer that kept losing the race for the head must not give up while it has time
    assert outputs == ["FAILED 0 -"] * WRITERS, outputs
    store = open_store(pg_url, read_only=True)
    try:
        assert len(store.query(turn_id="T")) == WRITERS * CALLS
        positions = [lk.pos for lk in store.iter_links("T")]
        assert positions == list(range(len(positions)))
        assert verify_store(store).clean
    finally:
        store.close()
