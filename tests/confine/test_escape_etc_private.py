"""Escape: every sandbox was shown the host's TLS private keys (``/etc/ssl/private``).

The system part of every view (harness and upstream) binds a selection of
``/etc`` — TLS roots among them, as ``/etc/ssl`` — and "not shadow, not host
configurations" (docs/confinement.md). ``/etc/ssl`` holds ``private`` too, the
host's TLS private keys (``root:ssl-cert``, 0710, keys 0640). A sandbox runs as
SharedOS's uid mapped, so under a root SharedOS (the normal case) owner bits
apply: every key there was readable by a harness's shell and by every upstream.
The directory is now covered by an empty tmpfs of the sandbox's own. Checked
from a real sandbox: the directory it sees must not be the host's.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sharedos.confine import find_bubblewrap
from sharedos.confine.upstream import plan_upstream

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

PRIVATE = "/etc/ssl/private"


@pytest.mark.skipif(not os.path.isdir(PRIVATE), reason=f"no {PRIVATE} on this host")
def test_a_sandbox_is_not_shown_the_hosts_tls_private_keys() -> None:
    sandbox = plan_upstream(find_bubblewrap(), command="/usr/bin/python3", roots=[])
    assert "/etc/ssl" in sandbox.view.readonly  # the TLS roots are still there
    command, args = sandbox.wrap(
        "/usr/bin/python3",
        ["-c", f"import os; s = os.stat({PRIVATE!r}); print(s.st_dev, s.st_ino)"],
    )
    proc = subprocess.run([command, *args], capture_output=True, text=True, timeout=60)
    host = os.stat(PRIVATE)
    if proc.returncode != 0:
        assert "No such file" in proc.stderr, proc.stderr
        return
    dev, ino = (int(x) for x in proc.stdout.split())
    assert (dev, ino) != (host.st_dev, host.st_ino), "the sandbox sees the host's private keys"
