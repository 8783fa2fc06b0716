"""Escape: a confined upstream connects to the PostgreSQL evidence store's Unix socket.

With the evidence in PostgreSQL over a Unix socket (``postgresql://sharedos@/
evidence?host=/run/postgresql``, docs/evidence.md), the socket is the store:
who can ``connect`` to it as SharedOS's uid passes ``peer`` authentication
(Debian's default for local connections) or ``trust``, and can rewrite or
delete evidence. A sandbox runs as that uid (mapped), and a read-only bind does
not stop ``connect``. The managed paths named SQLite's files only, so an
upstream whose roots hold the socket's directory (``/run``, ``/var/run``, or
``/tmp`` where a server keeps its socket there) was given the socket. Its
socket is now one of the store's files: a view that shows it is refused.

A real throwaway cluster (trust authentication, as peer would pass for the same
uid), a real upstream process in its real sandbox speaking the wire protocol.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.cli.run import state_paths
from sharedos.confine import find_bubblewrap
from sharedos.harness.hostconfig import HostConfigError, parse_host_config
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide
from tests.fleet.pgcluster import ClusterUnavailable, TempCluster

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

# the frontend protocol by hand: a startup message, then one simple query
WIRE = r"""
import socket, struct, sys
path, user, db = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(path)
except OSError as exc:
    print("UPSTREAM refused:", exc); sys.exit(0)
body = struct.pack("!i", 196608) + b"user\0" + user.encode() + b"\0database\0" + db.encode() + b"\0\0"
s.sendall(struct.pack("!i", len(body) + 4) + body)
s.settimeout(10)
got = b""
while b"Z\0\0\0\x05" not in got:
    chunk = s.recv(4096)
    if not chunk:
        break
    got += chunk
q = b"CREATE TABLE upstream_was_here ()\0"
s.sendall(b"Q" + struct.pack("!i", len(q) + 4) + q)
print("UPSTREAM answered:", s.recv(4096)[:40])
"""


def test_a_confined_upstream_cannot_reach_the_evidence_store_socket(tmp_path: Path) -> None:
    find_bubblewrap()
    try:
        cluster = TempCluster().start()
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    try:
        import psycopg

        sock = cluster.socket_dir
        assert cluster.root is not None
        cluster.root.chmod(0o711)  # the server's own directory: the socket's may be passed
        try:
            host = parse_host_config(
                f'[evidence]\nurl = "{cluster.url}"\n\n'
                f'[upstream.scratch]\ncommand = "/usr/bin/python3"\n'
                f'roots = [{{ path = "{sock}", mode = "ro" }}]\n',
                str(tmp_path / "host.toml"),
            )
        except HostConfigError as exc:  # refused outright: the root holds a socket
            assert f"holds the Unix socket {sock}/.s.PGSQL" in str(exc), exc
            return
        managed = state_paths({"evidence_db": cluster.url, "rule_paths": []}, host)
        placement = decide(
            host.upstream["scratch"],
            UpstreamConfinementPolicy(required=True, managed=tuple(managed)),
        )
        if placement.wrap is None:  # refusing the view is as good as hiding the socket
            assert ".s.PGSQL" in str(placement.refusal), placement.refusal
        else:
            socket_path = str(sock / f".s.PGSQL.{cluster.port}")
            command, args = placement.wrap(
                "/usr/bin/python3", ["-c", WIRE, socket_path, "sharedos", "sharedos"]
            )
            proc = subprocess.run(
                [command, *args], capture_output=True, text=True, timeout=60, check=False
            )
            assert proc.returncode == 0, proc.stderr
        with psycopg.connect(cluster.url) as conn:
            found = conn.execute("SELECT to_regclass('upstream_was_here')").fetchone()
        assert found == (None,), "a confined upstream wrote into the evidence database"
    finally:
        cluster.stop()
