"""Carrying any tool-name string over a wire whose name rule is ``[A-Za-z0-9_-]``.

OpenAI Responses (``^[a-zA-Z0-9_-]+$``) and Anthropic Messages
(``^[a-zA-Z0-9_-]{1,128}$`` on tool definitions) cannot carry a dot, a space or
a non-ASCII character. Published names only need the dot, and
``sharedos.names.portable_tool_name`` maps them. But a conformance row must be
able to *attempt* a malformed name (``files read``, ``files․read``) and have
the exact raw string reach the kernel, so this module extends the same escape
scheme to every string:

    "_"               -> "__"
    "."               -> "_d"
    any other char c  -> "_u" + 6 lower-case hex digits of ord(c)
                         (anything outside [A-Za-z0-9-])

For every ``ToolNameSchema``-legal name the result equals
``portable_tool_name(name)``. The mapping is injective and ``raw_from_wire``
inverts it exactly; a wire name that is not a valid escape (a model guessing
``files_read``) is not decodable and is passed to the kernel unchanged, where
it is refused as ``tool_unavailable`` and recorded.
"""

from __future__ import annotations

import re

_PLAIN = re.compile(r"[A-Za-z0-9-]")
WIRE_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")


def wire_name(raw: str) -> str:
    """Escape any non-empty string into ``[A-Za-z0-9_-]+``, injectively."""
    if raw == "":
        raise ValueError("an empty tool name cannot be put on a wire")
    out: list[str] = []
    for ch in raw:
        if ch == "_":
            out.append("__")
        elif ch == ".":
            out.append("_d")
        elif _PLAIN.fullmatch(ch):
            out.append(ch)
        else:
            out.append(f"_u{ord(ch):06x}")
    return "".join(out)


def raw_from_wire(name: str) -> str | None:
    """Invert ``wire_name``; ``None`` when ``name`` is not something ``wire_name`` produces."""
    if not name or not WIRE_NAME_RE.fullmatch(name):
        return None
    out: list[str] = []
    i = 0
    n = len(name)
    while i < n:
        ch = name[i]
        if ch != "_":
            out.append(ch)
            i += 1
            continue
        nxt = name[i + 1] if i + 1 < n else ""
        if nxt == "_":
            out.append("_")
            i += 2
        elif nxt == "d":
            out.append(".")
            i += 2
        elif nxt == "u":
            digits = name[i + 2 : i + 8]
            if len(digits) != 6 or not re.fullmatch(r"[0-9a-f]{6}", digits):
                return None
            code = int(digits, 16)
            if code > 0x10FFFF:
                return None
            decoded = chr(code)
            # a plain character written as an escape is not canonical: refuse it,
            # so that each raw string has exactly one wire form
            if decoded in "_." or _PLAIN.fullmatch(decoded):
                return None
            out.append(decoded)
            i += 8
        else:
            return None
    return "".join(out)


def name_for_kernel(name: str) -> str:
    """The raw tool string to put on the ``ToolCall`` for a wire name: decoded if it is a
    valid escape, else exactly as received (never narrowed, never dropped)."""
    decoded = raw_from_wire(name)
    return name if decoded is None else decoded
