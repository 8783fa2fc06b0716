"""A read-only, trusted compile cache for pi-mcp-adapter in the harness sandbox.

Pi loads pi-mcp-adapter's TypeScript through jiti, which keeps what it
compiled in ``$TMPDIR/jiti`` (``/tmp/jiti`` when ``TMPDIR`` is unset). In the
sandbox ``TMPDIR`` is the turn's own, so every confined turn would compile the
adapter again (measured: the pi-adapter column took 41-47 s against 14-15 s
for Pi's built-in client). A cache shared *writable* between turns would be a
channel from one turn (and one user) to the next — a turn could leave
compiled code the next one runs — so it is never that: SharedOS fills one
cache per tools installation in a warm-up run of Pi with the adapter, the
scripted model and no plan (nothing a model chose runs), and copies it into
each turn's own ``$TMPDIR/jiti`` (a copy, not a read-only bind: measured, jiti
turns its cache off altogether when the directory is not writable). What a
turn writes there dies with the turn.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from sharedos.confine import canonical
from sharedos.harness.paths import tools_dir


def jiti_cache_dir() -> Path:
    """Where the warm cache of this tools installation lives (it may not exist yet)."""
    return Path(canonical(tools_dir())).parent / "sharedos-jiti"


def adopt(warmed: Path, target: Path) -> bool:
    """Move a warm-up's ``jiti`` directory into place (first one wins); True when it is there."""
    if target.is_dir():
        return True
    if not warmed.is_dir() or not any(warmed.iterdir()):
        return False
    staging = Path(tempfile.mkdtemp(prefix=".jiti-", dir=target.parent))
    try:
        shutil.copytree(warmed, staging / "jiti")
        with contextlib.suppress(OSError):  # another warm-up got there first
            os.rename(staging / "jiti", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target.is_dir()
