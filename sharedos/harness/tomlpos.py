"""Where each key of a TOML document is written: ``(key path) -> (line, column)``, 1-based.

``tomllib`` parses without positions; this scanner reads the same text line by
line for table headers (``[a."b"]``, ``[[a]]``), ``key = value`` lines (dotted
keys included) and the keys of one-line inline tables, so that every problem
found in a validated document can be reported at its own key. It never fails:
a line it cannot read simply has no position, and the caller falls back to the
nearest enclosing key that has one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

Position = tuple[int, int]

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"|\'[^\']*\''
_KEY = rf"(?:{_BARE}|{_QUOTED})"
_DOTTED = rf"{_KEY}(?:[ \t]*\.[ \t]*{_KEY})*"
_HEADER = re.compile(rf"^[ \t]*\[\[?[ \t]*({_DOTTED})[ \t]*\]\]?")
_ASSIGN = re.compile(rf"^([ \t]*)({_DOTTED})[ \t]*=")
_INLINE_KEY = re.compile(rf"(?:^|[{{,])[ \t]*({_DOTTED})[ \t]*=")


def split_key(dotted: str) -> tuple[str, ...]:
    """``a."b.c".d`` → ``("a", "b.c", "d")``."""
    parts = re.findall(rf"{_BARE}|{_QUOTED}", dotted)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


def key_positions(text: str) -> dict[tuple[str, ...], Position]:
    """Every key path the scanner can place, with the line and column of its first character."""
    found: dict[tuple[str, ...], Position] = {}
    table: tuple[str, ...] = ()
    for lineno, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            table = split_key(header.group(1))
            found.setdefault(table, (lineno, line.index("[") + 1))
            continue
        assign = _ASSIGN.match(line)
        if not assign:
            continue
        path = (*table, *split_key(assign.group(2)))
        found.setdefault(path, (lineno, assign.start(2) + 1))
        rest_at = assign.end()
        rest = line[rest_at:]
        brace = rest.lstrip()
        if brace.startswith("{"):
            offset = rest_at + (len(rest) - len(brace))
            for inner in _INLINE_KEY.finditer(brace):
                found.setdefault(
                    (*path, *split_key(inner.group(1))), (lineno, offset + inner.start(1) + 1)
                )
    return found


def locate(positions: dict[tuple[str, ...], Position], loc: Sequence[object]) -> Position:
    """The position of ``loc``, or of its longest prefix that has one (1:1 when none)."""
    path = tuple(str(p) for p in loc)
    for end in range(len(path), 0, -1):
        if path[:end] in positions:
            return positions[path[:end]]
    return 1, 1
