"""The grammar and the language facts derived from it: the parser, keywords, terminal names.

``grammar/sharedos.lark`` is the single source of the language's lexical
facts. Keywords are its terminals whose pattern is a word (or an alternation
of words) followed by ``\\b``; the keywords that start a statement are those
the parser accepts at the start of a file. Nothing else in SharedOS spells
them out: the parser's chunker and fast path, the formatter's quoting and the
diagnostics' "did you mean" all read them from here.

The LALR tables are shipped pre-built next to the grammar
(``sharedos.lark.json``, written by ``python -m sharedos.policy.grammar``) so a
fresh process loads the parser in a few milliseconds instead of building it
(~40 ms). They are used only when they were built from this exact grammar
text with this Lark version; otherwise the parser is built from the grammar.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from lark import Lark
from lark.lexer import PatternRE, PatternStr

from sharedos.atomicfile import write_atomically
from sharedos.compat import lark as lark_compat
from sharedos.policy.grammar_id import GRAMMAR_VERSION as GRAMMAR_VERSION
from sharedos.policy.grammar_id import grammar_sha256 as grammar_sha256
from sharedos.policy.grammar_id import grammar_text as grammar_text
from sharedos.policy.lexer import FastContextualLexer
from sharedos.resources import grammar_path

_KEYWORD_RE = re.compile(r"^(?:\(\?:)?([a-z_]+(?:\|[a-z_]+)*)\)?\\b$")
_OPTIONS: dict[str, Any] = {
    "parser": "lalr",
    "propagate_positions": True,
    "maybe_placeholders": False,
}


def tables_path() -> Path:
    """Where the pre-built parser tables live (beside the grammar)."""
    return grammar_path().with_name("sharedos.lark.json")


def build_parser() -> Lark:
    """Build the parser from the grammar text (the slow, always-correct way)."""
    if lark_compat.supported():
        return Lark(grammar_text(), lexer=FastContextualLexer, **_OPTIONS)
    # An unknown Lark: use only its documented API (its own contextual lexer).
    return Lark(grammar_text(), lexer="contextual", **_OPTIONS)


@lru_cache(maxsize=1)
def _shipped() -> dict[str, Any] | None:
    """The shipped tables document, when it was built from this grammar with this Lark."""
    if not lark_compat.supported():
        return None
    try:
        doc = json.loads(tables_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    import lark

    if (
        not isinstance(doc, dict)
        or doc.get("grammar_sha256") != grammar_sha256()
        or doc.get("lark") != lark.__version__
        or not isinstance(doc.get("parser"), str)
        or not isinstance(doc.get("facts"), dict)
    ):
        return None
    return doc


def _load_tables() -> Lark | None:
    doc = _shipped()
    if doc is None:
        return None
    try:
        data = json.loads(doc["parser"], object_hook=lark_compat.json_object_hook())
        return lark_compat.load_parser(data, FastContextualLexer)
    except (ValueError, TypeError, lark_compat.LarkVersionError):
        return None


@lru_cache(maxsize=1)
def parser() -> Lark:
    """The policy parser, built once per process (a Lark LALR parser is immutable after
    construction and safe to reuse for every parse)."""
    return _load_tables() or build_parser()


def write_tables(path: Path | None = None) -> Path:
    """Build the parser from the grammar and write its tables and facts (atomically)."""
    target = path or tables_path()
    built = build_parser()
    serialized = lark_compat.serialize_parser(built)
    lang = _facts_of(built)
    doc = {
        "grammar_sha256": grammar_sha256(),
        "lark": serialized["lark"],
        "facts": {
            "terminal_words": {k: list(v) for k, v in sorted(lang.terminal_words.items())},
            "statement_keywords": list(lang.statement_keywords),
            "statement_marks": list(lang.statement_marks),
        },
        # one string: reading the facts does not decode the tables
        "parser": json.dumps(serialized, separators=(",", ":")),
    }
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n"
    # a shipped file, readable like the grammar beside it
    return write_atomically(target, text, mode=0o644, exact_mode=True)


def tables_are_current() -> bool:
    """True when the shipped tables were built from this grammar with this Lark."""
    _shipped.cache_clear()
    return _shipped() is not None


# ----------------------------------------------------------- language facts


@dataclass(frozen=True, slots=True)
class LanguageFacts:
    """What the grammar says about words and statements."""

    #: every keyword
    keywords: frozenset[str]
    #: terminal name -> the keywords it matches (keyword terminals only)
    terminal_words: dict[str, tuple[str, ...]]
    #: the keywords a statement can start with, in a stable order
    statement_keywords: tuple[str, ...]
    #: non-word tokens a statement can start with (``@``, ``;``)
    statement_marks: tuple[str, ...]


def _keyword_words(pattern: Any) -> tuple[str, ...] | None:
    if not isinstance(pattern, PatternRE):
        return None
    m = _KEYWORD_RE.match(pattern.value)
    return tuple(m.group(1).split("|")) if m else None


def _facts_of(p: Lark) -> LanguageFacts:
    words: dict[str, tuple[str, ...]] = {}
    for term in p.terminals:
        found = _keyword_words(term.pattern)
        if found is not None:
            words[term.name] = found
    starters = p.parse_interactive("").accepts()  # type: ignore[no-untyped-call]
    statement_keywords = tuple(sorted(w for name in starters for w in words.get(name, ())))
    marks = tuple(
        sorted(
            term.pattern.value
            for term in p.terminals
            if term.name in starters and isinstance(term.pattern, PatternStr)
        )
    )
    return LanguageFacts(
        frozenset(w for ws in words.values() for w in ws), words, statement_keywords, marks
    )


@lru_cache(maxsize=1)
def facts() -> LanguageFacts:
    """The language facts of the grammar (computed once per process; read from the
    shipped tables when current, so a file the fast path reads needs no parser)."""
    doc = _shipped()
    if doc is None:
        return _facts_of(parser())
    raw = doc["facts"]
    words = {str(k): tuple(v) for k, v in raw["terminal_words"].items()}
    return LanguageFacts(
        frozenset(w for ws in words.values() for w in ws),
        words,
        tuple(raw["statement_keywords"]),
        tuple(raw["statement_marks"]),
    )


def keywords() -> frozenset[str]:
    """Every keyword of the language."""
    return facts().keywords


def is_keyword(word: str) -> bool:
    """True when ``word`` is a keyword (a bare tool name or key spelled so must be quoted)."""
    return word in facts().keywords


#: How diagnostics name the non-keyword terminals.
_TERMINAL_WORDS = {
    "NAME": "a name",
    "REF": "a name",
    "TOOL": "a tool name",
    "TOOLPAT": "a tool name or pattern",
    "STRING": "a string",
    "SIGNED_NUMBER": "a number",
    "COMPARE_OP": "a comparison (== != < <= > >=)",
    "STAR": "'*'",
    "$END": "end of file",
}


def describe_terminal(name: str) -> str:
    """A terminal as a diagnostic names it: ``'permit' or 'forbid'``, ``a string``, ``'{'``."""
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name]
    words = facts().terminal_words.get(name)
    if words is not None:
        quoted = [f"'{w}'" for w in words]
        return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    try:
        term = parser().get_terminal(name)
    except KeyError:
        return name
    if isinstance(term.pattern, PatternStr):
        return repr(term.pattern.value)
    return name


def main(argv: list[str] | None = None) -> int:
    """``python -m sharedos.policy.grammar [--check]``: write (or check) the pre-built tables."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        current = tables_are_current()
        print(f"{tables_path()}: {'current' if current else 'stale: rebuild it'}")
        return 0 if current else 1
    print(f"wrote {write_tables()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
