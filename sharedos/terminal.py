"""Text shown on an operator's terminal: control characters escaped.

What an upstream or a harness sends (a server name, an error message, a
stderr line) may hold ANSI escapes, carriage returns or other control
characters that would move the cursor, rewrite earlier lines or retitle the
window. Everything SharedOS prints from them goes through ``printable``.
"""

from __future__ import annotations

import unicodedata

#: control characters (C0 but tab, DEL, C1) -> their ``\\xNN`` spelling
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0A, 0x20), *range(0x7F, 0xA0))}


def printable(line: str) -> str:
    """``line`` of free text (a harness's output, an upstream's stderr or message) for a
    terminal: spelled as ``unambiguous`` spells it — control characters (ANSI escapes,
    carriage returns ...) as ``\\xNN``, bidi overrides, zero-width and other invisible
    characters as ``\\uNNNN`` — except tabs, which are kept (they hide nothing, and a
    log's columns use them), and the joiners written language uses where a reader sees
    their effect (``_joins``: a ZWNJ inside a Persian word, a ZWJ inside an emoji
    sequence, U+FE0F after an emoji), so an answer in Persian or with ``\u26a0\ufe0f``
    still reads as written. Letters of every script are shown as themselves (an Arabic or
    Hebrew name right to left, as the terminal draws it: only explicit bidi controls,
    which reorder what follows them, are spelled)."""
    if line.isascii():
        return line.translate(_CONTROL)
    return _spelled_out(line, keep_tab=True)


def is_terminal(stream: object) -> bool:
    """True when ``stream`` is a terminal (a tty). What is the product of a command (a
    harness's answer, a CSV export) is written exactly into a pipe or a file, where a
    program reads it, and spelled on a terminal, where a person does."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (ValueError, OSError):  # a closed stream
        return False


def printable_text(text: str) -> str:
    """Free text of many lines (a harness's answer) for a terminal: each line spelled as
    ``printable`` spells it, the line breaks kept (a ``\\r\\n`` ending too: it is a line
    break, not a carriage return that rewrites the line), so a multi-line answer still
    reads as lines while nothing in it can move the cursor, retitle the window or reorder
    the line."""
    lines = text.split("\n")
    return "\n".join(
        printable(line[:-1] if line.endswith("\r") and i < len(lines) - 1 else line)
        for i, line in enumerate(lines)
    )


def _spelled(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


#: Unicode's Default_Ignorable_Code_Point characters that are not format characters (Cf):
#: a Hangul filler (Lo), variation selectors and the combining grapheme joiner (Mn), the
#: reserved ranges (Cn). A renderer shows them as nothing, so "notes\u3164.txt" reads as
#: "notes.txt" (DerivedCoreProperties.txt; the Cf ones are spelled by category)
_IGNORABLE_RANGES = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x2065, 0x2065),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0xE0000, 0xE0FFF),
)


def _ignorable(n: int) -> bool:
    return any(lo <= n <= hi for lo, hi in _IGNORABLE_RANGES)


def ignorable(c: str) -> bool:
    """True when ``c`` is a Default_Ignorable_Code_Point that is not a format character
    (Cf): a Hangul filler, a variation selector, the combining grapheme joiner, a
    reserved one. Shown as nothing, so ``"/secret\u034f/**"`` reads as ``/secret/**``."""
    return _ignorable(ord(c))


def _hidden(c: str) -> bool:
    """True when ``c`` is not shown as itself (what ``unambiguous`` and ``json_spelled``
    spell): a control, a format character, a line or paragraph separator, a lone
    surrogate, or a default-ignorable code point."""
    return unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs") or _ignorable(ord(c))


def unambiguous(text: str) -> str:
    """``text`` as a person must read it to judge it: every character that is not shown
    as itself — controls (C0, DEL, C1, tab), format characters (bidi overrides and
    isolates, zero-width marks: Unicode Cf), line and paragraph separators (Zl, Zp),
    lone surrogates and the other characters Unicode has rendered as nothing
    (Default_Ignorable_Code_Point: a Hangul filler, a variation selector) — spelled
    ``\\xNN`` / ``\\uNNNN``, so text cannot reorder, hide or break the lines around it
    (what an approver reads is what will run)."""
    if text.isascii() and text.isprintable():
        return text
    return _spelled_out(text, keep_tab=False)


def _spelled_out(text: str, *, keep_tab: bool) -> str:
    """``text`` with what ``unambiguous`` spells spelled; ``keep_tab`` (free text, as
    ``printable`` shows it) keeps tabs and the joiners of written language (``_joins``)."""
    out = []
    for i, c in enumerate(text):
        if c == "\t" and keep_tab:
            out.append(c)
        elif _hidden(c):
            out.append(c if keep_tab and _joins(text, i) else _spelled(c))
        else:
            out.append(c)
    return "".join(out)


#: zero-width non-joiner and joiner; text and emoji presentation selectors
_ZWNJ, _ZWJ, _VS15, _VS16 = "\u200c", "\u200d", "\ufe0e", "\ufe0f"


def _joins(text: str, i: int) -> bool:
    """True when ``text[i]`` is a joiner that free text uses and a reader sees the effect
    of: a ZWNJ or ZWJ between two non-ASCII letters, marks or symbols (a Persian word,
    ``\u0645\u06cc\u200c\u062e``; an emoji sequence, a family ``\U0001f468\u200d\U0001f469``),
    or a presentation selector after a non-ASCII symbol (``\u26a0\ufe0f``) or a keycap's
    digit. Anywhere else (at an end, beside ASCII or a space, doubled) it shows nothing,
    and is spelled. ``unambiguous`` (names, paths, ids judged one against another) keeps
    none: there ``a\u200cb`` and ``ab`` must read differently."""
    c = text[i]
    before = text[i - 1] if i > 0 else ""
    after = text[i + 1] if i + 1 < len(text) else ""

    def written(x: str) -> bool:
        return bool(x) and not x.isascii() and unicodedata.category(x)[0] in "LMS"

    if c in (_ZWNJ, _ZWJ):
        return written(before) and written(after)
    if c in (_VS15, _VS16):
        symbol = written(before) and unicodedata.category(before)[0] == "S"
        return symbol or (before in "#*0123456789" and bool(before) and after == "\u20e3")
    return False


def json_spelled(text: str) -> str:
    """JSON text ``text`` with every character ``unambiguous`` spells (C1 controls, DEL,
    bidi overrides, zero-width and other invisible characters, line separators) written
    as its ``\\\\uNNNN`` escape: the same JSON value, exactly, but one a terminal shows as
    it is (JSON itself escapes only C0; ``ensure_ascii=False`` leaves a C1 CSI or a U+202E
    raw). They can only stand inside strings, where an escape means the same."""
    if text.isascii() and "\x7f" not in text:
        return text
    out = []
    for c in text:
        n = ord(c)
        if n >= 0x7F and _hidden(c):
            if n < 0x10000:
                out.append(f"\\u{n:04x}")
            else:  # JSON spells an astral character as its UTF-16 surrogate pair
                n -= 0x10000
                out.append(f"\\u{0xD800 + (n >> 10):04x}\\u{0xDC00 + (n & 0x3FF):04x}")
        else:
            out.append(c)
    return "".join(out)
