"""Locate files SharedOS ships: the grammar, the rules and the run policies.

An installed wheel carries them under ``sharedos/_shipped/``; a checkout has
them at the top of the repository. Both are looked up, the wheel copy first.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def shipped_dir(name: str) -> Path:
    """Directory of shipped ``grammar``, ``rules`` or ``policy`` files; raise if absent."""
    for candidate in (_PACKAGE_DIR / "_shipped" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"shipped directory {name!r} not found (broken install?)")


def grammar_path() -> Path:
    """Path of the policy language's Lark grammar."""
    return shipped_dir("grammar") / "sharedos.lark"
