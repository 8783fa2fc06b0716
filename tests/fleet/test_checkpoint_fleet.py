"""Checkpoints with several hosts writing one PostgreSQL store at once (issue 24).

Three real host processes (``tests/fleet/host_proc.py``: a ``RuntimeHost``,
concurrent turns of real calls), each with its own signing key, checkpoint
every few milliseconds into one database. Their checkpoints must form one
chain (numbered without gaps, each after the one before, whichever host
wrote it), every checkpoint signed by one of the hosts, every turn's last
head covered; and a turn deleted afterwards, or the tail of one cut, is found.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg

from sharedos.evidence.chain import Signer, load_public_key
from sharedos.evidence.url import open_store
from sharedos.evidence.verify import verify_store

REPO = Path(__file__).resolve().parents[2]
HOSTS = 3
TURNS = 8
CALLS = 9


def test_hosts_writing_one_store_make_one_checkpoint_chain(pg_url: str, tmp_path: Path) -> None:
    sandbox = tmp_path / "sandbox"
    (sandbox / "public").mkdir(parents=True)
    (sandbox / "public" / "a.txt").write_text("public\n")
    (sandbox / "private").mkdir()
    (sandbox / "private" / "s.txt").write_text("secret\n")
    keys = {}
    for h in range(HOSTS):
        for t in range(TURNS):
            (sandbox / "home" / f"h{h}-p{t}").mkdir(parents=True)
        signer = Signer.generate()
        (tmp_path / f"h{h}.pem").write_bytes(signer.private_pem())
        (tmp_path / f"h{h}.pem").chmod(0o600)  # a private key: refused when others can read it
        key, key_id = load_public_key(signer.public_pem())
        keys[key_id] = key
    open_store(pg_url).close()  # the schema, once
    procs = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.fleet.host_proc", "--db", pg_url),
                *("--host", f"h{h}", "--sandbox", str(sandbox)),
                *("--turns", str(TURNS), "--calls", str(CALLS)),
                *("--checkpoint-interval", "0.005", "--sign-key", str(tmp_path / f"h{h}.pem")),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for h in range(HOSTS)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        assert out.splitlines()[-1].startswith("DONE")
    store = open_store(pg_url, read_only=True)
    try:
        checkpoints = [cp for cp, _ in store.iter_checkpoints()]
        # every host checkpointed more than once, into one chain
        assert len(checkpoints) > HOSTS
        assert [cp.number for cp in checkpoints] == list(range(1, len(checkpoints) + 1))
        assert {cp.key_id for cp in checkpoints} == set(keys)
        report = verify_store(store, public_keys=keys)
        assert report.clean, [p.line() for p in report.problems][:10]
        assert report.turns == HOSTS * TURNS and report.checkpoints == len(checkpoints)
        # every turn's last link is covered (each host's closing checkpoint at the latest)
        heads = {lk.turn_id: lk.pos for lk in store.iter_links()}
        covered = {turn: pos for turn, pos, _h, _n in store.iter_coverage()}
        assert covered == heads
    finally:
        store.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DELETE FROM chain WHERE turn_id = 'h1-t3'")
        conn.execute("DELETE FROM chain WHERE turn_id = 'h2-t5' AND pos > 10")
    store = open_store(pg_url, read_only=True)
    try:
        found = {(p.kind, p.turn_id) for p in verify_store(store, public_keys=keys).problems}
    finally:
        store.close()
    assert ("deleted", "h1-t3") in found  # the whole turn
    assert ("deleted", "h2-t5") in found  # its tail
