"""Text shown on an operator's terminal: control characters escaped.

What an upstream or a harness sends (a server name, an error message, a
stderr line) may hold ANSI escapes, carriage returns or other control
characters that would move the cursor, rewrite earlier lines or retitle the
window. Everything SharedOS prints from them goes through ``printable``.
"""

from __future__ import annotations

#: control characters (C0 but tab, DEL, C1) -> their ``\\xNN`` spelling
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0A, 0x20), *range(0x7F, 0xA0))}


def printable(line: str) -> str:
    """``line`` with control characters (ANSI escapes, carriage returns ...) shown as ``\\xNN``."""
    return line.translate(_CONTROL)
