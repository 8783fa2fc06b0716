"""Where each key of a TOML document is written: the one locator of every config error.

Every configuration problem SharedOS reports in a TOML file — the host file,
its ``[upstream.<id>]`` tables, the conformance manifest — is placed at
``file:line:col`` by this module. ``tomllib`` parses without positions; this
scanner reads the same text line by line for table headers (``[a."b"]``,
arrays of tables ``[[rows]]``, whose elements are numbered from 0 as the parsed
document numbers them), ``key = value`` lines (dotted keys included) and the
keys of one-line inline tables. It never fails: a line it cannot read simply
has no position, and ``locate`` falls back to the nearest enclosing key that
has one (1:1 when none does). ``decode_error_position`` reads the position a
``tomllib.TOMLDecodeError`` states.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "Position",
    "decode_error_position",
    "key_positions",
    "locate",
    "locate_in",
    "split_key",
    "value_message",
]

#: (line, column), both 1-based
Position = tuple[int, int]

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r'"(?:[^"\\]|\\.)*"|\'[^\']*\''
_KEY = rf"(?:{_BARE}|{_QUOTED})"
_DOTTED = rf"{_KEY}(?:[ \t]*\.[ \t]*{_KEY})*"
_HEADER = re.compile(rf"^[ \t]*(\[\[?)[ \t]*({_DOTTED})[ \t]*\]\]?")
_ASSIGN = re.compile(rf"^([ \t]*)({_DOTTED})[ \t]*=")
_INLINE_KEY = re.compile(rf"(?:^|[{{,])[ \t]*({_DOTTED})[ \t]*=")
_DECODE_AT = re.compile(r"\(at line (\d+), column (\d+)\)")


def split_key(dotted: str) -> tuple[str, ...]:
    """``a."b.c".d`` → ``("a", "b.c", "d")``."""
    parts = re.findall(rf"{_BARE}|{_QUOTED}", dotted)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


def _indexed(path: tuple[str, ...], arrays: dict[tuple[str, ...], int]) -> tuple[str, ...]:
    """``path`` with the current element number after every array of tables in it."""
    out: list[str] = []
    for part in path:
        out.append(part)
        key = tuple(out)
        if key in arrays:
            out.append(str(arrays[key]))
    return tuple(out)


def key_positions(text: str) -> dict[tuple[str, ...], Position]:
    """Every key path the scanner can place, with the line and column of its first
    character (an array element's number is a path part: ``("rows", "3", "id")``)."""
    found: dict[tuple[str, ...], Position] = {}
    table: tuple[str, ...] = ()
    #: array of tables (as written, unnumbered) -> its current element's number
    arrays: dict[tuple[str, ...], int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            written = split_key(header.group(2))
            if header.group(1) == "[[":
                parent = _indexed(written[:-1], arrays)
                # numbering restarts under each new element of an enclosing array
                key = (*parent, written[-1])
                arrays[key] = arrays[key] + 1 if key in arrays else 0
                table = (*key, str(arrays[key]))
                found.setdefault(key, (lineno, line.index("[") + 1))
            else:
                table = _indexed(written, arrays)
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
    """The position of ``loc`` (keys and array indexes, as a validator reports them), or
    of its longest prefix that has one (1:1 when none)."""
    path = tuple(str(p) for p in loc)
    for end in range(len(path), 0, -1):
        if path[:end] in positions:
            return positions[path[:end]]
    return 1, 1


def locate_in(text: str, loc: Sequence[object]) -> Position:
    """``locate`` over ``key_positions(text)`` (for one lookup; scan once for many)."""
    return locate(key_positions(text), loc)


def decode_error_position(message: str) -> Position | None:
    """The (line, column) a ``tomllib.TOMLDecodeError`` message states, or None."""
    m = _DECODE_AT.search(message)
    return (int(m.group(1)), int(m.group(2))) if m else None


#: pydantic's words for a value of the wrong TOML type, in the file's terms
_TYPE_WORDS = {
    "tuple_type": 'must be a list (a TOML array: ["…", "…"])',
    "list_type": 'must be a list (a TOML array: ["…", "…"])',
    "set_type": 'must be a list (a TOML array: ["…", "…"])',
    "frozen_set_type": 'must be a list (a TOML array: ["…", "…"])',
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "string_type": 'must be a string ("…")',
}


def value_message(error: object) -> str:
    """What a pydantic validation error (one of ``ValidationError.errors()``) says of a
    value read from a TOML file: a value of the wrong type in TOML's terms (``must be a
    list (a TOML array …)``, not the model's ``Input should be a valid tuple``), anything
    else as pydantic words it, without its ``Value error, `` prefix."""
    kind = error.get("type") if isinstance(error, dict) else None
    if isinstance(kind, str) and kind in _TYPE_WORDS:
        return _TYPE_WORDS[kind]
    message = error.get("msg", "") if isinstance(error, dict) else ""
    return str(message).removeprefix("Value error, ")
