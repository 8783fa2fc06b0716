"""Lint SOS513: a literal that cannot match what it reads as (Unicode).

Resources and pattern literals are NFC (``text``); what is left are literals
that *look* like one thing and are another:

* compatibility characters (fullwidth letters, ligatures): ``"/ｐｒｉｖａｔｅ/**"``
  reads as ``/private/**`` and matches only the fullwidth directory;
* mixed scripts in one segment or word (a Cyrillic ``а`` in ``privаte``), and
  a word all of whose letters only look like ASCII ones (``рау`` is Cyrillic);
* a string literal in a condition that is not NFC;
* ``lower(x)`` compared with a literal that is not its own ``lower`` form:
  ``lower(args.name) == "Admin"`` can never hold; nor can ``startswith``,
  ``endswith`` or ``contains`` of ``lower(x)`` and a literal holding a character
  that is not its own ``lower`` form (``endswith(lower(resource), ".PEM")``).

Script and confusable data are Unicode's (UTS 39, through the
``confusable-homoglyphs`` package), loaded only when a literal is not ASCII.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sharedos.policy import ast
from sharedos.policy.text import fold, is_nfc

Warn = Callable[[str, str, ast.Span, str | None], None]

_WORD_SPLIT = re.compile(r"[\s/{}*]+")
#: scripts any word may mix in (digits and punctuation; combining marks)
_NEUTRAL = frozenset({"COMMON", "INHERITED"})


def lint_unicode(
    files: Sequence[ast.PolicyFile], named: Mapping[str, Mapping[str, ast.Expr]], warn: Warn
) -> None:
    """Every SOS513 warning of ``files`` (named conditions checked where they are declared)."""
    for f in files:
        for stmt in f.statements:
            if isinstance(stmt, ast.Rule):
                _pattern(stmt.pattern, warn)
                for cond in stmt.conditions:
                    _condition(cond, warn)
            elif isinstance(stmt, ast.ConditionDecl):
                _condition(stmt.expr, warn)


def _pattern(pattern: ast.Pattern, warn: Warn) -> None:
    raw = pattern.raw
    if raw.isascii():
        return
    offset = 0
    for seg in raw.split("/"):
        if not seg.isascii():
            sp = pattern.span
            col = sp.col + 1 + offset  # +1: the opening quote (exact without escapes)
            where = ast.Span(sp.file, sp.line, col, sp.line, col + len(seg))
            problem = _looks_like(_strip_holes(seg))
            if problem is not None:
                warn("SOS513", f"pattern segment {seg!r} {problem}", where, None)
        offset += len(seg) + 1


def _strip_holes(seg: str) -> str:
    return re.sub(r"\{[^{}]*\}", "", seg)


def _condition(cond: ast.Expr, warn: Warn) -> None:
    for node in ast.walk(cond):
        if isinstance(node, ast.Literal) and isinstance(node.value, str):
            text = node.value
            if text.isascii():
                continue
            if not is_nfc(text):
                warn(
                    "SOS513",
                    f"string {text!r} is not in Unicode NFC, which resources always are: "
                    "it can never equal one, and only matches an argument sent in this form",
                    node.span,
                    f"write {unicodedata.normalize('NFC', text)!r}, or compare lower(x), "
                    "which normalizes",
                )
                continue
            for word in _WORD_SPLIT.split(text):
                problem = _looks_like(word) if word and not word.isascii() else None
                if problem is not None:
                    warn("SOS513", f"string {text!r}: {word!r} {problem}", node.span, None)
                    break
        elif isinstance(node, ast.Compare) and node.op in ("==", "!=", "in", "not in"):
            _lower_comparison(node, warn)
        elif isinstance(node, ast.Call) and node.func in _SUBSTRING_TESTS:
            _lower_substring(node, warn)


def _lower_comparison(node: ast.Compare, warn: Warn) -> None:
    for side, other in ((node.left, node.right), (node.right, node.left)):
        if not (isinstance(side, ast.Call) and side.func == "lower"):
            continue
        if node.op in ("in", "not in") and side is node.right:
            continue
        for lit in _string_literals(other, listed=node.op in ("in", "not in")):
            assert isinstance(lit.value, str)
            if fold(lit.value) != lit.value:
                verdict = "never holds" if node.op in ("==", "in") else "always holds"
                warn(
                    "SOS513",
                    f"lower(...) is never {lit.value!r} (its lower form is "
                    f"{fold(lit.value)!r}): '{node.op}' {verdict} for it",
                    lit.span,
                    f"compare with {fold(lit.value)!r}",
                )


#: the string functions that test for a piece of their first argument
_SUBSTRING_TESTS = ("startswith", "endswith", "contains")


def _lower_substring(node: ast.Call, warn: Warn) -> None:
    """``startswith(lower(x), "/Private")``: a piece of ``lower(x)`` is made of characters
    that are each their own ``lower`` form (every character of every ``fold`` is), so a
    literal holding any other character is never found in it: the test is always false,
    and a forbid (or an approval rule) written with it never applies."""
    if len(node.args) != 2:
        return
    side, lit = node.args
    if not (isinstance(side, ast.Call) and side.func == "lower"):
        return
    if not (isinstance(lit, ast.Literal) and isinstance(lit.value, str)):
        return
    foreign = next((ch for ch in lit.value if fold(ch) != ch), None)
    if foreign is not None:
        warn(
            "SOS513",
            f"lower(...) never holds {foreign!r} (its lower form is {fold(foreign)!r}): "
            f"{node.func}(lower(...), {lit.value!r}) is always false",
            lit.span,
            f"compare with {fold(lit.value)!r}",
        )


def _string_literals(expr: ast.Expr, *, listed: bool) -> Iterator[ast.Literal]:
    if listed and isinstance(expr, ast.ListExpr):
        for item in expr.items:
            if isinstance(item, ast.Literal) and isinstance(item.value, str):
                yield item
    elif not listed and isinstance(expr, ast.Literal) and isinstance(expr.value, str):
        yield expr


def _looks_like(word: str) -> str | None:
    """Why a non-ASCII word cannot match what it reads as, or None."""
    compat = unicodedata.normalize("NFKC", word)
    if compat != word:
        return (
            f"holds compatibility characters (fullwidth letters, ligatures ...): it reads as "
            f"{compat!r} but matches only this spelling"
        )
    from confusable_homoglyphs import categories, confusables

    scripts = set(categories.unique_aliases(word)) - _NEUTRAL
    found: list[dict[str, Any]] = (
        confusables.is_confusable(word, greedy=True, preferred_aliases=["latin", "common"]) or []
    )
    ascii_twin = {f["character"]: _ascii_homoglyph(f) for f in found}
    if len(scripts) > 1:
        shown = ", ".join(
            f"{ch!r} ({unicodedata.name(ch, hex(ord(ch)))}) looks like {twin!r}"
            for ch, twin in ascii_twin.items()
            if twin is not None
        )
        return f"mixes scripts ({', '.join(sorted(scripts))})" + (f": {shown}" if shown else "")
    if scripts and "LATIN" not in scripts:
        letters = [ch for ch in word if unicodedata.category(ch)[0] == "L"]
        twins = [ascii_twin.get(ch) for ch in letters]
        if letters and all(t is not None for t in twins):
            skeleton = "".join(ascii_twin.get(ch) or ch for ch in word)
            return (
                f"is written in {next(iter(scripts)).title()} letters that look like the "
                f"ASCII {skeleton!r}, which it does not match"
            )
    return None


def _ascii_homoglyph(found: Mapping[str, Any]) -> str | None:
    for glyph in found.get("homoglyphs", ()):
        c = glyph.get("c", "")
        if c.isascii() and c.isalnum():
            return str(c)
    return None
