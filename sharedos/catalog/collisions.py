"""Catalogue-level name collisions: detected and reported, never resolved silently.

Two canonical names can become one name on the way to a model:

* the lossy ``[^A-Za-z0-9_-] -> _`` sanitization Claude Code, Codex and Pi apply
  to build their aliases (``files.read`` and ``files_read`` both become
  ``files_read``; Claude Code then silently drops one of them), and Codex's and
  Pi's, which also turn ``-`` into ``_`` (``a.b-c`` and ``a.b_c``: both offered
  as ``a_b_c`` plus a hash suffix, which the model cannot tell apart);
* the portable escape mapping (injective by construction, so a collision there
  means a bug; it is still checked, because "cannot happen" is what a check is for).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sharedos.errors import CatalogError
from sharedos.names import find_sanitization_collisions, portable_tool_name


@dataclass(frozen=True, slots=True)
class NameCollision:
    """Canonical ``names`` that all map to ``mapped`` under ``scheme``."""

    scheme: str  # "harness_sanitized" | "portable"
    mapped: str
    names: tuple[str, ...]

    def describe(self) -> str:
        """One sentence for an operator."""
        listed = ", ".join(repr(n) for n in self.names)
        if self.scheme == "harness_sanitized":
            return (
                f"tools {listed} all become {self.mapped!r} after the harness alias sanitization "
                "[^A-Za-z0-9_] -> _ (Claude Code silently drops all but one of [^A-Za-z0-9_-] "
                "twins; Codex and Pi also turn '-' into '_' and append hash suffixes the model "
                "cannot tell apart); rename one of them"
            )
        return f"tools {listed} share the portable name {self.mapped!r}; rename one of them"


class ToolNameCollisionError(CatalogError, ValueError):
    """A catalogue whose names collide under a mapping a harness or transport applies."""

    def __init__(self, collisions: Iterable[NameCollision]) -> None:
        self.collisions = tuple(collisions)
        super().__init__("; ".join(c.describe() for c in self.collisions))


def find_name_collisions(names: Iterable[str]) -> list[NameCollision]:
    """Every collision among ``names`` under the harness sanitization and the portable mapping."""
    unique = sorted(set(names))
    found = [
        NameCollision("harness_sanitized", mapped, tuple(group))
        for mapped, group in sorted(find_sanitization_collisions(unique).items())
    ]
    portable: dict[str, list[str]] = {}
    for name in unique:
        portable.setdefault(portable_tool_name(name), []).append(name)
    found.extend(
        NameCollision("portable", mapped, tuple(group))
        for mapped, group in sorted(portable.items())
        if len(group) > 1
    )
    return found


def check_name_collisions(names: Iterable[str]) -> None:
    """Raise ``ToolNameCollisionError`` if ``names`` collide under any mapping."""
    found = find_name_collisions(names)
    if found:
        raise ToolNameCollisionError(found)
