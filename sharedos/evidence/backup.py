"""``copy_sqlite_store``: a consistent copy of a SQLite evidence file (what ``make demo`` keeps).

SQLite's online backup API copies a live WAL database page by page into a
consistent snapshot; the copy is written beside the target and renamed into
place, mode 0600 (evidence holds every turn's arguments).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import urllib.parse
from pathlib import Path

from sharedos.evidence.store import EvidenceStoreError

__all__ = ["copy_sqlite_store", "keep_evidence"]


def copy_sqlite_store(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Copy the evidence database ``source`` to ``target`` (replaced atomically); return ``target``."""
    dest = Path(target)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".evidence-", suffix=".sqlite", dir=dest.parent)
    os.close(fd)
    os.chmod(tmp, 0o600)
    try:
        # quoted: a '%', '#' or '?' in the path is a character of the name, not of the URI
        # (unquoted, 'd%41' opened 'dA', another store's file, and 'd?x' created 'd')
        uri = f"file:{urllib.parse.quote(os.path.abspath(source))}?mode=ro"
        src = sqlite3.connect(uri, uri=True)
        try:
            out = sqlite3.connect(tmp)
            try:
                src.backup(out)
                out.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            finally:
                out.close()
        finally:
            src.close()
        os.replace(tmp, dest)
    except (sqlite3.Error, OSError) as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise EvidenceStoreError(f"cannot copy evidence {source} to {dest}: {exc}", "io") from None
    return dest


def keep_evidence(workdir: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> Path | None:
    """Copy the evidence store a run left under ``workdir`` to ``out_dir/evidence.sqlite``.

    The first ``evidence.sqlite`` found (in path order) is kept; None when the
    run left none.
    """
    found = sorted(Path(workdir).rglob("evidence.sqlite"))
    if not found:
        return None
    return copy_sqlite_store(found[0], Path(out_dir) / "evidence.sqlite")
