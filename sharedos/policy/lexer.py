"""A faster contextual lexer for the policy grammar (plugged into Lark's LALR parser).

It does what Lark's ``ContextualLexer`` does -- in each parser state, match
only the terminals that state accepts, with keywords winning over the name
terminals that also match them -- but with one compiled regex per state and
no per-token bookkeeping beyond positions. Terminal patterns, priorities and
ordering are read from the grammar file, so the grammar stays the single
definition of the tokens; ``tests/policy/test_lexer.py`` checks that both
lexers produce identical token streams.

Measured on a 10,000-rule policy: about 3x faster than Lark's lexer, which was
a third of parse time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from lark.exceptions import UnexpectedCharacters, UnexpectedToken
from lark.lexer import Lexer, LexerState, PatternStr, TerminalDef, Token

from sharedos.compat.lark import state_accepts


def _order(term: TerminalDef) -> tuple[int, int, int, str]:
    # Lark's own ordering of alternatives (BasicLexer).
    return (-term.priority, -term.pattern.max_width, -len(term.pattern.value), term.name)


class _StatePlan:
    """The compiled alternation of one parser state's acceptable terminals."""

    __slots__ = ("allowed", "keywords", "regex")

    def __init__(self, terminals: list[TerminalDef], ignore: set[str]) -> None:
        strings = [t for t in terminals if isinstance(t.pattern, PatternStr)]
        regexes = [t for t in terminals if not isinstance(t.pattern, PatternStr)]
        # A keyword that a regex terminal of the same priority fully matches
        # is found through that regex and then re-typed (Lark's "unless").
        self.keywords: dict[str, dict[str, str]] = {}
        embedded: set[str] = set()
        for retok in regexes:
            rx = re.compile(retok.pattern.to_regexp())
            for strtok in strings:
                if strtok.priority != retok.priority:
                    continue
                value = strtok.pattern.value
                m = rx.match(value)
                if m is not None and m.group(0) == value:
                    self.keywords.setdefault(retok.name, {})[value] = strtok.name
                    if set(strtok.pattern.flags) <= set(retok.pattern.flags):
                        embedded.add(strtok.name)
        kept = sorted((t for t in terminals if t.name not in embedded), key=_order)
        # Ignored terminals (whitespace, comments) are skipped before matching.
        self.regex = re.compile(
            "|".join(f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in kept if t.name not in ignore)
        )
        # What an error reports as allowed: the alternatives actually tried,
        # exactly as Lark reports them (embedded keywords are not listed).
        self.allowed = {t.name for t in kept} - ignore or {"<END-OF-FILE>"}


class FastContextualLexer(Lexer):
    """Contextual lexing with one regex per parser state (Lark custom-lexer interface 2)."""

    __future_interface__ = 2

    def __init__(self, lexer_conf: Any) -> None:
        self.conf = lexer_conf
        self.terminals: dict[str, TerminalDef] = {t.name: t for t in lexer_conf.terminals}
        self.ignore: set[str] = set(lexer_conf.ignore)
        self.plans: dict[frozenset[str], _StatePlan] = {}
        self.by_state: dict[int, _StatePlan] = {}
        self.root = _StatePlan(list(self.terminals.values()), self.ignore)
        self.skip = re.compile(
            "(?:"
            + "|".join(self.terminals[n].pattern.to_regexp() for n in sorted(self.ignore))
            + ")*"
        )

    def _plan(self, parser_state: Any) -> _StatePlan:
        position = parser_state.position
        plan = self.by_state.get(position)
        if plan is None:
            accepts = state_accepts(parser_state)
            names = frozenset(n for n in accepts if n in self.terminals) | self.ignore
            plan = self.plans.get(names)
            if plan is None:
                plan = self.plans[names] = _StatePlan(
                    [self.terminals[n] for n in names], self.ignore
                )
            self.by_state[position] = plan
        return plan

    def lex(self, lexer_state: LexerState, parser_state: Any) -> Iterator[Token]:
        """Yield tokens, choosing the terminals by the parser's current state."""
        text_slice = lexer_state.text
        text: str = text_slice.text
        end = text_slice.end
        counter = lexer_state.line_ctr
        pos = counter.char_pos
        line = counter.line
        line_start = pos - (counter.column - 1)
        skip = self.skip.match
        by_state = self.by_state
        while True:
            gap = skip(text, pos)  # '(...)*' always matches, possibly empty
            gap_end = gap.end() if gap is not None else pos
            if gap_end != pos:
                newlines = text.count("\n", pos, gap_end)
                if newlines:
                    line += newlines
                    line_start = text.rindex("\n", pos, gap_end) + 1
                pos = gap_end
            if pos >= end:
                break
            plan = by_state.get(parser_state.position) or self._plan(parser_state)
            m = plan.regex.match(text, pos)
            if m is None or not m.group(0):
                self._fail(text, pos, line, pos - line_start + 1, plan, parser_state, lexer_state)
            assert m is not None
            kind = m.lastgroup or ""
            value = m.group(0)
            new_pos = m.end()
            keywords = plan.keywords.get(kind)
            if keywords is not None:
                kind = keywords.get(value, kind)
            col = pos - line_start + 1
            token = Token(kind, value, pos, line, col, line, col + len(value), new_pos)
            lexer_state.last_token = token
            pos = new_pos
            counter.char_pos = pos
            counter.line = line
            counter.column = pos - line_start + 1
            counter.line_start_pos = line_start
            yield token

    def _fail(
        self,
        text: str,
        pos: int,
        line: int,
        col: int,
        plan: _StatePlan,
        parser_state: Any,
        lexer_state: LexerState,
    ) -> None:
        # Like Lark: if the text is a token of some other context, report an
        # unexpected token (with what this state expected); else a bad character.
        m = self.root.regex.match(text, pos)
        if m is not None and m.group(0) and m.lastgroup not in self.ignore:
            kind = m.lastgroup or ""
            keywords = self.root.keywords.get(kind)
            if keywords is not None:
                kind = keywords.get(m.group(0), kind)
            value = m.group(0)
            token = Token(kind, value, pos, line, col, line, col + len(value), m.end())
            raise UnexpectedToken(  # type: ignore[no-untyped-call]
                token,
                plan.allowed,
                state=parser_state,
                token_history=[lexer_state.last_token] if lexer_state.last_token else None,
            )
        raise UnexpectedCharacters(  # type: ignore[no-untyped-call]
            text, pos, line, col, allowed=plan.allowed, state=parser_state
        )
