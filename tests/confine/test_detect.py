"""Which ``bwrap`` a strict run trusts: the system's, before anything found on ``PATH``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.confine.detect import (
    BWRAP_ENV,
    SYSTEM_BWRAP,
    ConfinementUnavailable,
    _probe,
    find_bubblewrap,
)

#: a "bwrap" that starts no sandbox at all: it runs its command as it is
IMPOSTOR = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "bubblewrap 0.8.0"; exit 0; fi
while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift
exec "$@"
"""


@pytest.mark.skipif(
    not any(os.access(p, os.X_OK) for p in SYSTEM_BWRAP), reason="no system bwrap here"
)
def test_a_bwrap_planted_early_on_path_is_not_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``~/.local/bin`` or ``~/bin`` come first on many ``PATH``s, and an upstream a strict
    run gave a read-write root over the home could write there: a ``bwrap`` planted
    there was the sandbox of every later strict run (the confinement hunt's remark)."""
    planted = tmp_path / "bin"
    planted.mkdir()
    fake = planted / "bwrap"
    fake.write_text(IMPOSTOR)
    fake.chmod(0o755)
    monkeypatch.delenv(BWRAP_ENV, raising=False)
    monkeypatch.setenv("PATH", f"{planted}{os.pathsep}{os.environ.get('PATH', '')}")
    mechanism = find_bubblewrap()
    assert mechanism.path in {os.path.realpath(p) for p in SYSTEM_BWRAP}
    assert mechanism.path != str(fake)
    # naming one on purpose still works (tests, unusual installs)
    monkeypatch.setenv(BWRAP_ENV, str(fake))
    assert find_bubblewrap().path == str(fake)


PROBE_REFUSED = """
import sys
with open("/proc/sys/user/max_user_namespaces", "w") as fh:
    fh.write("0")  # this machine (this user namespace) refuses new user namespaces
from sharedos.confine.detect import ConfinementUnavailable, find_bubblewrap
try:
    find_bubblewrap()
except ConfinementUnavailable as exc:
    print("REFUSED", exc)
else:
    print("USABLE")
"""


@pytest.mark.skipif(
    shutil.which("unshare") is None or not any(os.access(p, os.X_OK) for p in SYSTEM_BWRAP),
    reason="needs unshare(1) and a system bwrap",
)
def test_a_machine_refusing_user_namespaces_has_no_usable_bubblewrap(tmp_path: Path) -> None:
    """Every sandbox runs in a user namespace of its own (``--unshare-user``); the trial
    sandbox only tried one (``--unshare-all``), which as root silently goes without it. With
    ``user.max_user_namespaces = 0`` the trial passed, and a strict ``sharedos run`` (network
    ``host``: no loopback handoff to notice) opened a turn recorded "confined by bubblewrap",
    its harness failed with ``bwrap: Creating new namespace failed``, and it exited 3
    instead of refusing with exit 5 before anything ran. Measured in a user namespace of
    the test's own, whose limit is its own to set (the host's is untouched)."""
    env = {**os.environ, BWRAP_ENV: ""}
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", sys.executable, "-c", PROBE_REFUSED],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    if proc.returncode != 0 and "unshare" in proc.stderr:
        pytest.skip(f"no user namespace for the test here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("REFUSED"), proc.stdout
    assert "namespace" in proc.stdout


@pytest.mark.skipif(
    not any(os.access(p, os.X_OK) for p in SYSTEM_BWRAP), reason="no system bwrap here"
)
def test_the_trial_sandbox_runs_no_true_planted_early_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trial sandbox (``--ro-bind / /``: every file of the host in view) ran ``true`` as
    found on ``PATH``: a ``true`` an upstream planted in ``~/.local/bin`` (a ``rw`` root
    over the home) ran there at the next run's start, read what it liked (here a key file
    only its owner may read) and put it in the refusal every strict run printed — or
    refused every strict run. The system's ``true`` runs instead."""
    key = tmp_path / "signing.key"
    key.write_text("PLANTED-evidence-signing-key-0c4f\n")
    key.chmod(0o600)
    planted = tmp_path / "bin"
    planted.mkdir()
    fake = planted / "true"
    fake.write_text(f'#!/bin/sh\ncat "{key}" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.delenv(BWRAP_ENV, raising=False)
    monkeypatch.setenv("PATH", f"{planted}{os.pathsep}{os.environ.get('PATH', '')}")
    _probe.cache_clear()
    try:
        mechanism = find_bubblewrap()
    except ConfinementUnavailable as exc:
        raise AssertionError(f"the planted true ran in the trial sandbox: {exc}") from None
    finally:
        _probe.cache_clear()
    assert mechanism.name == "bubblewrap"
