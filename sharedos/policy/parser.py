"""Parse ``.sos`` text into the typed AST, reporting every syntax error.

``parse_source`` never raises: whatever the input, it returns the statements it
could read and a list of diagnostics. After a syntax error it resumes at the
next top-level statement (a line whose first word is ``namespace``,
``requirement``, ``permit``, ``forbid``, ``toolpolicy``, ``test`` or an ``@``
annotation), so several errors in one file are all reported.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import (
    LarkError,
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
)

from sharedos.policy import ast
from sharedos.policy.diagnostics import Diagnostic, make
from sharedos.policy.lexer import FastContextualLexer
from sharedos.resources import grammar_path

#: Bumped whenever the meaning of the grammar or the compiled form changes.
GRAMMAR_VERSION = "1"
#: Whether one-line rules skip Lark (see ``_parse_fast``); tests compare both paths.
_FAST_ENABLED = True

_TOP_KEYWORDS = ("namespace", "requirement", "permit", "forbid", "toolpolicy", "test")
_TOP_LINE_RE = re.compile(r"^[ \t]*(?:@|(?:namespace|requirement|permit|forbid|toolpolicy|test)\b)")
_ANNOTATION_ONLY_RE = re.compile(
    r'^[ \t]*@[A-Za-z_][A-Za-z0-9_]*\s*\(\s*"(?:[^"\\\n]|\\.)*"\s*\)\s*(?:#.*)?$'
)
_HOLE_RE = re.compile(r"\{([^{}]*)\}")
_DOTTED_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")


@lru_cache(maxsize=1)
def grammar_text() -> str:
    """The grammar file's text (located with ``sharedos.resources.grammar_path``)."""
    return grammar_path().read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _parser() -> Lark:
    # Built once per process; a Lark LALR parser is immutable after
    # construction and safe to reuse for every parse.
    return Lark(
        grammar_text(),
        parser="lalr",
        lexer=FastContextualLexer,
        propagate_positions=True,
        maybe_placeholders=False,
    )


@dataclass(frozen=True, slots=True)
class ParseResult:
    """The (possibly partial) file and the syntax diagnostics found."""

    file: ast.PolicyFile
    diagnostics: tuple[Diagnostic, ...]


class _SyntaxProblem(Exception):
    """A construct the grammar accepts but whose content is malformed (bad escape...)."""

    def __init__(
        self, code: str, message: str, line: int, col: int, end_col: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.line = line
        self.col = col
        self.end_col = end_col


def parse_source(text: str, filename: str = "<string>") -> ParseResult:
    """Parse ``text``; never raises. Diagnostics carry ``filename`` positions."""
    if not isinstance(text, str):
        text = str(text)
    comments = tuple(_scan_comments(text, filename))
    fast = _parse_fast(text, filename) if _FAST_ENABLED else None
    if fast is not None:
        return ParseResult(ast.PolicyFile(filename, text, tuple(fast), comments), ())
    try:
        statements = _parse_chunk(text, _Builder(filename, 0))
        return ParseResult(ast.PolicyFile(filename, text, tuple(statements), comments), ())
    except (LarkError, _SyntaxProblem, RecursionError):
        pass
    # Error path: parse statement by statement so that every error is reported.
    diagnostics: list[Diagnostic] = []
    statements = []
    builder = _Builder(filename, 0)
    for line_offset, chunk in _chunks(text):
        builder.off = line_offset
        try:
            statements.extend(_parse_chunk(chunk, builder))
        except (LarkError, _SyntaxProblem, RecursionError) as exc:
            diagnostics.append(_diagnostic(exc, chunk, filename, line_offset, text))
    if not diagnostics:  # the whole failed but every chunk parsed: report the whole's error
        try:
            _parse_chunk(text, _Builder(filename, 0))
        except (LarkError, _SyntaxProblem, RecursionError) as exc:
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
    for i, line in enumerate(lines):
        if i > start and _TOP_LINE_RE.match(line):
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


def _parse_chunk(chunk: str, builder: _Builder) -> list[ast.Statement]:
    tree = _parser().parse(chunk)
    # Statements are built in source order, so the builder's current
    # namespace is the one in force where each statement was written.
    return [s for s in (builder.statement(child) for child in tree.children) if s is not None]


# ------------------------------------------------------------- diagnostics

_TOKEN_WORDS = {
    "NAME": "a name",
    "REF": "a name",
    "TOOL": "a tool name",
    "TOOLPAT": "a tool name or pattern",
    "STRING": "a string",
    "SIGNED_NUMBER": "a number",
    "EFFECT": "'permit' or 'forbid'",
    "COND_KW": "'when' or 'unless'",
    "TP_LIST": "'managed', 'harness_local' or 'external_direct'",
    "EXPECT_EFFECT": "'allow' or 'deny'",
    "COMPARE_OP": "'==' or '!='",
    "STAR": "'*'",
    "$END": "end of file",
}


def _describe_terminal(name: str) -> str:
    if name in _TOKEN_WORDS:
        return _TOKEN_WORDS[name]
    try:
        term = _parser().get_terminal(name)
    except (KeyError, LarkError):
        return name
    pattern = term.pattern
    if pattern.type == "str":
        return repr(pattern.value)
    return name


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
        expected = sorted({_describe_terminal(t) for t in exc.expected})
        shown = ", ".join(expected[:8]) + (", ..." if len(expected) > 8 else "")
        line = (token.line or 1) + line_offset
        col = token.column or 1
        end_col = (token.end_column or col + 1) if token.end_line == token.line else col + 1
        return make(
            "SOS101",
            f"unexpected {_describe_token(token)}; expected {shown}",
            file=filename,
            source=full,
            line=line,
            col=col,
            end_col=end_col,
        )
    if isinstance(exc, UnexpectedToken | UnexpectedEOF):
        expected = sorted({_describe_terminal(t) for t in exc.expected})
        shown = ", ".join(expected[:8]) + (", ..." if len(expected) > 8 else "")
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
        allowed = sorted({_describe_terminal(t) for t in (exc.allowed or set())})
        shown = ", ".join(allowed[:8]) + (", ..." if len(allowed) > 8 else "")
        return make(
            "SOS102",
            f"invalid character {char!r} here" + (f"; expected {shown}" if shown else ""),
            file=filename,
            source=full,
            line=line,
            col=col,
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

_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "/": "/"}


class _Builder:
    """Turn one Lark tree into AST statements, shifting lines by ``line_offset``."""

    def __init__(self, filename: str, line_offset: int) -> None:
        self.file = filename
        self.off = line_offset
        self.namespace = ast.DEFAULT_NAMESPACE

    # -- spans
    def tspan(self, tok: Any) -> ast.Span:
        line = (tok.line or 1) + self.off
        end_line = (tok.end_line or tok.line or 1) + self.off
        return ast.Span(
            self.file, line, tok.column or 1, end_line, tok.end_column or (tok.column or 1) + 1
        )

    def nspan(self, tree: Any) -> ast.Span:
        meta = tree.meta
        if getattr(meta, "empty", True):
            return ast.Span(self.file, self.off + 1, 1, self.off + 1, 2)
        return ast.Span(
            self.file, meta.line + self.off, meta.column, meta.end_line + self.off, meta.end_column
        )

    def span(self, node: Any) -> ast.Span:
        return self.tspan(node) if isinstance(node, Token) else self.nspan(node)

    def string(self, tok: Any) -> str:
        """Decode a STRING token's escapes; raise ``_SyntaxProblem`` on a bad escape."""
        raw = str(tok)[1:-1]
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
            elif nxt == "u" and re.fullmatch(r"[0-9A-Fa-f]{4}", raw[i + 2 : i + 6]):
                out.append(chr(int(raw[i + 2 : i + 6], 16)))
                i += 6
            else:
                col = (tok.column or 1) + 1 + i
                raise _SyntaxProblem(
                    "SOS104",
                    f"invalid escape sequence '\\{nxt}' in string literal",
                    (tok.line or 1) + self.off,
                    col,
                    col + 2,
                )
        return "".join(out)

    # -- statements
    def statement(self, node: Any) -> ast.Statement | None:
        kind = node.data
        if kind == "empty":
            return None
        if kind == "namespace_decl":
            tok = node.children[0]
            self.namespace = str(tok)
            return ast.NamespaceDecl(str(tok), self.nspan(node))
        if kind == "requirement":
            return self.requirement(node)
        if kind == "rule":
            return self.rule(node)
        if kind == "toolpolicy":
            return self.toolpolicy(node)
        if kind == "test_block":
            return self.test_block(node)
        raise _SyntaxProblem("SOS101", f"unexpected statement {kind}", self.nspan(node).line, 1)

    def tool_ref(self, tok: Any) -> tuple[str, ast.Span]:
        value = self.string(tok) if tok.type == "STRING" else str(tok)
        return value, self.tspan(tok)

    def requirement(self, node: Any) -> ast.Requirement:
        tool, tool_span = self.tool_ref(node.children[0])
        action: str | None = None
        action_span: ast.Span | None = None
        resource: ast.ResourceExpr | None = None
        duplicate: list[ast.Span] = []
        for item in node.children[1:]:
            if not isinstance(item, Tree) or item.data == "empty":
                continue
            if item.data == "req_action":
                if action is not None:
                    duplicate.append(self.nspan(item))
                action = str(item.children[0])
                action_span = self.tspan(item.children[0])
            elif item.data == "req_resource":
                if resource is not None:
                    duplicate.append(self.nspan(item))
                resource = self.resource_expr(item.children[0])
        span = self.nspan(node)
        if duplicate:
            # Recorded as a requirement without action so the checker reports SOS209 at the repeat.
            first = duplicate[0]
            raise _SyntaxProblem(
                "SOS209",
                f"requirement {tool} declares its action or resource more than once",
                first.line,
                first.col,
                first.end_col if first.end_line == first.line else None,
            )
        return ast.Requirement(tool, self.namespace, action, resource, span, tool_span, action_span)

    def resource_expr(self, node: Any) -> ast.ResourceExpr:
        span = self.nspan(node)
        if node.data == "call_resource":
            func = str(node.children[0])
            ref = self.ref_token(node.children[1])
            if func != "path":
                raise _SyntaxProblem(
                    "SOS208",
                    f"unknown resource function {func!r}: resources are path(args.x) or a string template",
                    span.line,
                    span.col,
                    span.col + len(func),
                )
            return ast.PathResource(ref, span)
        if node.data == "template_resource":
            tok = node.children[0]
            raw = self.string(tok)
            return ast.TemplateResource(raw, self.template_parts(raw, tok), span)
        # a bare reference is the one-hole template
        ref = self.ref_token(node.children[0])
        return ast.TemplateResource("{" + ref.dotted + "}", (ref,), span)

    def template_parts(self, raw: str, tok: Token) -> tuple[str | ast.Ref, ...]:
        parts: list[str | ast.Ref] = []
        pos = 0
        base_col = (tok.column or 1) + 1
        line = (tok.line or 1) + self.off
        for m in _HOLE_RE.finditer(raw):
            if m.start() > pos:
                parts.append(raw[pos : m.start()])
            inner = m.group(1).strip()
            col = base_col + m.start()
            if not _DOTTED_RE.match(inner):
                raise _SyntaxProblem(
                    "SOS208",
                    f"template hole {{{m.group(1)}}} is not a reference such as {{args.name}}",
                    line,
                    col,
                    col + len(m.group(0)),
                )
            root, *rest = inner.split(".")
            parts.append(
                ast.Ref(
                    root, tuple(rest), ast.Span(self.file, line, col, line, col + len(m.group(0)))
                )
            )
            pos = m.end()
        if pos < len(raw):
            parts.append(raw[pos:])
        for part in parts:
            if isinstance(part, str) and ("{" in part or "}" in part):
                raise _SyntaxProblem(
                    "SOS208",
                    "unbalanced '{' or '}' in resource template",
                    line,
                    base_col,
                    base_col + len(raw),
                )
        return tuple(parts)

    def rule(self, node: Any) -> ast.Rule:
        children = list(node.children)
        annotations: list[ast.Annotation] = []
        while children and isinstance(children[0], Tree) and children[0].data == "annotation":
            ann = children.pop(0)
            annotations.append(
                ast.Annotation(str(ann.children[0]), self.string(ann.children[1]), self.nspan(ann))
            )
        effect_tok = children.pop(0)
        action_toks = []
        while children and children[0].type in ("STAR", "NAME"):
            action_toks.append(children.pop(0))
        pattern_tok = children.pop(0)
        actions: tuple[str, ...] = tuple(str(t) for t in action_toks)
        action_spans: tuple[ast.Span, ...] = tuple(self.tspan(t) for t in action_toks)
        pattern = ast.Pattern(self.string(pattern_tok), self.tspan(pattern_tok))
        condition: ast.Expr | None = None
        kind: Any = None
        if children:
            kind = str(children[0])
            condition = self.expr(children[1])
        # The rule's position is its keyword, so the auto id names the permit/forbid line.
        effect_span = self.tspan(effect_tok)
        end = self.nspan(node)
        span = ast.Span(self.file, effect_span.line, effect_span.col, end.end_line, end.end_col)
        effect: Any = str(effect_tok)
        return ast.Rule(
            effect,
            actions,
            pattern,
            condition,
            kind,
            self.namespace,
            tuple(annotations),
            span,
            action_spans,
        )

    def toolpolicy(self, node: Any) -> ast.ToolPolicyDecl:
        name, name_span = self.tool_ref(node.children[0])
        mode: str | None = None
        mode_span: ast.Span | None = None
        lists: dict[str, tuple[ast.ToolPolicyEntry, ...]] = {}
        clause_spans: list[tuple[str, ast.Span]] = []
        for item in node.children[1:]:
            if not isinstance(item, Tree) or item.data == "empty":
                continue
            if item.data == "tp_mode":
                clause_spans.append(("mode", self.nspan(item)))
                mode = str(item.children[0])
                mode_span = self.tspan(item.children[0])
            elif item.data == "tp_list":
                key = str(item.children[0])
                clause_spans.append((key, self.tspan(item.children[0])))
                entries: list[ast.ToolPolicyEntry] = []
                if len(item.children) > 1:
                    for entry in item.children[1].children:
                        tok: Any = entry.children[0]
                        quoted = tok.type == "STRING"
                        value = self.string(tok) if quoted else str(tok)
                        entries.append(ast.ToolPolicyEntry(value, quoted, self.tspan(tok)))
                lists[key] = lists.get(key, ()) + tuple(entries)
        return ast.ToolPolicyDecl(
            name=name,
            mode=mode,
            managed=lists.get("managed"),
            harness_local=lists.get("harness_local"),
            external_direct=lists.get("external_direct"),
            span=self.nspan(node),
            name_span=name_span,
            mode_span=mode_span,
            clause_spans=tuple(clause_spans),
        )

    def test_block(self, node: Any) -> ast.TestBlock:
        name = self.string(node.children[0])
        context: dict[str, ast.Value] = {}
        tool: str | None = None
        tool_span: ast.Span | None = None
        args: dict[str, ast.Value] = {}
        effect: Any = None
        reason: str | None = None
        expect_span: ast.Span | None = None
        reason_span: ast.Span | None = None
        seen: set[str] = set()
        policy: str | None = None
        policy_span: ast.Span | None = None
        for item in node.children[1:]:
            if not isinstance(item, Tree) or item.data == "empty":
                continue
            if item.data in seen:
                sp = self.nspan(item)
                raise _SyntaxProblem(
                    "SOS402",
                    f"test {name!r} has more than one '{item.data.removeprefix('test_')}' clause",
                    sp.line,
                    sp.col,
                    sp.end_col if sp.end_line == sp.line else None,
                )
            seen.add(item.data)
            if item.data == "test_context":
                obj = self.value(item.children[0])
                assert isinstance(obj, dict)
                context = obj
            elif item.data == "test_call":
                tool, tool_span = self.tool_ref(item.children[0])
                if len(item.children) > 1:
                    obj = self.value(item.children[1])
                    assert isinstance(obj, dict)
                    args = obj
            elif item.data == "test_policy":
                policy, policy_span = self.tool_ref(item.children[0])
            elif item.data == "test_expect":
                effect = str(item.children[0])
                expect_span = self.tspan(item.children[0])
                if len(item.children) > 1:
                    reason = str(item.children[1])
                    reason_span = self.tspan(item.children[1])
        return ast.TestBlock(
            name=name,
            namespace=self.namespace,
            context=context,
            tool=tool,
            args=args,
            expect_effect=effect,
            expect_reason=reason,
            span=self.nspan(node),
            tool_span=tool_span,
            expect_span=expect_span,
            policy=policy,
            policy_span=policy_span,
            reason_span=reason_span,
        )

    def value(self, node: Any) -> ast.Value:
        if isinstance(node, Token):  # pragma: no cover - the grammar wraps values
            return str(node)
        kind = node.data
        if kind == "object":
            out: dict[str, ast.Value] = {}
            for pair in node.children:
                key_tok = pair.children[0]
                key = self.string(key_tok) if key_tok.type == "STRING" else str(key_tok)
                out[key] = self.value(pair.children[1])
            return out
        if kind == "v_string":
            return self.string(node.children[0])
        if kind == "v_number":
            return _number(str(node.children[0]))
        if kind == "v_true":
            return True
        if kind == "v_false":
            return False
        if kind == "v_null":
            return None
        if kind == "v_list":
            return [self.value(c) for c in node.children]
        raise _SyntaxProblem("SOS101", f"unexpected value {kind}", self.nspan(node).line, 1)

    # -- expressions
    def ref_token(self, tok: Any) -> ast.Ref:
        root, *path = str(tok).split(".")
        return ast.Ref(root, tuple(path), self.tspan(tok))

    def expr(self, node: Any) -> ast.Expr:
        if isinstance(node, Token):
            if node.type == "STRING":
                return ast.Literal(self.string(node), self.tspan(node))
            if node.type == "SIGNED_NUMBER":
                return ast.Literal(_number(str(node)), self.tspan(node))
            return self.ref_token(node)
        kind = node.data
        span = self.nspan(node)
        if kind == "or_op" or kind == "and_op":
            op: Any = "or" if kind == "or_op" else "and"
            return ast.BoolOp(op, self.expr(node.children[0]), self.expr(node.children[1]), span)
        if kind == "not_op":
            return ast.Not(self.expr(node.children[0]), span)
        if kind == "compare":
            cmp_op: Any = str(node.children[1])
            return ast.Compare(
                cmp_op, self.expr(node.children[0]), self.expr(node.children[2]), span
            )
        if kind == "in_op":
            return ast.Compare("in", self.expr(node.children[0]), self.expr(node.children[1]), span)
        if kind == "not_in_op":
            return ast.Compare(
                "not in", self.expr(node.children[0]), self.expr(node.children[1]), span
            )
        if kind == "e_true":
            return ast.Literal(True, span)
        if kind == "e_false":
            return ast.Literal(False, span)
        if kind == "call":
            func = str(node.children[0])
            return ast.Call(func, tuple(self.expr(c) for c in node.children[1:]), span)
        if kind == "e_list":
            return ast.ListExpr(tuple(self.expr(c) for c in node.children), span)
        raise _SyntaxProblem("SOS101", f"unexpected expression {kind}", span.line, span.col)


def _number(text: str) -> int | float:
    if re.fullmatch(r"-?(?:0|[1-9][0-9]*)", text):
        return int(text)
    return float(text)


# ------------------------------------------------------ fast path for rules
#
# A 10,000-rule policy spends most of its compile time in Lark building trees
# for one-line rules. Lines that are a complete rule of the simplest shape
# (``permit|forbid ACTIONS on "PATTERN" [when|unless CMP {and|or CMP}]`` with
# string, number or reference operands, no escapes, no annotations) are built
# here directly; everything else still goes through Lark. The result is the
# AST Lark's path builds (tests/policy/test_parser.py compares the two), and
# any doubt -- a syntax error anywhere, a Lark statement spanning a fast line
# -- falls back to the full Lark parse, so diagnostics never change.

_FAST_START_RE = re.compile(r"[ \t]*(?:permit|forbid)[ \t]")
_FAST_TOKEN_RE = re.compile(
    r'[ \t\r\f]*(?:(?P<s>"[^"\\\n]*")'
    r"|(?P<n>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(?![A-Za-z0-9_.])"
    r"|(?P<w>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
    r"|(?P<o>==|!=|,|\*)"
    r"|(?P<c>#.*)|(?P<e>$))"
)
#: Words that a fast line never treats as a name or reference (Lark may lex them
#: as keywords in some parser state: such lines go through Lark).
_RESERVED = frozenset(
    {
        "permit",
        "forbid",
        "on",
        "when",
        "unless",
        "and",
        "or",
        "not",
        "in",
        "true",
        "false",
        "namespace",
        "requirement",
        "toolpolicy",
        "test",
    }
)
_NAMESPACE_LINE_RE = re.compile(r"[ \t]*namespace[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t\r\f]*(?:#.*)?$")
_BLANK_OR_COMMENT_RE = re.compile(r"[ \t\r\f]*(?:#.*)?$")
_NEXT_STATEMENT_RE = re.compile(
    r"[ \t\r\f]*(?:[@;]|(?:namespace|requirement|permit|forbid|toolpolicy|test)(?![A-Za-z0-9_]))"
)

#: A fast token: (kind, text, column).
_FastToken = tuple[str, str, int]


def _fast_tokens(line: str) -> list[_FastToken] | None:
    out: list[_FastToken] = []
    pos = 0
    end = len(line)
    match = _FAST_TOKEN_RE.match
    while True:
        m = match(line, pos)
        if m is None:
            return None
        kind = m.lastgroup or ""
        if kind in ("c", "e"):
            return out if m.end() == end else None
        start = m.start(kind)
        out.append((kind, m.group(kind), start + 1))
        pos = m.end()


class _FastLine:
    """Builds one rule from a line's tokens, or reports that it cannot (None)."""

    __slots__ = ("file", "i", "line", "toks")

    def __init__(self, file: str, line: int, toks: list[_FastToken]) -> None:
        self.file = file
        self.line = line
        self.toks = toks
        self.i = 0

    def span(self, tok: _FastToken) -> ast.Span:
        return ast.Span(self.file, self.line, tok[2], self.line, tok[2] + len(tok[1]))

    def peek(self) -> _FastToken | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def word(self, *values: str) -> _FastToken | None:
        tok = self.peek()
        if tok is not None and tok[0] == "w" and tok[1] in values:
            self.i += 1
            return tok
        return None

    def rule(self, namespace: str) -> ast.Rule | None:
        effect = self.word("permit", "forbid")
        if effect is None:
            return None
        actions: list[_FastToken] = []
        tok = self.peek()
        if tok is not None and tok[0] == "o" and tok[1] == "*":
            actions.append(tok)
            self.i += 1
        else:
            while True:
                tok = self.peek()
                if tok is None or tok[0] != "w" or "." in tok[1] or tok[1] in _RESERVED:
                    return None
                actions.append(tok)
                self.i += 1
                tok = self.peek()
                if tok is None or tok[1] != ",":
                    break
                self.i += 1
        if self.word("on") is None:
            return None
        pattern = self.peek()
        if pattern is None or pattern[0] != "s":
            return None
        self.i += 1
        condition: ast.Expr | None = None
        kind: Any = None
        end_col = pattern[2] + len(pattern[1])
        cond_kw = self.word("when", "unless")
        if cond_kw is not None:
            condition = self.disjunction()
            if condition is None:
                return None
            kind = cond_kw[1]
            end_col = condition.span.end_col
        if self.i != len(self.toks):
            return None
        effect_value: Any = effect[1]
        return ast.Rule(
            effect_value,
            tuple(t[1] for t in actions),
            ast.Pattern(pattern[1][1:-1], self.span(pattern)),
            condition,
            kind,
            namespace,
            (),
            ast.Span(self.file, self.line, effect[2], self.line, end_col),
            tuple(self.span(t) for t in actions),
        )

    def disjunction(self) -> ast.Expr | None:
        left = self.conjunction()
        while left is not None and self.word("or") is not None:
            right = self.conjunction()
            if right is None:
                return None
            left = ast.BoolOp("or", left, right, self._join(left, right))
        return left

    def conjunction(self) -> ast.Expr | None:
        left: ast.Expr | None = self.comparison()
        while left is not None and self.word("and") is not None:
            right = self.comparison()
            if right is None:
                return None
            left = ast.BoolOp("and", left, right, self._join(left, right))
        return left

    def _join(self, left: ast.Expr, right: ast.Expr) -> ast.Span:
        return ast.Span(self.file, self.line, left.span.col, self.line, right.span.end_col)

    def comparison(self) -> ast.Compare | None:
        left = self.operand()
        if left is None:
            return None
        tok = self.peek()
        if tok is None:
            return None
        op: Any
        if tok[0] == "o" and tok[1] in ("==", "!="):
            op = tok[1]
            self.i += 1
        elif self.word("in") is not None:
            op = "in"
        elif self.word("not") is not None:
            if self.word("in") is None:
                return None
            op = "not in"
        else:
            return None
        right = self.operand()
        if right is None:
            return None
        return ast.Compare(op, left, right, self._join(left, right))

    def operand(self) -> ast.Expr | None:
        tok = self.peek()
        if tok is None:
            return None
        kind, text, _col = tok
        if kind == "s":
            self.i += 1
            return ast.Literal(text[1:-1], self.span(tok))
        if kind == "n":
            self.i += 1
            return ast.Literal(_number(text), self.span(tok))
        if kind == "w" and text not in _RESERVED:
            self.i += 1
            root, *path = text.split(".")
            return ast.Ref(root, tuple(path), self.span(tok))
        return None


def _parse_fast(text: str, filename: str) -> list[ast.Statement] | None:
    """Parse with one-line rules built directly; None when the Lark path must decide."""
    lines = text.split("\n")
    fast: dict[int, ast.Rule] = {}
    guess = ast.DEFAULT_NAMESPACE  # the namespace in force, if the file parses as it looks
    for i, line in enumerate(lines):
        if not _FAST_START_RE.match(line) or "\\" in line:
            ns = _NAMESPACE_LINE_RE.match(line)
            if ns is not None:
                guess = ns.group(1)
            continue
        toks = _fast_tokens(line)
        if toks is None:
            continue
        # The next statement must start on a later line: nothing after this
        # line may continue the rule (a condition can span lines).
        j = i + 1
        while j < len(lines) and _BLANK_OR_COMMENT_RE.match(lines[j]):
            j += 1
        if j < len(lines) and not _NEXT_STATEMENT_RE.match(lines[j]):
            continue
        rule = _FastLine(filename, i + 1, toks).rule(guess)
        if rule is not None:
            fast[i + 1] = rule
    if len(fast) < 64:
        return None  # not worth it: the Lark path alone
    rest = "\n".join("" if (i + 1) in fast else line for i, line in enumerate(lines))
    try:
        tree = _parser().parse(rest)
    except (LarkError, RecursionError):
        return None
    fast_lines = sorted(fast)
    builder = _Builder(filename, 0)
    out: list[ast.Statement] = []
    k = 0
    try:
        for child in tree.children:
            meta: Any = getattr(child, "meta", None)
            if not getattr(meta, "empty", True):
                start, end = meta.line, meta.end_line
                while k < len(fast_lines) and fast_lines[k] < start:
                    out.append(_in_namespace(fast[fast_lines[k]], builder.namespace))
                    k += 1
                if k < len(fast_lines) and fast_lines[k] < end:
                    return None  # a Lark statement spans a fast line: not what it seemed
            statement = builder.statement(child)
            if statement is not None:
                out.append(statement)
    except _SyntaxProblem:
        return None
    while k < len(fast_lines):
        out.append(_in_namespace(fast[fast_lines[k]], builder.namespace))
        k += 1
    return out


def _in_namespace(rule: ast.Rule, namespace: str) -> ast.Rule:
    return rule if rule.namespace == namespace else dataclasses.replace(rule, namespace=namespace)
