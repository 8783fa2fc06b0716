"""Resource patterns: parsing, matching, and the set reasoning partial evaluation needs.

A pattern is a glob over a canonical resource, ``/`` separated. A segment is a
literal, ``*`` (exactly one segment), ``**`` (any number of segments, zero
included), or a mix of text, ``*`` wildcards (any characters but ``/``) and
``{context.x}`` interpolations. An interpolated value is inserted literally
and is *unsafe* when it is not a string (or integer), is empty, ``.`` or
``..``, or contains ``/``, ``*``, NUL or a control character: an unsafe value
never widens a match (see ``Resolved``).

Encoded (JSON-ready) form, used in bundles: ``{"abs": bool, "segs": [seg...]}``
where seg is ``["L", text]``, ``["S"]``, ``["D"]`` or ``["G", [piece...]]`` and
piece is ``["t", text]``, ``["w"]`` or ``["c", [name...]]`` (a context path).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sharedos.errors import PolicyLanguageError
from sharedos.policy.text import is_nfc

_UNSAFE_RE = re.compile(r"[/*\x00-\x1f\x7f-\x9f]")
_REF_RE = re.compile(r"^context(?:\.[A-Za-z_][A-Za-z0-9_]*)+$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")

Seg = list[Any]


class PatternSyntaxError(PolicyLanguageError, ValueError):
    """A pattern that cannot be compiled; ``offset`` is the character index in the pattern."""

    def __init__(self, message: str, offset: int, length: int = 1) -> None:
        super().__init__(message)
        self.offset = offset
        self.length = length


#: The most segments a pattern may have. The decision walk nests one level per
#: literal segment, and a program deeper than Python's recursion limit could be
#: neither hashed nor written as a bundle (nor loaded), so a compiled policy with
#: a pattern of some 500 segments had no bundle_hash to record.
MAX_PATTERN_SEGMENTS = 256


def parse_pattern(raw: str) -> dict[str, Any]:
    """Parse a pattern into its encoded form, or raise ``PatternSyntaxError``."""
    if raw == "":
        raise PatternSyntaxError("empty pattern", 0)
    m = _CONTROL_RE.search(raw)
    if m:
        raise PatternSyntaxError("pattern contains a control character", m.start())
    if not is_nfc(raw):
        # Resources are NFC: a literal in another form would never match (a forbid
        # written in NFD would be bypassed by every call).
        at = next(
            i for i in range(len(raw)) if not is_nfc(raw[i : i + 2]) or not is_nfc(raw[: i + 1])
        )
        raise PatternSyntaxError(
            "pattern is not in Unicode normalization form C (NFC), which every resource is: "
            f"write {unicodedata.normalize('NFC', raw)!r}",
            at,
        )
    absolute = raw.startswith("/")
    body = raw[1:] if absolute else raw
    if absolute and body == "":
        return {"abs": True, "segs": []}
    segs: list[Seg] = []
    offset = 1 if absolute else 0
    for text in body.split("/"):
        if len(segs) == MAX_PATTERN_SEGMENTS:
            raise PatternSyntaxError(
                f"pattern has more than {MAX_PATTERN_SEGMENTS} segments", offset, len(text)
            )
        segs.append(_parse_segment(text, offset))
        offset += len(text) + 1
    return {"abs": absolute, "segs": segs}


def _parse_segment(text: str, offset: int) -> Seg:
    if text == "":
        raise PatternSyntaxError("empty segment ('//' or a trailing '/')", max(offset - 1, 0), 1)
    if text in (".", ".."):
        raise PatternSyntaxError(
            f"segment {text!r} never matches a canonical resource", offset, len(text)
        )
    if text == "*":
        return ["S"]
    if text == "**":
        return ["D"]
    if "*" not in text and "{" not in text and "}" not in text:
        return ["L", text]
    if "**" in text:
        raise PatternSyntaxError("'**' must be a whole segment", offset + text.index("**"), 2)
    pieces: list[list[Any]] = []
    i = 0
    buf = ""
    while i < len(text):
        ch = text[i]
        if ch == "*":
            if buf:
                pieces.append(["t", buf])
                buf = ""
            pieces.append(["w"])
            i += 1
        elif ch == "{":
            end = text.find("}", i)
            if end < 0:
                raise PatternSyntaxError("'{' without a closing '}'", offset + i, 1)
            inner = text[i + 1 : end].strip()
            if not _REF_RE.match(inner):
                raise PatternSyntaxError(
                    f"interpolation {{{text[i + 1 : end]}}} must be a context reference such as {{context.principal}}",
                    offset + i,
                    end - i + 1,
                )
            if buf:
                pieces.append(["t", buf])
                buf = ""
            pieces.append(["c", inner.split(".")[1:]])
            i = end + 1
        elif ch == "}":
            raise PatternSyntaxError("'}' without an opening '{'", offset + i, 1)
        else:
            buf += ch
            i += 1
    if buf:
        pieces.append(["t", buf])
    if all(p[0] == "t" for p in pieces):
        return ["L", "".join(p[1] for p in pieces)]
    return ["G", pieces]


def literal_prefix(pattern: Mapping[str, Any] | Resolved) -> list[str]:
    """The leading literal segments of an encoded or resolved pattern (the part the index walks)."""
    out: list[str] = []
    for seg in pattern.segs if isinstance(pattern, Resolved) else pattern["segs"]:
        if seg[0] != "L":
            break
        out.append(seg[1])
    return out


def is_context_dependent(enc: Mapping[str, Any]) -> bool:
    """True when the pattern interpolates context values."""
    return any(seg[0] == "G" and any(p[0] == "c" for p in seg[1]) for seg in enc["segs"])


# ------------------------------------------------------------- resolution


def lookup_context(context: Any, path: Sequence[str]) -> tuple[bool, Any]:
    """Walk ``context`` along ``path``; (False, None) when any step is missing."""
    value = context
    try:
        for name in path:
            if isinstance(value, Mapping) and name in value:
                value = value[name]
            else:
                return False, None
    except Exception:  # a hostile mapping: treat the value as missing (never widens)
        return False, None
    return True, value


def safe_value(value: Any) -> str | None:
    """An interpolated value as text when it is safe as (part of) one segment, else None."""
    if type(value) is int:
        try:
            value = str(value)
        except ValueError:  # more digits than Python converts: no segment spells it
            return None
    if type(value) is not str:
        return None
    if value in ("", ".", "..") or _UNSAFE_RE.search(value):
        return None
    if not is_nfc(value):  # a resource is NFC: this spelling could never meet one
        return None
    return value


@dataclass(frozen=True, slots=True)
class Resolved:
    """A pattern with its interpolations filled in for one context.

    A missing or unsafe interpolated value never widens what is permitted: in
    a permit the whole pattern matches nothing (``safe`` is False); in a
    forbid the segment holding it matches any segment (fails closed).
    """

    safe: bool
    absolute: bool
    segs: tuple[tuple[Any, ...], ...]  # ("L", text) | ("S",) | ("D",) | ("G", regex_source, pieces)


def resolve(enc: Mapping[str, Any], context: Any, *, forbid: bool = False) -> Resolved:
    """Fill in ``{context.x}`` holes; literal-only glob segments collapse to literals."""
    out: list[tuple[Any, ...]] = []
    for seg in enc["segs"]:
        kind = seg[0]
        if kind != "G":
            out.append(tuple(seg))
            continue
        pieces: list[tuple[str, str]] = []
        unsafe = False
        for piece in seg[1]:
            if piece[0] == "c":
                found, value = lookup_context(context, piece[1])
                text = safe_value(value) if found else None
                if text is None:
                    if not forbid:
                        return Resolved(False, bool(enc["abs"]), ())
                    unsafe = True
                    break
                pieces.append(("t", text))
            elif piece[0] == "t":
                pieces.append(("t", piece[1]))
            else:
                pieces.append(("w", ""))
        if unsafe:
            out.append(("S",))
        elif all(p[0] == "t" for p in pieces):
            out.append(("L", "".join(p[1] for p in pieces)))
        else:
            regex = "".join(re.escape(t) if k == "t" else "[^/]*" for k, t in pieces)
            out.append(("G", regex, tuple(pieces)))
    return Resolved(True, bool(enc["abs"]), tuple(out))


def resolved_text(resolved: Resolved) -> str:
    """A resolved pattern written back as a glob (``/home/carol/**``), for explanations."""
    out: list[str] = []
    for seg in resolved.segs:
        kind = seg[0]
        if kind == "L":
            out.append(seg[1])
        elif kind == "S":
            out.append("*")
        elif kind == "D":
            out.append("**")
        else:
            out.append("".join(t if k == "t" else "*" for k, t in seg[2]))
    body = "/".join(out)
    return ("/" + body) if resolved.absolute else body


def to_regex(resolved: Resolved) -> str:
    """Regex over the match key (see ``match_key``) for a safe resolved pattern.

    Promises linear-ish matching time on hostile resources (security: a 4 KiB
    path must not pin the CPU). A naive translation backtracks polynomially —
    ``/**/a/**/b/**/c/**/d`` against ``/a/b/c/a/b/c/...`` or ``*a*a*a*b``
    against ``aaaa...`` took minutes — so every segment is matched atomically
    up to its ``/`` boundary, and every ``**`` but the last commits to the
    earliest place the following fixed run of segments fits (the next ``**``
    absorbs whatever a later placement would have skipped, so this loses no
    match: the same argument as ``fnmatch``'s translation).
    """
    chunks: list[list[str]] = [[]]
    for seg in resolved.segs:
        kind = seg[0]
        if kind == "D":
            chunks.append([])
        elif kind == "L":
            chunks[-1].append("/" + re.escape(seg[1]) + r"(?=/|\Z)")
        elif kind == "S":
            chunks[-1].append("/[^/]++")
        else:
            chunks[-1].append("/(?>" + _glob_segment_regex(seg[2]) + r"(?=/|\Z))")
    out = "".join(chunks[0])
    if len(chunks) == 1:
        return out
    for middle in chunks[1:-1]:
        out += "(?>(?:/[^/]++)*?" + "".join(middle) + ")"
    return out + "(?:/[^/]++)*" + "".join(chunks[-1])


def _glob_segment_regex(pieces: Sequence[tuple[str, str]]) -> str:
    """In-segment glob without polynomial backtracking (``fnmatch``'s construction).

    Every ``*`` but the last matches lazily and atomically up to the earliest
    occurrence of the text after it; the last ``*`` is greedy.
    """
    last_star = max((i for i, (k, _) in enumerate(pieces) if k == "w"), default=-1)
    out: list[str] = []
    i = 0
    while i < len(pieces):
        kind, text = pieces[i]
        if kind == "t":
            out.append(re.escape(text))
            i += 1
        elif i == last_star:
            out.append("[^/]*")
            i += 1
        else:
            i += 1
            run = ""
            while i < len(pieces) and pieces[i][0] == "t":
                run += re.escape(pieces[i][1])
                i += 1
            out.append("(?>[^/]*?" + run + ")")
    return "".join(out)


def match_key(resource: str) -> str:
    """The string patterns' regexes match: every segment preceded by ``/``.

    ``/`` -> ``""``; ``/a/b`` -> ``/a/b``; relative ``a/b`` -> ``/a/b``.
    """
    if resource == "/":
        return ""
    return resource if resource.startswith("/") else "/" + resource


# ---------------------------------------------------- set reasoning (partial eval)

#: A resource shape: what a requirement's resource expression can produce.
#: ("path",) for path(args.x): any canonical absolute path.
#: ("template", absolute, segs) for templates: each seg is a tuple of pieces,
#: ("t", text) literal or ("h",) hole (a non-empty string without '/').
Shape = tuple[Any, ...]


def _glob_matches(pieces: Sequence[tuple[str, str]], text: str) -> bool:
    regex = "".join(re.escape(t) if k == "t" else "[^/]*" for k, t in pieces)
    return re.fullmatch(regex, text) is not None


def _seg_covers(f: tuple[Any, ...], p: tuple[Any, ...]) -> bool:
    """Every segment ``p`` can match is matched by ``f`` (single-segment kinds only)."""
    fk, pk = f[0], p[0]
    if fk == "S":
        return True
    if fk == "L":
        return pk == "L" and bool(f[1] == p[1])
    # f is a glob
    if pk == "L":
        return _glob_matches(f[2], p[1])
    if all(k == "w" for k, _ in f[2]):
        return True
    return pk == "G" and bool(f[1] == p[1])


def _seq_covers(f: Sequence[tuple[Any, ...]], p: Sequence[tuple[Any, ...]]) -> bool:
    """Every path ``p`` matches is matched by ``f`` (segment lists of resolved patterns)."""
    last = len(f) - 1
    if last >= 0 and f[last][0] == "D":
        # The commonest forbid, literal segments then '**' (a prefix and all below it),
        # weighed against every permit under it when a policy is prepared: ``p``'s
        # first segments must be those literals (nothing else a literal covers).
        n = len(p)
        for i in range(last):
            fi = f[i]
            if fi[0] != "L":
                return _seq_covers_general(f, p)
            pi = p[i] if i < n else None
            if pi is None or pi[0] != "L" or pi[1] != fi[1]:
                return False
        return True
    return _seq_covers_general(f, p)


def _seq_covers_general(f: Sequence[tuple[Any, ...]], p: Sequence[tuple[Any, ...]]) -> bool:
    memo: dict[tuple[int, int], bool] = {}

    def go(i: int, j: int) -> bool:
        key = (i, j)
        if key in memo:
            return memo[key]
        if i == len(f):
            res = j == len(p)
        elif f[i][0] == "D":
            res = go(i + 1, j) or (j < len(p) and go(i, j + 1))
        elif j == len(p) or p[j][0] == "D":
            res = False
        else:
            res = _seg_covers(f[i], p[j]) and go(i + 1, j + 1)
        memo[key] = res
        return res

    return go(0, 0)


def _seg_meets_template(p: tuple[Any, ...], t: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """Intersect a pattern segment with a template segment; None when empty.

    Returns the effective pattern segment describing the intersection (exact
    for literal template segments and single-hole segments, an over-estimate
    for mixed ones).
    """
    literal = all(piece[0] == "t" for piece in t)
    if literal:
        text = "".join(piece[1] for piece in t)
        if p[0] in ("S", "D"):
            return ("L", text)
        if p[0] == "L":
            return p if p[1] == text else None
        return ("L", text) if _glob_matches(p[2], text) else None
    if len(t) == 1:  # one hole: any non-empty segment
        return ("S",) if p[0] == "D" else p
    # mixed text and holes: keep the pattern's view (over-estimate)
    if p[0] == "L":
        regex = "".join(re.escape(piece[1]) if piece[0] == "t" else "[^/]+" for piece in t)
        return p if re.fullmatch(regex, p[1]) else None
    return ("S",) if p[0] == "D" else p


def _alignments(
    p: Sequence[tuple[Any, ...]], tsegs: Sequence[tuple[Any, ...]], limit: int = 64
) -> list[list[tuple[Any, ...]]]:
    """Every way pattern ``p`` can cover the fixed template segments, as effective segments."""
    out: list[list[tuple[Any, ...]]] = []

    def go(i: int, j: int, acc: list[tuple[Any, ...]]) -> None:
        if len(out) >= limit:
            return
        if i == len(p):
            if j == len(tsegs):
                out.append(list(acc))
            return
        if p[i][0] == "D":
            go(i + 1, j, acc)  # zero segments
            if j < len(tsegs):
                eff = _seg_meets_template(("S",), tsegs[j])
                if eff is not None:
                    acc.append(eff)
                    go(i, j + 1, acc)
                    acc.pop()
            return
        if j == len(tsegs):
            return
        eff = _seg_meets_template(p[i], tsegs[j])
        if eff is not None:
            acc.append(eff)
            go(i + 1, j + 1, acc)
            acc.pop()

    go(0, 0, [])
    return out


def meets_shape(pattern: Resolved, shape: Shape) -> bool:
    """True when some resource of ``shape`` matches the (safe) resolved pattern."""
    if not pattern.safe:
        return False
    if shape[0] == "path":
        return pattern.absolute
    _, absolute, tsegs = shape
    if pattern.absolute != absolute:
        return False
    return bool(_alignments(pattern.segs, tsegs, limit=1))


def covers_within(forbid: Resolved, permit: Resolved, shape: Shape) -> bool:
    """True when every resource of ``shape`` matching ``permit`` also matches ``forbid``.

    Exact
    for literal/``*``/``**`` patterns; for in-segment globs it may answer
    False where the true answer is True (never the reverse).
    """
    if not forbid.safe:  # pragma: no cover - forbids always resolve safe
        return True
    if forbid.absolute != permit.absolute:
        return False
    if shape[0] == "path":
        return _seq_covers(forbid.segs, permit.segs)
    _, _absolute, tsegs = shape
    aligns = _alignments(permit.segs, tsegs)
    if len(aligns) >= 64:
        return False
    return all(_seq_covers(forbid.segs, eff) for eff in aligns)
