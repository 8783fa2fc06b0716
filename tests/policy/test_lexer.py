"""The fast contextual lexer is a drop-in for Lark's: identical trees, tokens and errors."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lark
import pytest
from lark.exceptions import UnexpectedInput

from sharedos.policy.lexer import FastContextualLexer
from sharedos.policy.parser import grammar_text

_KW: dict[str, Any] = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": False}


@pytest.fixture(scope="module")
def parsers() -> tuple[lark.Lark, lark.Lark]:
    text = grammar_text()
    return lark.Lark(text, lexer="contextual", **_KW), lark.Lark(
        text, lexer=FastContextualLexer, **_KW
    )


def _outcome(parser: lark.Lark, text: str) -> object:
    try:
        tree = parser.parse(text)
    except UnexpectedInput as exc:
        expected = getattr(exc, "expected", None) or getattr(exc, "allowed", None) or set()
        return (type(exc).__name__, exc.line, exc.column, sorted(expected))
    tokens = [
        (t.type, str(t), t.line, t.column, t.end_line, t.end_column, t.start_pos, t.end_pos)
        for t in tree.scan_values(lambda v: isinstance(v, lark.Token))
    ]
    return (tree, tokens)


def _corpus(repo_root: Path) -> list[str]:
    files = sorted((repo_root / "rules").glob("*.sos")) + sorted(
        (repo_root / "policy").glob("*.sos")
    )
    return [f.read_text() for f in files]


def test_same_result_on_shipped_files(
    parsers: tuple[lark.Lark, lark.Lark], repo_root: Path
) -> None:
    slow, fast = parsers
    for text in _corpus(repo_root):
        assert _outcome(slow, text) == _outcome(fast, text)


def test_same_result_on_mutated_text(parsers: tuple[lark.Lark, lark.Lark], repo_root: Path) -> None:
    slow, fast = parsers
    rng = random.Random(7)
    base = "\n".join(_corpus(repo_root))
    alphabet = [
        *list('{}()[];,.:"*@#=!-_ \n\taz09'),
        "permit",
        "on",
        "when",
        "not in",
        "requirement",
        "==",
    ]
    for _ in range(300):
        chars = list(base[: rng.randint(50, 1500)])
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(chars) + 1)
            op = rng.random()
            if op < 0.4 and chars:
                del chars[min(pos, len(chars) - 1)]
            else:
                chars.insert(pos, rng.choice(alphabet))
        text = "".join(chars)
        assert _outcome(slow, text) == _outcome(fast, text), text
