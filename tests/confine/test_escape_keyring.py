"""Escape: the kernel's keyrings, which no namespace confines.

A process started from a login (``pam_keyinit``), a ``keyctl session`` or a
systemd service has a session keyring of its own, and every key reachable from
it — the user keyring's Kerberos tickets, tokens stored with ``keyctl``, file
system keys — is *possessed* by each of its descendants. A sandbox keeps the
session keyring of the process that started it (bubblewrap's ``--new-session``
is a new terminal session, not a new keyring), and its uid is mapped onto
SharedOS's own, so before the seccomp filter a harness's shell or a hostile
upstream read such a key back, payload and all, from inside its sandbox (its ids
are listed by the sandbox's own ``/proc/keys``). The probe here: a helper process
joins a fresh session keyring, adds a key holding a secret (as a login would),
then starts a harness sandbox and an upstream sandbox exactly as SharedOS does,
each reading that key by its id.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.confine import ConfinementUnavailable, find_bubblewrap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

SECRET = "KEYRING-held-upstream-token-5d1e"

#: run inside each sandbox: read key ``argv[1]`` (keyctl KEYCTL_READ), print what came back
READ = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(256)
n = libc.syscall(250 if sys.maxsize > 2**32 else 288, 11, int(sys.argv[1]), buf, 256)
print("READ", buf.raw[:n].decode() if n > 0 else f"refused errno {ctypes.get_errno()}")
"""

#: the host side: a session keyring with the secret, then both sandboxes as SharedOS plans them
HOST = """
import ctypes, os, subprocess, sys
from pathlib import Path
libc = ctypes.CDLL(None, use_errno=True)
# KEYCTL_JOIN_SESSION_KEYRING (a fresh anonymous one), then the key in it
key = -1
if libc.syscall(250, 1, None) > 0:
    key = libc.syscall(248, b"user", b"sharedos-test", SECRET.encode(), len(SECRET), ctypes.c_int(-3))
if key <= 0:
    print("NOKEYRING", os.strerror(ctypes.get_errno()))
    sys.exit(0)

from sharedos.confine import HarnessSandbox, find_bubblewrap
from sharedos.harness.hostconfig import parse_host_config
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide

turn = Path(TMP) / "turn"
turn.mkdir()
sandbox = HarnessSandbox.plan(find_bubblewrap(), readonly=[], writable=[turn], managed=[])
argv = sandbox.argv(["/usr/bin/python3", "-c", READ, str(key)], cwd=turn)
run = subprocess.run(argv, capture_output=True, text=True, pass_fds=sandbox.pass_fds, timeout=60)
sandbox.spawned()
print("harness", run.stdout.strip(), run.stderr.strip()[-200:])

host = parse_host_config(
    '[upstream.x]\\ncommand = "/usr/bin/python3"\\nroots = []\\n', str(Path(TMP) / "host.toml")
)
placement = decide(host.upstream["x"], UpstreamConfinementPolicy(required=True))
assert placement.wrap is not None, placement.refusal
command, args = placement.wrap("/usr/bin/python3", ["-c", READ, str(key)])
run = subprocess.run([command, *args], capture_output=True, text=True, timeout=60)
print("upstream", run.stdout.strip(), run.stderr.strip()[-200:])
"""


def test_no_sandbox_reads_a_key_of_the_session_keyring_it_was_started_from(
    tmp_path: Path,
) -> None:
    try:
        find_bubblewrap()
    except ConfinementUnavailable as exc:
        pytest.skip(str(exc))
    source = f"SECRET = {SECRET!r}\nREAD = {READ!r}\nTMP = {str(tmp_path)!r}\n" + HOST
    proc = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    if proc.stdout.startswith("NOKEYRING"):  # a container refusing keyctl to the tests too
        pytest.skip(f"no session keyring for the test here: {proc.stdout.strip()}")
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert set(lines) == {"harness", "upstream"}, proc.stdout
    for where, said in lines.items():
        assert SECRET not in said, f"the {where} sandbox read the host's key: {said}"
        assert said.startswith("READ refused errno 1"), f"{where}: {said}"
