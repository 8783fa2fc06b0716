"""The fence around Lark internals (``sharedos.compat.lark``) holds, and fails loudly when it would not."""

from __future__ import annotations

import random
from pathlib import Path

import lark
import pytest
from lark.exceptions import UnexpectedInput

from sharedos.compat import lark as lark_compat
from sharedos.policy import grammar


def test_the_installed_lark_is_one_compat_was_written_for() -> None:
    assert lark_compat.supported(), (
        f"Lark {lark.__version__} is installed, but sharedos/compat/lark.py was written for "
        f"{lark_compat.SUPPORTED_VERSIONS}: review the internals it reads (parse table states, "
        "memo_serialize/_load_from_dict), then add the version and rebuild the tables with "
        "`python -m sharedos.policy.grammar`"
    )


def test_the_shipped_parser_tables_match_the_grammar() -> None:
    assert grammar.tables_are_current(), (
        f"{grammar.tables_path()} was not built from the current grammar with Lark "
        f"{lark.__version__}: run `python -m sharedos.policy.grammar` and commit the result"
    )


def test_an_unsupported_version_is_refused_by_the_internals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lark, "__version__", "0.0.1")
    assert not lark_compat.supported()
    with pytest.raises(lark_compat.LarkVersionError, match="written for Lark"):
        lark_compat.require_supported()
    with pytest.raises(lark_compat.LarkVersionError):
        lark_compat.serialize_parser(grammar.build_parser())


def _outcome(parser: lark.Lark, text: str) -> object:
    try:
        return parser.parse(text)
    except UnexpectedInput as exc:
        expected = getattr(exc, "expected", None) or getattr(exc, "allowed", None) or set()
        return (type(exc).__name__, exc.line, exc.column, sorted(expected))


def _corpus(repo_root: Path) -> str:
    files = sorted((repo_root / "rules").glob("*.sos")) + sorted(
        (repo_root / "policy").glob("*.sos")
    )
    return "\n".join(f.read_text(encoding="utf-8") for f in files)


def test_the_loaded_parser_parses_exactly_like_one_built_from_the_grammar(
    repo_root: Path,
) -> None:
    loaded, built = grammar.parser(), grammar.build_parser()
    assert loaded is not built
    base = _corpus(repo_root)
    assert _outcome(loaded, base) == _outcome(built, base)
    rng = random.Random(11)
    alphabet = [*list('{}()[];,.:"*@#=!-_ \n\taz09'), "permit", "in", "when", "not in"]
    for _ in range(150):
        chars = list(base[: rng.randint(50, 1200)])
        for _ in range(rng.randint(1, 3)):
            chars.insert(rng.randrange(len(chars) + 1), rng.choice(alphabet))
        text = "".join(chars)
        assert _outcome(loaded, text) == _outcome(built, text), text


def test_state_accepts_reads_the_parse_table() -> None:
    seen: list[frozenset[str]] = []

    class Probe(lark_compat_lexer()):  # type: ignore[misc]
        def lex(self, lexer_state, parser_state):  # type: ignore[no-untyped-def]
            seen.append(frozenset(lark_compat.state_accepts(parser_state)))
            return super().lex(lexer_state, parser_state)

    probe = lark.Lark(grammar.grammar_text(), parser="lalr", lexer=Probe)
    probe.parse("namespace files\n")
    assert seen and {"_NAMESPACE", "EFFECT", "_REQUIREMENT"} <= seen[0]


def lark_compat_lexer() -> type:
    from sharedos.policy.lexer import FastContextualLexer

    return FastContextualLexer


def test_with_an_unknown_lark_the_parser_uses_only_the_documented_api(
    monkeypatch: pytest.MonkeyPatch, repo_root: Path
) -> None:
    reference = _outcome(grammar.build_parser(), _corpus(repo_root))
    monkeypatch.setattr(lark, "__version__", "0.0.1")
    fallback = grammar.build_parser()
    assert fallback.options.lexer == "contextual"
    assert _outcome(fallback, _corpus(repo_root)) == reference
