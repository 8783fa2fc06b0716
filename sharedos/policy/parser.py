"""Parse ``.sos`` text into the typed AST, reporting every syntax error.

``parse_source`` never raises: whatever the input, it returns the statements it
could read and a list of diagnostics. After a syntax error it resumes at the
next top-level statement (a line whose first word starts a statement, per the
grammar: ``grammar.facts``), so several errors in one file are all reported.

Lark builds a parse tree; ``AstBuilder`` (a ``lark.Transformer`` whose methods
are named after the grammar's rules) turns it into the AST, one top-level
statement at a time, so each statement records the namespace in force where
it was written. Large files take the one-line fast path (``fastpath``) for
their simple rules.
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lark import Token, Transformer, Tree, v_args
from lark.exceptions import (
    LarkError,
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
    VisitError,
)

from sharedos.policy import ast
from sharedos.policy.diagnostics import Diagnostic, make
from sharedos.policy.fastpath import scan
from sharedos.policy.grammar import (
    GRAMMAR_VERSION,
    describe_terminal,
    facts,
    grammar_text,
    is_keyword,
    parser,
)
from sharedos.policy.literals import SyntaxProblem as _SyntaxProblem
from sharedos.policy.literals import decode_string, number_value, template_parts

__all__ = ["GRAMMAR_VERSION", "ParseResult", "grammar_text", "parse_source"]

#: Whether one-line rules skip Lark (see ``fastpath``); tests compare both paths.
_FAST_ENABLED = True

_ANNOTATION_ONLY_RE = re.compile(
    r'^[ \t]*@[A-Za-z_][A-Za-z0-9_]*\s*\(\s*"[^"\\\n]*(?:\\.[^"\\\n]*)*"\s*\)\s*(?:#.*)?$'
)
_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORD_AT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARSE_ERRORS = (LarkError, RecursionError)


@lru_cache(maxsize=1)
def _top_line_re() -> re.Pattern[str]:
    # A chunk starts at a statement keyword or an annotation; not at ';', which
    # may also stand alone inside a block.
    lang = facts()
    words = "|".join(lang.statement_keywords)
    marks = "".join(re.escape(m) for m in lang.statement_marks if m != ";")
    return re.compile(rf"^[ \t]*(?:[{marks}]|(?:{words})\b)")


@dataclass(frozen=True, slots=True)
class ParseResult:
    """The (possibly partial) file and the syntax diagnostics found."""

    file: ast.PolicyFile
    diagnostics: tuple[Diagnostic, ...]


_ERRORS = (*_PARSE_ERRORS, _SyntaxProblem)


def parse_source(text: str, filename: str = "<string>") -> ParseResult:
    """Parse ``text``; never raises. Diagnostics carry ``filename`` positions."""
    if not isinstance(text, str):
        text = str(text)
    comments = tuple(_scan_comments(text, filename))
    fast = _parse_fast(text, filename) if _FAST_ENABLED else None
    if fast is not None:
        return ParseResult(ast.PolicyFile(filename, text, tuple(fast), comments), ())
    try:
        statements = _parse_chunk(text, AstBuilder(filename, 0))
        return ParseResult(ast.PolicyFile(filename, text, tuple(statements), comments), ())
    except _ERRORS:
        pass
    # Error path: parse statement by statement so that every error is reported.
    diagnostics: list[Diagnostic] = []
    statements = []
    builder = AstBuilder(filename, 0)
    for line_offset, chunk in _chunks(text):
        builder.off = line_offset
        try:
            statements.extend(_parse_chunk(chunk, builder))
        except _ERRORS as exc:
            diagnostics.append(_diagnostic(exc, chunk, filename, line_offset, text))
    if not diagnostics:  # the whole failed but every chunk parsed: report the whole's error
        try:
            _parse_chunk(text, AstBuilder(filename, 0))
        except _ERRORS as exc:
            diagnostics.append(_diagnostic(exc, text, filename, 0, text))
    return ParseResult(
        ast.PolicyFile(filename, text, tuple(statements), comments), tuple(diagnostics)
    )


# ---------------------------------------------------------------- chunking


def _chunks(text: str) -> Iterator[tuple[int, str]]:
    """Split into top-level statement chunks: (0-based first line, text)."""
    lines = text.split("\n")
    start = 0
    annotation_only = False
    top = _top_line_re().match
    for i, line in enumerate(lines):
        if i > start and top(line):
            if annotation_only:
                # '@id(...)' on its own line belongs to the statement below it.
                annotation_only = bool(_ANNOTATION_ONLY_RE.match(line))
                continue
            yield start, "\n".join(lines[start:i])
            start = i
            annotation_only = bool(_ANNOTATION_ONLY_RE.match(line))
        elif i == start:
            annotation_only = bool(_ANNOTATION_ONLY_RE.match(line))
    yield start, "\n".join(lines[start:])


def _parse_chunk(chunk: str, builder: AstBuilder) -> list[ast.Statement]:
    tree = parser().parse(chunk)
    # Statements are built in source order, so the builder's current
    # namespace is the one in force where each statement was written.
    return [s for s in (builder.statement(child) for child in tree.children) if s is not None]


# ------------------------------------------------------------- diagnostics


def _expected(names: Iterable[str]) -> str:
    described = sorted({describe_terminal(t) for t in names})
    return ", ".join(described[:8]) + (", ..." if len(described) > 8 else "")


def _unknown_keyword(word: str, expected: Iterable[str]) -> tuple[str, str | None] | None:
    """('unknown keyword ...; did you mean ...?', hint) when a word stands where keywords were expected."""
    words = facts().terminal_words
    wanted = [w for name in expected for w in words.get(name, ())]
    if not wanted or not _WORD_RE.fullmatch(word) or is_keyword(word):
        return None
    glued = [w for w in sorted(wanted, key=len, reverse=True) if word.startswith(w)][:1]
    close = difflib.get_close_matches(word, wanted, n=1, cutoff=0.6) or glued
    if not close:
        return f"unknown keyword '{word}'; expected {_expected(expected)}", None
    hint = None
    if glued and glued[0] == close[0]:
        hint = (
            f"a keyword is a whole word: write '{glued[0]} {word[len(glued[0]) :]}' "
            "with a space if that is what you meant"
        )
    return f"unknown keyword '{word}'; did you mean '{close[0]}'?", hint


#: What a character from another language usually meant here.
_CHARACTER_HINTS = {
    "'": 'strings are written in double quotes: "like this"',
    "&": "write 'and' (not && or &)",
    "|": "write 'or' (not || or |)",
    "!": "write 'not x' to negate, '!=' to compare",
}


def _token_hint(token: str, expected: Iterable[str]) -> str | None:
    if token == "=" and "COMPARE_OP" in set(expected):
        return "compare with '==' (a single '=' only names a condition: condition NAME = EXPR)"
    return None


def _describe_token(token: Token) -> str:
    if token.type == "$END":
        return "end of file"
    text = str(token)
    shown = text if len(text) <= 40 else text[:37] + "..."
    return repr(shown)


def _diagnostic(
    exc: BaseException, chunk: str, filename: str, line_offset: int, full: str
) -> Diagnostic:
    if isinstance(exc, _SyntaxProblem):
        return make(
            exc.code,
            exc.message,
            file=filename,
            source=full,
            line=exc.line,
            col=exc.col,
            end_col=exc.end_col,
        )
    if isinstance(exc, RecursionError):
        return make(
            "SOS101",
            "expression is nested too deeply to parse",
            file=filename,
            source=full,
            line=line_offset + 1,
            col=1,
        )
    if isinstance(exc, UnexpectedToken) and exc.token.type != "$END":
        token = exc.token
        line = (token.line or 1) + line_offset
        col = token.column or 1
        word = str(token)
        end_col = (token.end_column or col + 1) if token.end_line == token.line else col + 1
        unknown = _unknown_keyword(word.split(".")[0], exc.expected)
        if unknown is not None:
            end_col = col + len(word.split(".")[0])
        return make(
            "SOS101",
            unknown[0]
            if unknown
            else f"unexpected {_describe_token(token)}; expected {_expected(exc.expected)}",
            hint=unknown[1] if unknown else _token_hint(word, exc.expected),
            file=filename,
            source=full,
            line=line,
            col=col,
            end_col=end_col,
        )
    if isinstance(exc, UnexpectedToken | UnexpectedEOF):
        shown = _expected(exc.expected)
        # Point just past the last non-blank character of the chunk.
        stripped = _strip_comments(chunk).rstrip()
        lines = stripped.split("\n") if stripped else [""]
        line = line_offset + len(lines)
        col = len(lines[-1]) + 1
        at_end = line_offset + chunk.count("\n") + 1 >= full.count("\n") + 1
        where = "end of file" if at_end else "end of statement"
        return make(
            "SOS103",
            f"unexpected {where}; expected {shown}",
            file=filename,
            source=full,
            line=line,
            col=col,
            end_col=col + 1,
        )
    if isinstance(exc, UnexpectedCharacters):
        line = exc.line + line_offset
        col = exc.column
        char = exc.char
        if char == '"':
            return make(
                "SOS104",
                "unterminated string literal (strings end on the line they start)",
                file=filename,
                source=full,
                line=line,
                col=col,
                end_col=len(_line(full, line)) + 1,
            )
        shown = _expected(exc.allowed or set())
        at = _WORD_AT_RE.match(_line(full, line), col - 1)
        unknown = _unknown_keyword(at.group(0), exc.allowed or set()) if at else None
        if unknown is not None and at is not None:
            return make(
                "SOS101",
                unknown[0],
                hint=unknown[1],
                file=filename,
                source=full,
                line=line,
                col=col,
                end_col=at.end() + 1,
            )
        return make(
            "SOS102",
            f"invalid character {char!r} here" + (f"; expected {shown}" if shown else ""),
            file=filename,
            source=full,
            line=line,
            col=col,
            hint=_CHARACTER_HINTS.get(char),
        )
    if isinstance(exc, UnexpectedInput):
        line = (getattr(exc, "line", 1) or 1) + line_offset
        col = getattr(exc, "column", 1) or 1
        return make("SOS101", "syntax error", file=filename, source=full, line=line, col=col)
    return make(
        "SOS101",
        f"syntax error: {exc}",
        file=filename,
        source=full,
        line=line_offset + 1,
        col=1,
    )


def _line(text: str, line: int) -> str:
    lines = text.split("\n")
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _strip_comments(text: str) -> str:
    return "\n".join(_code_part(line) for line in text.split("\n"))


def _code_part(line: str) -> str:
    idx = _comment_start(line)
    return line if idx < 0 else line[:idx]


def _comment_start(line: str) -> int:
    """Index of the '#' starting a comment on ``line`` (outside strings), else -1."""
    in_string = False
    escaped = False
    for i, ch in enumerate(line):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "#":
            return i
    return -1


def _scan_comments(text: str, filename: str) -> Iterator[ast.Comment]:
    if "#" not in text:
        return
    for lineno, line in enumerate(text.split("\n"), start=1):
        if "#" not in line:
            continue
        idx = _comment_start(line)
        if idx >= 0:
            body = line[idx + 1 :].rstrip("\r")
            yield ast.Comment(
                text=body,
                span=ast.Span(filename, lineno, idx + 1, lineno, len(line) + 1),
                own_line=line[:idx].strip() == "",
            )


# ----------------------------------------------------------------- builder

#: A block item as the builder hands it to its block: (clause, value, span).
_Item = tuple[str, Any, ast.Span]


class AstBuilder(Transformer[Token, Any]):
    """Parse tree -> AST. One method per grammar rule (or alias), named after it.

    Spans are shifted by ``off`` lines (the chunk's first line in the file).
    ``statement`` transforms one top-level statement, so that a
    ``namespace`` statement sets the namespace of the statements after it.
    """

    def __init__(self, filename: str, line_offset: int) -> None:
        super().__init__(visit_tokens=False)
        self.file = filename
        self.off = line_offset
        self.namespace = ast.DEFAULT_NAMESPACE
        self._duplicates: list[ast.Span] = []
        self._pair_spans: tuple[ast.Span, ...] = ()
        self._clause_pairs: dict[str, tuple[ast.Span, ...]] = {}

    def statement(self, node: Tree[Token] | Token) -> ast.Statement | None:
        """The AST of one top-level statement (None for an empty ``;``)."""
        try:
            result = self.transform(node) if isinstance(node, Tree) else None
        except VisitError as exc:  # Lark wraps what a callback raised
            if isinstance(exc.orig_exc, _SyntaxProblem | RecursionError):
                raise exc.orig_exc from None
            raise
        if result is not None and not isinstance(
            result,
            ast.NamespaceDecl
            | ast.Requirement
            | ast.Rule
            | ast.ConditionDecl
            | ast.ToolPolicyDecl
            | ast.TestBlock,
        ):
            sp = self.span(node)
            raise _SyntaxProblem("SOS101", "unexpected statement", sp.line, 1)
        return result

    # -- spans and literals

    def tspan(self, tok: Token) -> ast.Span:
        """The span of a token."""
        line = (tok.line or 1) + self.off
        end_line = (tok.end_line or tok.line or 1) + self.off
        col = tok.column or 1
        return ast.Span(self.file, line, col, end_line, tok.end_column or col + 1)

    def mspan(self, meta: Any) -> ast.Span:
        """The span of a rule match (its ``meta``)."""
        if getattr(meta, "empty", True):
            return ast.Span(self.file, self.off + 1, 1, self.off + 1, 2)
        return ast.Span(
            self.file, meta.line + self.off, meta.column, meta.end_line + self.off, meta.end_column
        )

    def span(self, node: Any) -> ast.Span:
        """The span of a token or a tree."""
        return self.tspan(node) if isinstance(node, Token) else self.mspan(node.meta)

    def string(self, tok: Token) -> str:
        """Decode a STRING token's escapes; raise ``SyntaxProblem`` on a bad escape."""
        return decode_string(str(tok), (tok.line or 1) + self.off, tok.column or 1)

    def tool_ref(self, tok: Token) -> tuple[str, ast.Span]:
        """A tool name written bare or quoted, and its span."""
        value = self.string(tok) if tok.type == "STRING" else str(tok)
        return value, self.tspan(tok)

    def ref(self, tok: Token) -> ast.Ref:
        """A dotted reference token as a ``Ref``."""
        root, *path = str(tok).split(".")
        return ast.Ref(root, tuple(path), self.tspan(tok))

    def operand(self, node: Any) -> ast.Expr:
        """An expression child: operands arrive as bare tokens (see the grammar)."""
        if not isinstance(node, Token):
            return node  # type: ignore[no-any-return]
        if node.type == "STRING":
            return ast.Literal(self.string(node), self.tspan(node))
        if node.type == "SIGNED_NUMBER":
            return ast.Literal(self.number(node), self.tspan(node))
        return self.ref(node)

    def number(self, tok: Token) -> int | float:
        """A number literal's value; raise ``SyntaxProblem`` when it is out of range."""
        return number_value(str(tok), (tok.line or 1) + self.off, tok.column or 1)

    # -- statements

    def empty(self, _children: list[Any]) -> None:
        """``;`` (at top level or inside a block)."""
        return None

    @v_args(meta=True)
    def namespace_decl(self, meta: Any, children: list[Token]) -> ast.NamespaceDecl:
        """``namespace NAME``: also the namespace of the statements that follow."""
        self.namespace = str(children[0])
        return ast.NamespaceDecl(self.namespace, self.mspan(meta))

    @v_args(meta=True)
    def req_action(self, meta: Any, children: list[Token]) -> _Item:
        """``action NAME`` in a requirement."""
        return ("action", children[0], self.mspan(meta))

    @v_args(meta=True)
    def req_resource(self, meta: Any, children: list[Any]) -> _Item:
        """``resource EXPR`` in a requirement."""
        return ("resource", children[0], self.mspan(meta))

    @v_args(meta=True)
    def call_resource(self, meta: Any, children: list[Token]) -> ast.PathResource:
        """``path(args.x)`` (the only resource function)."""
        span = self.mspan(meta)
        func = str(children[0])
        if func != "path":
            raise _SyntaxProblem(
                "SOS208",
                f"unknown resource function {func!r}: resources are path(args.x) or a string template",
                span.line,
                span.col,
                span.col + len(func),
            )
        return ast.PathResource(self.ref(children[1]), span)

    @v_args(meta=True)
    def template_resource(self, meta: Any, children: list[Token]) -> ast.TemplateResource:
        """``"{args.owner}/{args.repo}"``."""
        tok = children[0]
        raw = self.string(tok)
        parts = template_parts(raw, self.file, (tok.line or 1) + self.off, (tok.column or 1) + 1)
        return ast.TemplateResource(raw, parts, self.mspan(meta))

    @v_args(meta=True)
    def ref_resource(self, meta: Any, children: list[Token]) -> ast.TemplateResource:
        """``args.x``: the one-hole template."""
        ref = self.ref(children[0])
        return ast.TemplateResource("{" + ref.dotted + "}", (ref,), self.mspan(meta))

    @v_args(meta=True)
    def requirement(self, meta: Any, children: list[Any]) -> ast.Requirement:
        """``requirement TOOL { action NAME; resource EXPR }``."""
        tool, tool_span = self.tool_ref(children[0])
        action: str | None = None
        action_span: ast.Span | None = None
        resource: ast.ResourceExpr | None = None
        duplicate: list[ast.Span] = []
        for item in children[1:]:
            if item is None:
                continue
            clause, value, span = item
            if clause == "action":
                if action is not None:
                    duplicate.append(span)
                action = str(value)
                action_span = self.tspan(value)
            else:
                if resource is not None:
                    duplicate.append(span)
                resource = value
        if duplicate:
            first = duplicate[0]
            raise _SyntaxProblem(
                "SOS209",
                f"requirement {tool} declares its action or resource more than once",
                first.line,
                first.col,
                first.end_col if first.end_line == first.line else None,
            )
        return ast.Requirement(
            tool, self.namespace, action, resource, self.mspan(meta), tool_span, action_span
        )

    @v_args(meta=True)
    def annotation(self, meta: Any, children: list[Token]) -> ast.Annotation:
        """``@name("value")``."""
        return ast.Annotation(str(children[0]), self.string(children[1]), self.mspan(meta))

    @v_args(meta=True)
    def rule(self, meta: Any, children: list[Any]) -> ast.Rule:
        """``[@id(...)] permit|forbid ACTIONS on PATTERN [when COND] [unless COND]``."""
        i = 0
        annotations: list[ast.Annotation] = []
        while isinstance(children[i], ast.Annotation):
            annotations.append(children[i])
            i += 1
        effect_tok: Token = children[i]
        i += 1
        action_toks: list[Token] = []
        while isinstance(children[i], Token) and children[i].type in ("STAR", "NAME"):
            action_toks.append(children[i])
            i += 1
        pattern_tok: Token = children[i]
        pattern = ast.Pattern(self.string(pattern_tok), self.tspan(pattern_tok))
        clauses = dict(children[i + 1 :])
        # The rule's position is its keyword, so the auto id names the permit/forbid line.
        effect_span = self.tspan(effect_tok)
        end = self.mspan(meta)
        effect: Any = str(effect_tok)
        return ast.Rule(
            effect,
            tuple(str(t) for t in action_toks),
            pattern,
            clauses.get("when"),
            clauses.get("unless"),
            self.namespace,
            tuple(annotations),
            ast.Span(self.file, effect_span.line, effect_span.col, end.end_line, end.end_col),
            tuple(self.tspan(t) for t in action_toks),
        )

    @v_args(meta=True)
    def approval_rule(self, meta: Any, children: list[Any]) -> ast.Rule:
        """``[@id(...)] require approval by APPROVERS for ACTIONS on PATTERN [when] [unless]``."""
        i = 0
        annotations: list[ast.Annotation] = []
        while isinstance(children[i], ast.Annotation):
            annotations.append(children[i])
            i += 1
        keyword: Token = children[i]
        i += 1
        approvers: list[ast.Approver] = []
        while isinstance(children[i], ast.Approver):
            approvers.append(children[i])
            i += 1
        action_toks: list[Token] = []
        while isinstance(children[i], Token) and children[i].type in ("STAR", "NAME"):
            action_toks.append(children[i])
            i += 1
        pattern_tok: Token = children[i]
        pattern = ast.Pattern(self.string(pattern_tok), self.tspan(pattern_tok))
        clauses = dict(children[i + 1 :])
        # The rule's position is its 'require' keyword, as a permit's is 'permit'.
        start = self.tspan(keyword)
        end = self.mspan(meta)
        return ast.Rule(
            "approval",
            tuple(str(t) for t in action_toks),
            pattern,
            clauses.get("when"),
            clauses.get("unless"),
            self.namespace,
            tuple(annotations),
            ast.Span(self.file, start.line, start.col, end.end_line, end.end_col),
            tuple(self.tspan(t) for t in action_toks),
            tuple(approvers),
        )

    @v_args(meta=True)
    def approver(self, meta: Any, children: list[Token]) -> ast.Approver:
        """``role "NAME"`` or ``group "NAME"`` in an approval rule's ``by`` list."""
        kind: Any = str(children[0])
        return ast.Approver(kind, self.string(children[1]), self.mspan(meta))

    def when_clause(self, children: list[Any]) -> tuple[str, ast.Expr]:
        """``when COND``."""
        return ("when", self.operand(children[0]))

    def unless_clause(self, children: list[Any]) -> tuple[str, ast.Expr]:
        """``unless COND``."""
        return ("unless", self.operand(children[0]))

    @v_args(meta=True)
    def condition_decl(self, meta: Any, children: list[Any]) -> ast.ConditionDecl:
        """``condition NAME = EXPR``."""
        name: Token = children[0]
        return ast.ConditionDecl(
            str(name), self.operand(children[1]), self.namespace, self.mspan(meta), self.tspan(name)
        )

    @v_args(meta=True)
    def tp_mode(self, meta: Any, children: list[Token]) -> _Item:
        """``mode NAME`` in a toolpolicy."""
        return ("mode", children[0], self.mspan(meta))

    def tp_entry(self, children: list[Token]) -> ast.ToolPolicyEntry:
        """One toolpolicy list entry, bare or quoted."""
        tok = children[0]
        quoted = tok.type == "STRING"
        return ast.ToolPolicyEntry(
            self.string(tok) if quoted else str(tok), quoted, self.tspan(tok)
        )

    def tp_entries(self, children: list[ast.ToolPolicyEntry]) -> list[ast.ToolPolicyEntry]:
        """A toolpolicy list's entries."""
        return children

    def tp_list(self, children: list[Any]) -> _Item:
        """``managed|harness_local|external_direct ENTRIES``."""
        key = children[0]
        entries = children[1] if len(children) > 1 else []
        return (str(key), tuple(entries), self.tspan(key))

    @v_args(meta=True)
    def toolpolicy(self, meta: Any, children: list[Any]) -> ast.ToolPolicyDecl:
        """``toolpolicy NAME { mode ...; managed ...; ... }``."""
        name, name_span = self.tool_ref(children[0])
        mode: str | None = None
        mode_span: ast.Span | None = None
        lists: dict[str, tuple[ast.ToolPolicyEntry, ...]] = {}
        clause_spans: list[tuple[str, ast.Span]] = []
        for item in children[1:]:
            if item is None:
                continue
            clause, value, span = item
            clause_spans.append((clause, span))
            if clause == "mode":
                mode = str(value)
                mode_span = self.tspan(value)
            else:
                lists[clause] = lists.get(clause, ()) + value
        return ast.ToolPolicyDecl(
            name=name,
            mode=mode,
            managed=lists.get("managed"),
            harness_local=lists.get("harness_local"),
            external_direct=lists.get("external_direct"),
            span=self.mspan(meta),
            name_span=name_span,
            mode_span=mode_span,
            clause_spans=tuple(clause_spans),
        )

    @v_args(meta=True)
    def test_context(self, meta: Any, children: list[Any]) -> _Item:
        """``context {...}`` in a test."""
        self._clause_pairs["context"] = self._pair_spans
        return ("context", children[0], self.mspan(meta))

    @v_args(meta=True)
    def test_call(self, meta: Any, children: list[Any]) -> _Item:
        """``call TOOL [{...}]`` in a test."""
        self._clause_pairs["call"] = self._pair_spans if len(children) > 1 else ()
        return ("call", children, self.mspan(meta))

    @v_args(meta=True)
    def test_expect(self, meta: Any, children: list[Token]) -> _Item:
        """``expect allow|deny [REASON]`` in a test."""
        return ("expect", children, self.mspan(meta))

    @v_args(meta=True)
    def test_approver(self, meta: Any, children: list[Any]) -> _Item:
        """``approver {...}`` in a test: decide the call as approved by that person."""
        self._clause_pairs["approver"] = self._pair_spans
        return ("approver", children[0], self.mspan(meta))

    @v_args(meta=True)
    def test_skip(self, meta: Any, children: list[Token]) -> _Item:
        """``skip ["reason"]`` in a test."""
        return ("skip", self.string(children[0]) if children else "", self.mspan(meta))

    @v_args(meta=True)
    def test_policy(self, meta: Any, children: list[Token]) -> _Item:
        """``policy NAME`` in a test."""
        return ("policy", children[0], self.mspan(meta))

    @v_args(meta=True)
    def test_block(self, meta: Any, children: list[Any]) -> ast.TestBlock:
        """``test "name" { [policy NAME] context {...} call TOOL {...} expect ... }``."""
        try:
            return self._test_block(meta, children)
        finally:
            self._duplicates = []
            self._clause_pairs = {}

    def _test_block(self, meta: Any, children: list[Any]) -> ast.TestBlock:
        name = self.string(children[0])
        fields: dict[str, Any] = {}
        spans: dict[str, ast.Span] = {}
        for item in children[1:]:
            if item is None:
                continue
            clause, value, span = item
            if clause in fields:
                raise _SyntaxProblem(
                    "SOS402",
                    f"test {name!r} has more than one '{clause}' clause",
                    span.line,
                    span.col,
                    span.end_col if span.end_line == span.line else None,
                )
            fields[clause] = value
            spans[clause] = span
        tool: str | None = None
        tool_span: ast.Span | None = None
        args: dict[str, ast.Value] = {}
        if "call" in fields:
            tool, tool_span = self.tool_ref(fields["call"][0])
            if len(fields["call"]) > 1:
                args = fields["call"][1]
        effect: Any = None
        reason: str | None = None
        expect_span: ast.Span | None = None
        reason_span: ast.Span | None = None
        if "expect" in fields:
            effect_tok, *reason_tok = fields["expect"]
            effect = str(effect_tok)
            expect_span = self.tspan(effect_tok)
            if reason_tok:
                reason = str(reason_tok[0])
                reason_span = self.tspan(reason_tok[0])
        policy: str | None = None
        policy_span: ast.Span | None = None
        if "policy" in fields:
            policy, policy_span = self.tool_ref(fields["policy"])
        return ast.TestBlock(
            name=name,
            namespace=self.namespace,
            context=fields.get("context", {}),
            tool=tool,
            args=args,
            expect_effect=effect,
            expect_reason=reason,
            span=self.mspan(meta),
            tool_span=tool_span,
            expect_span=expect_span,
            policy=policy,
            policy_span=policy_span,
            reason_span=reason_span,
            context_span=spans.get("context"),
            skip=fields.get("skip"),
            duplicate_keys=tuple(self._duplicates),
            call_span=spans.get("call"),
            context_pair_spans=self._clause_pairs.get("context", ()),
            args_pair_spans=self._clause_pairs.get("call", ()),
            approver=fields.get("approver"),
            approver_span=spans.get("approver"),
            approver_pair_spans=self._clause_pairs.get("approver", ()),
        )

    # -- test values

    def object(self, children: list[tuple[str, ast.Value, ast.Span]]) -> dict[str, ast.Value]:
        """``{ key: value, ... }`` (a key written twice is recorded: the checker reports it)."""
        out: dict[str, ast.Value] = {}
        for key, value, span in children:
            if key in out:
                self._duplicates.append(span)
            out[key] = value
        # objects are built inside out: the last one built is a clause's own
        self._pair_spans = tuple(span for _key, _value, span in children)
        return out

    def pair(self, children: list[Any]) -> tuple[str, ast.Value, ast.Span]:
        """``key: value`` (key bare or quoted)."""
        key_tok: Token = children[0]
        key = self.string(key_tok) if key_tok.type == "STRING" else str(key_tok)
        return key, children[1], self.tspan(key_tok)

    def v_string(self, children: list[Token]) -> str:
        """A string value."""
        return self.string(children[0])

    def v_number(self, children: list[Token]) -> int | float:
        """A number value."""
        return self.number(children[0])

    def v_true(self, _children: list[Any]) -> bool:
        """``true``."""
        return True

    def v_false(self, _children: list[Any]) -> bool:
        """``false``."""
        return False

    def v_null(self, _children: list[Any]) -> None:
        """``null``."""
        return None

    def v_list(self, children: list[ast.Value]) -> list[ast.Value]:
        """``[a, b, ...]``."""
        return list(children)

    # -- expressions

    @v_args(meta=True)
    def or_op(self, meta: Any, children: list[Any]) -> ast.BoolOp:
        """``a or b or ...``."""
        return ast.BoolOp("or", tuple(self.operand(c) for c in children), self.mspan(meta))

    @v_args(meta=True)
    def and_op(self, meta: Any, children: list[Any]) -> ast.BoolOp:
        """``a and b and ...``."""
        return ast.BoolOp("and", tuple(self.operand(c) for c in children), self.mspan(meta))

    @v_args(meta=True)
    def not_op(self, meta: Any, children: list[Any]) -> ast.Not:
        """``not a``."""
        return ast.Not(self.operand(children[0]), self.mspan(meta))

    @v_args(meta=True)
    def has_op(self, meta: Any, children: list[Token]) -> ast.Has:
        """``has args.x``: is the attribute present?"""
        return ast.Has(self.ref(children[0]), self.mspan(meta))

    @v_args(meta=True)
    def concat(self, meta: Any, children: list[Any]) -> ast.Concat:
        """``a + b + ...``."""
        return ast.Concat(tuple(self.operand(c) for c in children), self.mspan(meta))

    @v_args(meta=True)
    def compare(self, meta: Any, children: list[Any]) -> ast.Compare:
        """``a == b``, ``a != b``, ``a < b``, ``a <= b``, ``a > b``, ``a >= b``."""
        op: Any = str(children[1])
        return ast.Compare(
            op, self.operand(children[0]), self.operand(children[2]), self.mspan(meta)
        )

    @v_args(meta=True)
    def in_op(self, meta: Any, children: list[Any]) -> ast.Compare:
        """``a in b``."""
        return ast.Compare(
            "in", self.operand(children[0]), self.operand(children[1]), self.mspan(meta)
        )

    @v_args(meta=True)
    def not_in_op(self, meta: Any, children: list[Any]) -> ast.Compare:
        """``a not in b``."""
        return ast.Compare(
            "not in", self.operand(children[0]), self.operand(children[1]), self.mspan(meta)
        )

    @v_args(meta=True)
    def e_true(self, meta: Any, _children: list[Any]) -> ast.Literal:
        """``true`` in an expression."""
        return ast.Literal(True, self.mspan(meta))

    @v_args(meta=True)
    def e_false(self, meta: Any, _children: list[Any]) -> ast.Literal:
        """``false`` in an expression."""
        return ast.Literal(False, self.mspan(meta))

    @v_args(meta=True)
    def call(self, meta: Any, children: list[Any]) -> ast.Call:
        """``f(a, ...)``."""
        return ast.Call(
            str(children[0]), tuple(self.operand(c) for c in children[1:]), self.mspan(meta)
        )

    @v_args(meta=True)
    def e_list(self, meta: Any, children: list[Any]) -> ast.ListExpr:
        """``[a, b, ...]`` in an expression."""
        return ast.ListExpr(tuple(self.operand(c) for c in children), self.mspan(meta))


# ------------------------------------------------------ fast path merge


def _parse_fast(text: str, filename: str) -> list[ast.Statement] | None:
    """Parse with the one-line statements built by ``fastpath`` and the rest by Lark;
    None when the Lark path alone must decide."""
    try:
        fast = scan(text, filename)
    except RecursionError:
        # The fast path reads conditions by recursive descent, several frames per
        # level of nesting; called with little of the stack left, Lark decides.
        return None
    if fast.complete:
        return [statement for _, statement in fast.statements]
    if not fast.statements:
        return None
    lines = text.split("\n")
    rest = "\n".join("" if (i + 1) in fast.lines else line for i, line in enumerate(lines))
    try:
        tree = parser().parse(rest)
    except _PARSE_ERRORS:
        return None
    used = sorted(fast.lines)
    builder = AstBuilder(filename, 0)
    out: list[ast.Statement] = []
    items = fast.statements
    k = 0
    try:
        for child in tree.children:
            meta: Any = getattr(child, "meta", None)
            if not getattr(meta, "empty", True):
                start, end = meta.line, meta.end_line
                while k < len(items) and items[k][0] < start:
                    out.append(_in_namespace(items[k][1], builder.namespace))
                    k += 1
                j = bisect.bisect_left(used, start)
                if j < len(used) and used[j] <= end:
                    return None  # a Lark statement spans a fast line: not what it seemed
            statement = builder.statement(child)
            if statement is not None:
                out.append(statement)
    except (_SyntaxProblem, RecursionError):
        return None
    while k < len(items):
        out.append(_in_namespace(items[k][1], builder.namespace))
        k += 1
    return out


def _in_namespace(statement: ast.Statement, namespace: str) -> ast.Statement:
    if not isinstance(statement, ast.Rule | ast.Requirement) or statement.namespace == namespace:
        return statement
    return dataclasses.replace(statement, namespace=namespace)
