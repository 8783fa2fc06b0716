"""The one-line fast path: simple statements built without Lark.

Most of a large policy is one-line statements of a few simple shapes, and
Lark spends most of a compile building trees for them. Lines that are a
complete statement of one of these shapes are built here directly:

* ``namespace NAME``;
* ``requirement TOOL { action NAME; resource EXPR }`` on one line;
* ``permit|forbid ACTIONS on "PATTERN" [when EXPR] [unless EXPR]`` with any
  expression of the grammar (``and``/``or``/``not``, ``has``, comparisons,
  ``in``/``not in``, ``+``, calls, lists, parentheses, ``true``/``false``,
  strings, numbers and references), preceded by ``@name("...")`` annotations
  on the same line or on lines of their own (a condition nested deeper than
  ``_MAX_DEPTH`` is left to Lark);
* ``require approval by role|group "NAME", ... for ACTIONS on "PATTERN" ...``
  (an approval rule) with the same tail.

Strings are decoded as the Lark path decodes them (``literals``: escapes
included); anything else is left to Lark (``parser`` parses the rest of the
file and merges the two); a file made only of such lines
never loads the Lark parser at all. The result is exactly the AST the Lark
path builds (``tests/policy/test_parser.py`` compares the two on tricky and
random texts), and any doubt -- a syntax error anywhere, a Lark statement
spanning a fast line -- falls back to the full Lark parse, so diagnostics
never change.

The words a fast line may not read as a name, and the words that start a
statement, come from the grammar (``grammar.facts``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sharedos.policy import ast
from sharedos.policy.grammar import LanguageFacts, facts
from sharedos.policy.literals import SyntaxProblem, decode_string, number_value, template_parts

__all__ = ["FastScan", "scan"]

_TOKEN_RE = re.compile(
    r'[ \t\r\f]*(?:(?P<s>"[^"\\\n]*(?:\\.[^"\\\n]*)*")'
    r"|(?P<n>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(?![A-Za-z0-9_.])"
    r"|(?P<w>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
    r"|(?P<o>==|!=|<=|>=|[<>,*@(){};\[\]+])"
    r"|(?P<c>#.*)|(?P<e>$))"
)
_BLANK_OR_COMMENT_RE = re.compile(r"[ \t\r\f]*(?:#.*)?$")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: A fast token: (kind, text, column).
_Token = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class _Words:
    """The grammar's words the fast path needs, looked up once."""

    effects: tuple[str, ...]
    when: str
    unless: str
    namespace: str
    requirement: str
    action: str
    resource: str
    on: str
    require: str
    approval: str
    by: str
    for_: str
    approver_kinds: tuple[str, ...]
    reserved: frozenset[str]
    next_statement: re.Pattern[str]


@lru_cache(maxsize=1)
def _words() -> _Words:
    lang: LanguageFacts = facts()
    words = lang.terminal_words
    starters = "|".join(lang.statement_keywords)
    marks = "".join(re.escape(m) for m in lang.statement_marks)
    return _Words(
        effects=words["EFFECT"],
        when=words["_WHEN"][0],
        unless=words["_UNLESS"][0],
        namespace=words["_NAMESPACE"][0],
        requirement=words["_REQUIREMENT"][0],
        action=words["_ACTION"][0],
        resource=words["_RESOURCE"][0],
        on=words["_ON"][0],
        require=words["REQUIRE"][0],
        approval=words["_APPROVAL"][0],
        by=words["_BY"][0],
        for_=words["_FOR"][0],
        approver_kinds=words["APPROVER_KIND"],
        # Every keyword, except the condition roots that are also keywords
        # (``action``, ``resource``, ``context``): no parser state accepts both
        # a reference and one of those keywords, so a fast line may read them
        # as names.
        reserved=lang.keywords - frozenset(ast.REF_ROOTS),
        next_statement=re.compile(rf"[ \t\r\f]*(?:[{marks}]|(?:{starters})(?![A-Za-z0-9_]))"),
    )


def _tokens(line: str) -> list[_Token] | None:
    out: list[_Token] = []
    pos = 0
    end = len(line)
    match = _TOKEN_RE.match
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


class _Line:
    """Builds one line's statement from its tokens, or reports that it cannot (None)."""

    __slots__ = ("depth", "file", "i", "line", "toks", "words")

    def __init__(self, file: str, line: int, toks: list[_Token], words: _Words) -> None:
        self.file = file
        self.line = line
        self.toks = toks
        self.words = words
        self.i = 0
        self.depth = 0  # nesting of parentheses, brackets, calls and 'not'

    # -- tokens

    def span(self, tok: _Token) -> ast.Span:
        return ast.Span(self.file, self.line, tok[2], self.line, tok[2] + len(tok[1]))

    def string(self, tok: _Token) -> str | None:
        """A STRING token's value, its escapes decoded as the Lark path decodes them;
        None for a bad escape (the Lark path reports it)."""
        text = tok[1]
        if "\\" not in text:
            return text[1:-1]
        try:
            return decode_string(text, self.line, tok[2])
        except SyntaxProblem:
            return None

    def peek(self) -> _Token | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def word(self, *values: str) -> _Token | None:
        tok = self.peek()
        if tok is not None and tok[0] == "w" and tok[1] in values:
            self.i += 1
            return tok
        return None

    def mark(self, value: str) -> _Token | None:
        tok = self.peek()
        if tok is not None and tok[0] == "o" and tok[1] == value:
            self.i += 1
            return tok
        return None

    def kind(self, kind: str) -> _Token | None:
        tok = self.peek()
        if tok is not None and tok[0] == kind:
            self.i += 1
            return tok
        return None

    def name(self) -> _Token | None:
        """A NAME token (no dots; keywords allowed: the grammar's states here take only names)."""
        tok = self.peek()
        if tok is not None and tok[0] == "w" and "." not in tok[1]:
            self.i += 1
            return tok
        return None

    def at_end(self) -> bool:
        """True once only empty statements (``;``) remain."""
        while self.mark(";") is not None:
            pass
        return self.i == len(self.toks)

    # -- statements

    def namespace(self) -> ast.NamespaceDecl | None:
        kw = self.word(self.words.namespace)
        name = self.name() if kw is not None else None
        if kw is None or name is None or not self.at_end():
            return None
        return ast.NamespaceDecl(
            name[1], ast.Span(self.file, self.line, kw[2], self.line, name[2] + len(name[1]))
        )

    def annotations(self) -> list[ast.Annotation] | None:
        out: list[ast.Annotation] = []
        while True:
            at = self.mark("@")
            if at is None:
                return out
            name = self.name()
            if name is None or self.mark("(") is None:
                return None
            value = self.kind("s")
            close = self.mark(")") if value is not None else None
            text = self.string(value) if value is not None else None
            if value is None or close is None or text is None:
                return None
            out.append(
                ast.Annotation(
                    name[1],
                    text,
                    ast.Span(self.file, self.line, at[2], self.line, close[2] + 1),
                )
            )

    def requirement(self, namespace: str) -> ast.Requirement | None:
        w = self.words
        kw = self.word(w.requirement)
        if kw is None:
            return None
        tool_tok = self.kind("w") or self.kind("s")
        if tool_tok is None or self.mark("{") is None:
            return None
        tool = self.string(tool_tok) if tool_tok[0] == "s" else tool_tok[1]
        if tool is None:
            return None
        action: _Token | None = None
        resource: ast.ResourceExpr | None = None
        while True:
            if self.mark(";") is not None:
                continue
            close = self.mark("}")
            if close is not None:
                break
            if self.word(w.action) is not None:
                if action is not None:
                    return None  # SOS209: the Lark path reports it
                action = self.name()
                if action is None:
                    return None
            elif self.word(w.resource) is not None:
                if resource is not None:
                    return None
                resource = self.resource_expr()
                if resource is None:
                    return None
            else:
                return None
        if action is None or resource is None or not self.at_end():
            return None
        return ast.Requirement(
            tool,
            namespace,
            action[1],
            resource,
            ast.Span(self.file, self.line, kw[2], self.line, close[2] + 1),
            self.span(tool_tok),
            self.span(action),
        )

    def resource_expr(self) -> ast.ResourceExpr | None:
        tok = self.peek()
        if tok is None:
            return None
        if tok[0] == "s":
            self.i += 1
            raw = self.string(tok)
            if raw is None:
                return None
            try:
                parts = template_parts(raw, self.file, self.line, tok[2] + 1)
            except SyntaxProblem:
                return None
            return ast.TemplateResource(raw, parts, self.span(tok))
        if tok[0] != "w":
            return None
        self.i += 1
        if self.mark("(") is None:
            ref = self.ref(tok)
            return ast.TemplateResource("{" + ref.dotted + "}", (ref,), self.span(tok))
        arg = self.kind("w")
        close = self.mark(")") if arg is not None else None
        if tok[1] != "path" or arg is None or close is None:
            return None  # another function is SOS208: the Lark path reports it
        return ast.PathResource(
            self.ref(arg), ast.Span(self.file, self.line, tok[2], self.line, close[2] + 1)
        )

    def ref(self, tok: _Token) -> ast.Ref:
        root, *path = tok[1].split(".")
        return ast.Ref(root, tuple(path), self.span(tok))

    def rule(self, namespace: str, annotations: tuple[ast.Annotation, ...]) -> ast.Rule | None:
        effect = self.word(*self.words.effects)
        if effect is None:
            return None
        return self.rule_tail(effect[1], effect, namespace, annotations, ())

    def approval_rule(
        self, namespace: str, annotations: tuple[ast.Annotation, ...]
    ) -> ast.Rule | None:
        w = self.words
        keyword = self.word(w.require)
        if keyword is None or self.word(w.approval) is None or self.word(w.by) is None:
            return None
        approvers: list[ast.Approver] = []
        while True:
            kind = self.word(*w.approver_kinds)
            value = self.kind("s") if kind is not None else None
            name = self.string(value) if value is not None else None
            if kind is None or value is None or name is None:
                return None
            kind_value: Any = kind[1]
            approvers.append(
                ast.Approver(
                    kind_value,
                    name,
                    ast.Span(self.file, self.line, kind[2], self.line, value[2] + len(value[1])),
                )
            )
            if self.mark(",") is None:
                break
        if self.word(w.for_) is None:
            return None
        return self.rule_tail("approval", keyword, namespace, annotations, tuple(approvers))

    def rule_tail(
        self,
        effect_value: Any,
        start: _Token,
        namespace: str,
        annotations: tuple[ast.Annotation, ...],
        approvers: tuple[ast.Approver, ...],
    ) -> ast.Rule | None:
        """``ACTIONS on "PATTERN" [when ...] [unless ...]``: the rest of a rule."""
        w = self.words
        actions: list[_Token] = []
        star = self.mark("*")
        if star is not None:
            actions.append(star)
        else:
            # Any word: where the grammar takes an action it takes only a NAME (or
            # '*'), so Lark's contextual lexer reads a keyword there as a name too.
            while True:
                tok = self.peek()
                if tok is None or tok[0] != "w" or "." in tok[1]:
                    return None
                actions.append(tok)
                self.i += 1
                if self.mark(",") is None:
                    break
        if self.word(w.on) is None:
            return None
        pattern = self.kind("s")
        pattern_text = self.string(pattern) if pattern is not None else None
        if pattern is None or pattern_text is None:
            return None
        when: ast.Expr | None = None
        unless: ast.Expr | None = None
        end_col = pattern[2] + len(pattern[1])
        if self.word(w.when) is not None:
            found = self.condition()
            if found is None:
                return None
            when, end_col = found
        if self.word(w.unless) is not None:
            found = self.condition()
            if found is None:
                return None
            unless, end_col = found
        if not self.at_end():
            return None
        return ast.Rule(
            effect_value,
            tuple(t[1] for t in actions),
            ast.Pattern(pattern_text, self.span(pattern)),
            when,
            unless,
            namespace,
            annotations,
            ast.Span(self.file, self.line, start[2], self.line, end_col),
            tuple(self.span(t) for t in actions),
            approvers,
        )

    # -- conditions
    #
    # The grammar's expressions, by precedence: ``or`` < ``and`` < ``not`` / ``has``
    # < one comparison < ``+`` < an operand (a string, a number, ``true``,
    # ``false``, a reference, a call, a list, a parenthesised expression).
    # Each step returns the node and its *container*: where it starts and ends
    # in the text, its parentheses included when it is a node Lark builds a tree
    # for (a string, a number or a reference in parentheses keeps its own
    # columns, as Lark's bare tokens do). A node's span runs from its first
    # operand's container to its last's, exactly as Lark's positions do.

    def condition(self) -> tuple[ast.Expr, int] | None:
        """A ``when``/``unless`` condition and the column after it (its container's end)."""
        found = self.disjunction()
        return None if found is None else (found[0], found[2])

    def disjunction(self) -> _Node | None:
        # Deep nesting is left to Lark (and its diagnostic); a RecursionError from a
        # caller's deep stack is caught by ``parser._parse_fast`` (Lark decides).
        if self.depth > _MAX_DEPTH:
            return None
        self.depth += 1
        try:
            return self._chain("or", self.conjunction)
        finally:
            self.depth -= 1

    def conjunction(self) -> _Node | None:
        return self._chain("and", self.negation)

    def _chain(self, op: Any, step: Any) -> _Node | None:
        first: _Node | None = step()
        if first is None:
            return None
        operands = [first]
        while self.word(op) is not None:
            more = step()
            if more is None:
                return None
            operands.append(more)
        if len(operands) == 1:
            return first
        start, end = first[1], operands[-1][2]
        node = ast.BoolOp(op, tuple(o[0] for o in operands), self._cols(start, end))
        return node, start, end

    def _cols(self, start: int, end: int) -> ast.Span:
        return ast.Span(self.file, self.line, start, self.line, end)

    def negation(self) -> _Node | None:
        tok = self.word("not", "has")
        if tok is None:
            return self.comparison()
        if tok[1] == "not":
            if self.depth > _MAX_DEPTH:
                return None
            self.depth += 1
            inner = self.negation()
            self.depth -= 1
            if inner is None:
                return None
            end = inner[2]
            return ast.Not(inner[0], self._cols(tok[2], end)), tok[2], end
        ref_tok = self.peek()
        if ref_tok is None or ref_tok[0] != "w" or self._keyword_word(ref_tok[1]):
            return None
        self.i += 1
        ref = self.ref(ref_tok)
        end = ref.span.end_col
        return ast.Has(ref, self._cols(tok[2], end)), tok[2], end

    def comparison(self) -> _Node | None:
        left = self.sum()
        if left is None:
            return None
        tok = self.peek()
        op: Any
        if tok is not None and tok[0] == "o" and tok[1] in ("==", "!=", "<", "<=", ">", ">="):
            op = tok[1]
            self.i += 1
        elif self.word("in") is not None:
            op = "in"
        elif tok is not None and tok[0] == "w" and tok[1] == "not":
            self.i += 1
            if self.word("in") is None:
                return None
            op = "not in"
        else:
            return left
        right = self.sum()
        if right is None:
            return None
        start, end = left[1], right[2]
        return ast.Compare(op, left[0], right[0], self._cols(start, end)), start, end

    def sum(self) -> _Node | None:
        first = self.operand()
        if first is None:
            return None
        operands = [first]
        while self.mark("+") is not None:
            more = self.operand()
            if more is None:
                return None
            operands.append(more)
        if len(operands) == 1:
            return first
        start, end = first[1], operands[-1][2]
        return ast.Concat(tuple(o[0] for o in operands), self._cols(start, end)), start, end

    def _keyword_word(self, text: str) -> bool:
        """A keyword, or a dotted word that starts with one (Lark reads the keyword)."""
        return text.split(".", 1)[0] in self.words.reserved

    def operand(self) -> _Node | None:
        tok = self.peek()
        if tok is None:
            return None
        kind, text, col = tok
        end = col + len(text)
        if kind == "s":
            self.i += 1
            value_s = self.string(tok)
            if value_s is None:
                return None
            return ast.Literal(value_s, self.span(tok)), col, end
        if kind == "n":
            self.i += 1
            try:
                value = number_value(text, self.line, col)
            except SyntaxProblem:
                return None  # out of range: the Lark path reports it
            return ast.Literal(value, self.span(tok)), col, end
        if kind == "w":
            if text in ("true", "false"):
                self.i += 1
                return ast.Literal(text == "true", self.span(tok)), col, end
            if self._keyword_word(text):
                return None
            self.i += 1
            if self.mark("(") is None:
                return self.ref(tok), col, end
            args = self._items(")")
            if args is None or args[1]:  # a call takes no trailing comma
                return None
            stop = self.toks[self.i - 1][2] + 1  # past the ')'
            return ast.Call(text, args[0], self._cols(col, stop)), col, stop
        if kind == "o" and text == "[":
            self.i += 1
            items = self._items("]")
            if items is None:
                return None
            stop = self.toks[self.i - 1][2] + 1
            return ast.ListExpr(items[0], self._cols(col, stop)), col, stop
        if kind == "o" and text == "(":
            self.i += 1
            inner = self.disjunction()
            paren = self.mark(")") if inner is not None else None
            if inner is None or paren is None:
                return None
            if isinstance(inner[0], ast.Literal | ast.Ref) and not _is_keyword_literal(inner):
                return inner  # a bare token keeps its own columns
            return inner[0], col, paren[2] + 1
        return None

    def _items(self, close: str) -> tuple[tuple[ast.Expr, ...], bool] | None:
        """Expressions separated by ``,`` up to ``close`` (consumed); and whether a
        trailing comma ended them."""
        items: list[ast.Expr] = []
        if self.mark(close) is not None:
            return (), False
        while True:
            item = self.disjunction()
            if item is None:
                return None
            items.append(item[0])
            if self.mark(close) is not None:
                return tuple(items), False
            if self.mark(",") is None:
                return None
            if self.mark(close) is not None:
                return tuple(items), True


#: How deep a fast line's expression may nest (deeper: the Lark path decides).
_MAX_DEPTH = 40

#: An expression and its container's first and past-the-end columns.
_Node = tuple[ast.Expr, int, int]


def _is_keyword_literal(node: _Node) -> bool:
    """``true``/``false``: Lark builds a tree for them (``e_true``), not a bare token."""
    return type(node[0].value) is bool if isinstance(node[0], ast.Literal) else False


@dataclass(slots=True)
class FastScan:
    """What the fast path built: statements by first line, and every line they used.

    ``complete`` is True when every line is either blank, a comment, or part
    of a fast statement: then the statements (namespaces included, each in the
    namespace in force) are the whole file. Otherwise the namespace
    statements are not in ``statements`` (the Lark part of the file keeps
    them) and the others carry a guessed namespace the caller corrects.
    """

    statements: list[tuple[int, ast.Statement]] = field(default_factory=list)
    lines: set[int] = field(default_factory=set)
    complete: bool = True


def scan(text: str, filename: str) -> FastScan:
    """Build the fast statements of ``text`` (1-based lines)."""
    words = _words()
    lines = text.split("\n")
    out = FastScan()
    namespace = ast.DEFAULT_NAMESPACE
    namespaces: list[tuple[int, ast.Statement]] = []
    pending: list[tuple[int, list[ast.Annotation]]] = []  # annotation-only lines
    next_statement = words.next_statement.match
    first_words = {words.namespace, words.requirement, words.require, *words.effects}
    for i, line in enumerate(lines):
        number = i + 1
        if _BLANK_OR_COMMENT_RE.match(line):
            continue
        toks = _tokens(line)
        built: ast.Statement | None = None
        annotations: list[ast.Annotation] | None = None
        if toks:
            parser = _Line(filename, number, toks, words)
            head = toks[0]
            if head[0] == "o" and head[1] == "@":
                annotations = parser.annotations()
                # nothing may follow an annotation-only line's annotations, not even
                # a ';' (the grammar has an annotation belong to the rule after it)
                if annotations is not None and parser.peek() is None:
                    pending.append((number, annotations))
                    continue
            if annotations is not None or (head[0] == "w" and head[1] in first_words):
                built = _statement(
                    parser, namespace, annotations, pending, lines, i, next_statement
                )
        if built is None:
            out.complete = False
            pending.clear()  # annotations before a Lark statement belong to it
            continue
        if isinstance(built, ast.NamespaceDecl):
            namespace = built.name
            namespaces.append((number, built))
            continue
        first = number
        if isinstance(built, ast.Rule) and pending:
            first = pending[0][0]
            out.lines.update(n for n, _ in pending)
            pending.clear()
        out.lines.add(number)
        out.statements.append((first, built))
    if pending:
        out.complete = False
        for n, _ in pending:
            out.lines.discard(n)
    if out.complete:
        out.statements = sorted(out.statements + namespaces, key=lambda s: s[0])
        out.lines.update(n for n, _ in namespaces)
    return out


def _statement(
    parser: _Line,
    namespace: str,
    annotations: list[ast.Annotation] | None,
    pending: list[tuple[int, list[ast.Annotation]]],
    lines: list[str],
    i: int,
    next_statement: Any,
) -> ast.Statement | None:
    head = parser.peek()
    if head is None:
        return None
    if annotations is None and not pending:
        if head[1] == parser.words.namespace:
            return parser.namespace()
        if head[1] == parser.words.requirement:
            return parser.requirement(namespace)
    # A rule: nothing after this line may continue it (a condition can span
    # lines), so the next non-blank line must start a statement.
    j = i + 1
    while j < len(lines) and _BLANK_OR_COMMENT_RE.match(lines[j]):
        j += 1
    if j < len(lines) and not next_statement(lines[j]):
        return None
    before = tuple(a for _, anns in pending for a in anns) + tuple(annotations or ())
    if head[0] == "w" and head[1] == parser.words.require:
        return parser.approval_rule(namespace, before)
    return parser.rule(namespace, before)
