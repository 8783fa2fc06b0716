"""Escape: a confined upstream replaces the evidence store by planting a hot journal beside it.

The evidence store's files (the database, its ``-wal`` and ``-shm``) are
managed: an upstream whose read-write root holds the store sees each masked
(``/dev/null`` over it), so it can neither read nor remove them. But SQLite
plays back a *hot journal* — a ``-journal`` file beside the database — into
the database the next time a connection opens it, whatever its journal mode:
page by page, then truncated to the size the journal names. An upstream that
can create ``evidence.sqlite-journal`` writes one holding a database of its
own, and the host's next open of its evidence store (``sharedos evidence``,
the next run) finds that database instead. The upstream is a real process in
its real sandbox (``decide`` → ``wrap`` → ``bwrap``); the store is the real
SQLite evidence store.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.evidence.url import open_store
from sharedos.harness.hostconfig import parse_host_config
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

# A hot journal holding every page of a database the upstream made itself
# (the format of SQLite's rollback journal: header, then page number, page, checksum).
FORGE = r"""
import os, sqlite3, struct, sys
db = sys.argv[1]
mine = "/tmp/mine.sqlite"
c = sqlite3.connect(mine)
c.execute("PRAGMA page_size=4096")
c.execute("CREATE TABLE forged(x)")
c.execute("INSERT INTO forged VALUES ('the upstream wrote this')")
c.commit()
c.close()
data = open(mine, "rb").read()
size, nonce, sector = 4096, 0x5EED, 512
pages = len(data) // size
out = (bytes.fromhex("d9d505f920a163d7") + struct.pack(">IIIII", pages, nonce, pages, sector, size)).ljust(sector, b"\0")
for i in range(pages):
    page = data[i * size:(i + 1) * size]
    check, j = nonce, size - 200
    while j > 0:
        check, j = check + page[j], j - 200
    out += struct.pack(">I", i + 1) + page + struct.pack(">I", check & 0xFFFFFFFF)
open(db + "-journal", "wb").write(out)
print("planted")
"""


def _tables(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master"))


def test_a_confined_upstream_cannot_plant_a_journal_into_the_evidence_store(
    tmp_path: Path,
) -> None:
    share = tmp_path / "share"
    share.mkdir()
    db = share / "evidence.sqlite"
    store = open_store(str(db))  # open for the run, as `sharedos run` holds it
    try:
        before = _tables(db)
        assert before and "forged" not in before
        host = parse_host_config(
            f'[evidence]\nurl = "{db}"\n\n'
            f'[upstream.fs]\ncommand = "{sys.executable}"\n'
            f'roots = [{{ path = "{share}", mode = "rw" }}]\n',
            str(tmp_path / "host.toml"),
            base_dir=tmp_path,
        )
        placement = decide(
            host.upstream["fs"],
            UpstreamConfinementPolicy(required=True, managed=tuple(host.state_paths())),
        )
        if placement.wrap is not None:  # it runs confined: it must not change the store
            command, args = placement.wrap(sys.executable, ["-c", FORGE, str(db)])
            subprocess.run(
                [command, *args], capture_output=True, text=True, timeout=60, check=False
            )
        else:
            assert placement.refusal is not None
    finally:
        store.close()
    # what the host's next open of its store finds
    assert _tables(db) == before, "the upstream replaced the evidence store"
