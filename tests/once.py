"""Work a session does once, whichever pytest-xdist worker asks for it first.

``make test`` runs the suite on several workers, each with its own session-scoped
fixtures: a fixture that runs every harness CLI would run once per worker. ``once``
runs ``build`` under a file lock in a directory the session's workers share, keeps its
JSON result beside the lock, and hands that to every later caller (a failure too: the
others fail with its message instead of running it again).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of this test session that all of its xdist workers see."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's, above each worker's own
    return base


def once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Any]) -> Any:
    """``build(workdir)``'s JSON result, computed by the first caller of this session."""
    base = session_dir(tmp_path_factory)
    saved, failed = base / f"{name}.json", base / f"{name}.failed"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if failed.exists():
            raise AssertionError(failed.read_text(encoding="utf-8"))
        if saved.exists():
            return json.loads(saved.read_text(encoding="utf-8"))
        work = base / f"{name}-work"
        work.mkdir(exist_ok=True)
        try:
            result = build(work)
        except BaseException as exc:
            failed.write_text(f"{name} failed in another worker: {exc}", encoding="utf-8")
            raise
        saved.write_text(json.dumps(result), encoding="utf-8")
        return result
