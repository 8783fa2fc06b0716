"""Which ``bwrap`` a strict run trusts: the system's, before anything found on ``PATH``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sharedos.confine.detect import BWRAP_ENV, SYSTEM_BWRAP, find_bubblewrap

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
