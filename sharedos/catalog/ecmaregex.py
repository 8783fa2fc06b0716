"""Is a schema regex one ECMA-262 compiles (``new RegExp(pattern, "u")``)?

JSON Schema's regex dialect is ECMA-262's. SharedOS matches schema regexes
with RE2 (``schemaregex``), whose syntax is wider: inline flags ``(?i)``,
``(?P<name>…)``, escapes of any punctuation (``\\@``, ``\\#``), POSIX classes
``[[:alpha:]]``, a brace that is no quantifier (``a{,3}``), ``[]a]``. MCP's
TypeScript SDK, which the harnesses' clients are built on, compiles every
listed tool's outputSchema with Ajv, in Unicode mode, when it lists the tools:
one such regex threw, and the client refused the bridge's whole ``tools/list``
(the harness saw no tool of the turn at all). ``ecma_problem`` says why a
pattern is not ECMA-262 syntax in Unicode mode, reading it as that grammar
does; a pattern RE2 also compiles and this accepts is read the same way by both.
"""

from __future__ import annotations

import re

#: characters ECMA-262 lets an escape name as themselves in Unicode mode (and ``-`` in a class)
_SYNTAX = frozenset("^$\\.*+?()[]{}|/")
_SINGLE = frozenset("dDsSwWfnrtv")
_CLASS_ESCAPES = frozenset("dDsSwWpP")
#: General_Category values (short names) and ``Any``: what ``\p{…}`` means to RE2 and to ECMA-262
_PROPERTIES = frozenset(
    [
        "L",
        "Lu",
        "Ll",
        "Lt",
        "Lm",
        "Lo",
        "M",
        "Mn",
        "Mc",
        "Me",
        "N",
        "Nd",
        "Nl",
        "No",
        "P",
        "Pc",
        "Pd",
        "Ps",
        "Pe",
        "Pi",
        "Pf",
        "Po",
        "S",
        "Sm",
        "Sc",
        "Sk",
        "So",
        "Z",
        "Zs",
        "Zl",
        "Zp",
        "C",
        "Cc",
        "Cf",
        "Cs",
        "Co",
        "Cn",
        "Any",
    ]
)
_QUANTIFIER = re.compile(r"\{[0-9]+(?:,[0-9]*)?\}", re.ASCII)
_GROUP_NAME = re.compile(r"\(\?<([A-Za-z_$][A-Za-z0-9_$]*)>", re.ASCII)
_HEX2 = re.compile(r"[0-9A-Fa-f]{2}")
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_HEX_BRACED = re.compile(r"\{([0-9A-Fa-f]+)\}")
_PROPERTY = re.compile(r"\{([A-Za-z_]+)\}")


class _NotEcma(Exception):
    pass


def ecma_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not ECMA-262 regex syntax in Unicode mode, or None."""
    try:
        _parse(pattern)
    except _NotEcma as exc:
        return str(exc)
    return None


def _parse(p: str) -> None:
    i, n = 0, len(p)
    repeatable = False  # whether a quantifier may follow (ECMA-262: "nothing to repeat")
    while i < n:
        c = p[i]
        if c == "\\":
            i, kind = _escape(p, i + 1, in_class=False)
            repeatable = kind != "assertion"
        elif c == "[":
            i = _class(p, i + 1)
            repeatable = True
        elif c == "(":
            if p.startswith("(?:", i):
                i += 3
            elif (m := _GROUP_NAME.match(p, i)) is not None:
                i = m.end()
            elif p.startswith("(?", i):
                raise _NotEcma(
                    f"{p[i : i + 4]!r} is a group ECMA-262 does not have (inline flags, "
                    "(?P<name>...))"
                )
            else:
                i += 1
            repeatable = False
        elif c in "*+?{":
            if c == "{":
                m = _QUANTIFIER.match(p, i)
                if m is None:
                    raise _NotEcma("a '{' that is no quantifier {n}, {n,} or {n,m}")
                i = m.end()
            else:
                i += 1
            if not repeatable:
                raise _NotEcma(f"a quantifier with nothing to repeat (at {i})")
            if i < n and p[i] == "?":
                i += 1
            repeatable = False
        elif c in "}]":
            raise _NotEcma(f"a lone {c!r}")
        else:
            i += 1
            repeatable = c not in "^$|"


def _escape(p: str, i: int, *, in_class: bool) -> tuple[int, str]:
    """Read the escape after a backslash at ``i``: (the index after it, its kind: "char",
    "class" for a set like ``\\d``, "assertion" for ``\\b``/``\\B`` outside a class)."""
    if i >= len(p):
        raise _NotEcma("a pattern ending in a backslash")
    c = p[i]
    if c in _SYNTAX or (in_class and c in "-b"):
        return i + 1, "char"
    if c in "bB":
        return i + 1, "assertion"
    if c in _SINGLE:
        return i + 1, "class" if c in _CLASS_ESCAPES else "char"
    if c == "0" and not (i + 1 < len(p) and p[i + 1].isdigit()):
        return i + 1, "char"
    if c == "c" and i + 1 < len(p) and p[i + 1].isascii() and p[i + 1].isalpha():
        return i + 2, "char"
    if c == "x" and _HEX2.match(p, i + 1):
        return i + 3, "char"
    if c == "u":
        if _HEX4.match(p, i + 1):
            return i + 5, "char"
        m = _HEX_BRACED.match(p, i + 1)
        if m is not None and int(m.group(1), 16) <= 0x10FFFF:
            return m.end(), "char"
    if c in "pP":
        m = _PROPERTY.match(p, i + 1)
        if m is not None and m.group(1) in _PROPERTIES:
            return m.end(), "class"
    shown = p[i - 1 : i + 2]
    raise _NotEcma(f"the escape {shown!r}... is not one ECMA-262 has in Unicode mode")


def _class(p: str, i: int) -> int:
    """Read a character class whose ``[`` is just before ``i``; the index after its ``]``."""
    n = len(p)
    if i < n and p[i] == "^":
        i += 1
    previous = ""  # the kind of the atom before, for ranges
    while i < n and p[i] != "]":
        if p[i] == "-" and previous and i + 1 < n and p[i + 1] != "]":
            i += 1
            if p[i] == "\\":
                i, kind = _escape(p, i + 1, in_class=True)
            else:
                i, kind = i + 1, "char"
            if "class" in (previous, kind):
                raise _NotEcma("a range in a character class with a class escape at one end")
            previous = ""
            continue
        if p[i] == "\\":
            i, previous = _escape(p, i + 1, in_class=True)
        else:
            i, previous = i + 1, "char"
    if i >= n:
        raise _NotEcma("a character class without its ']'")
    return i + 1
