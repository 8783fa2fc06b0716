"""Literal text of the language: strings, numbers, resource templates (shared by both parse paths).

Both the Lark path (``parser.AstBuilder``) and the one-line fast path
(``fastpath``) decode literals here, so the two cannot disagree about what a
literal means. Problems raise ``SyntaxProblem`` with a position; the parser
turns it into a diagnostic, the fast path into "let Lark decide".
"""

from __future__ import annotations

import re
from decimal import Decimal

from sharedos.errors import PolicyLanguageError
from sharedos.policy import ast

_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "/": "/"}
_HEX4_RE = re.compile(r"[0-9A-Fa-f]{4}")
_HEX8_RE = re.compile(r"[0-9A-Fa-f]{8}")
_INT_RE = re.compile(r"-?(?:0|[1-9][0-9]*)")
_HOLE_RE = re.compile(r"\{([^{}]*)\}")
_DOTTED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")


class SyntaxProblem(PolicyLanguageError):
    """A construct the grammar accepts but whose content is malformed (bad escape, bad hole...)."""

    def __init__(
        self, code: str, message: str, line: int, col: int, end_col: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.line = line
        self.col = col
        self.end_col = end_col


def decode_string(token: str, line: int, col: int) -> str:
    """The value of a STRING token written at ``line``:``col`` (quotes included)."""
    raw = token[1:-1]
    if "\\" not in raw:
        return raw
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = raw[i + 1] if i + 1 < len(raw) else ""
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt == "u" and _HEX4_RE.fullmatch(raw, i + 2, i + 6):
            code, width = int(raw[i + 2 : i + 6], 16), 6
            low = _low_surrogate(raw, i + 6) if 0xD800 <= code <= 0xDBFF else None
            if low is not None:  # a UTF-16 pair, as JSON writes one character
                code, width = 0x10000 + ((code - 0xD800) << 10) + low, 12
            if 0xD800 <= code <= 0xDFFF:
                raise _lone_surrogate(raw[i : i + width], line, col + 1 + i)
            out.append(chr(code))
            i += width
        elif (
            nxt == "U"
            and _HEX8_RE.fullmatch(raw, i + 2, i + 10)
            and int(raw[i + 2 : i + 10], 16) <= 0x10FFFF
        ):
            code = int(raw[i + 2 : i + 10], 16)
            if 0xD800 <= code <= 0xDFFF:
                raise _lone_surrogate(raw[i : i + 10], line, col + 1 + i)
            out.append(chr(code))
            i += 10
        else:
            at = col + 1 + i
            raise SyntaxProblem(
                "SOS104", f"invalid escape sequence '\\{nxt}' in string literal", line, at, at + 2
            )
    return "".join(out)


def _low_surrogate(raw: str, i: int) -> int | None:
    """The offset of the low surrogate escaped at ``raw[i:]`` (``\\uDC00``-``\\uDFFF``), or None."""
    if raw.startswith("\\u", i) and _HEX4_RE.fullmatch(raw, i + 2, i + 6):
        code = int(raw[i + 2 : i + 6], 16)
        if 0xDC00 <= code <= 0xDFFF:
            return code - 0xDC00
    return None


def _lone_surrogate(escape: str, line: int, at: int) -> SyntaxProblem:
    # A lone surrogate is not a character: JSON reads the pair "\ud83d\ude00" as
    # the one character U+1F600, and no request, path or name holds a lone one, so
    # a literal holding one would never equal what it was written for (a forbid on
    # it would never apply).
    return SyntaxProblem(
        "SOS104",
        f"escape '{escape}' is a lone surrogate, not a character; write the character as"
        " one escape (\\U0001f600) or as a UTF-16 pair (\\ud83d\\ude00)",
        line,
        at,
        at + len(escape),
    )


#: Numbers are bounded: integers to 64 bits, and no literal may overflow a float.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
_MAX_DIGITS = 19


def number_value(text: str, line: int, col: int) -> int | float:
    """The value of a number literal written at ``line``:``col``: an int when it has no
    fraction or exponent; raise ``SyntaxProblem`` (SOS105) when it is out of range."""
    if _INT_RE.fullmatch(text):
        digits = len(text.lstrip("-"))
        value = int(text) if digits <= _MAX_DIGITS + 1 else None
        if value is not None and INT_MIN <= value <= INT_MAX:
            return value
        raise SyntaxProblem(
            "SOS105",
            f"integer {_shown(text)} is out of range (integers are 64-bit: {INT_MIN} to {INT_MAX})",
            line,
            col,
            col + len(text),
        )
    value_f = float(text)
    if value_f in (float("inf"), float("-inf")):
        raise SyntaxProblem(
            "SOS105",
            f"number {_shown(text)} is out of range (it overflows a 64-bit float)",
            line,
            col,
            col + len(text),
        )
    if value_f.is_integer() and INT_MIN <= value_f <= INT_MAX:
        # A whole float other than the number written, where an integer literal could
        # have said it: an integer argument compares with what it reads as
        # (9007199254740993.0 is 9007199254740992.0, so a forbid ``== 9007199254740993.0``
        # would never meet the integer 9007199254740993), not with what the operator reads.
        written = Decimal(text)
        if written != Decimal(value_f):
            exact = (
                f"the integer {int(written)}"
                if written == written.to_integral_value()
                else "an integer"
            )
            raise SyntaxProblem(
                "SOS105",
                f"number {_shown(text)} is not exactly a 64-bit float: it reads as"
                f" {int(value_f)}.0; write {exact} (integers are exact to 64 bits)",
                line,
                col,
                col + len(text),
            )
    return value_f


def _shown(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:10]}...{text[-6:]} ({len(text)} characters)"


def template_parts(raw: str, file: str, line: int, base_col: int) -> tuple[str | ast.Ref, ...]:
    """A resource template's literal text and ``{args.x}`` holes, in order.

    ``raw`` is the decoded string, whose first character is at ``base_col``.
    """
    parts: list[str | ast.Ref] = []
    pos = 0
    for m in _HOLE_RE.finditer(raw):
        if m.start() > pos:
            parts.append(raw[pos : m.start()])
        inner = m.group(1).strip()
        col = base_col + m.start()
        if not _DOTTED_RE.match(inner):
            raise SyntaxProblem(
                "SOS208",
                f"template hole {{{m.group(1)}}} is not a reference such as {{args.name}}",
                line,
                col,
                col + len(m.group(0)),
            )
        root, *rest = inner.split(".")
        parts.append(
            ast.Ref(root, tuple(rest), ast.Span(file, line, col, line, col + len(m.group(0))))
        )
        pos = m.end()
    if pos < len(raw):
        parts.append(raw[pos:])
    for part in parts:
        if isinstance(part, str) and ("{" in part or "}" in part):
            raise SyntaxProblem(
                "SOS208",
                "unbalanced '{' or '}' in resource template",
                line,
                base_col,
                base_col + len(raw),
            )
    return tuple(parts)
