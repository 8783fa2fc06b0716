"""Canonical formatting of ``.sos`` files (``sharedos-policy fmt``).

The formatter prints the typed AST back as text in one canonical layout and
re-attaches every ``#`` comment next to the statement it was written beside.
It promises:

* **idempotence** — ``format(format(x)) == format(x)``;
* **meaning preserved** — the output parses to the same AST as the input
  (positions aside); this is verified on every run, and a file whose output
  would differ is left untouched and reported instead of being rewritten;
* **comments preserved** — every comment's text survives, in order;
* a file with syntax errors is never formatted (its diagnostics are returned).

Layout: one statement per line; blocks (``toolpolicy``, ``test``) one clause
per line, indented two spaces; ``@id(...)`` on its own line above its rule;
single spaces around operators; runs of blank lines collapsed to one; no
trailing whitespace; a final newline. Expressions are printed with the fewest
parentheses that keep their meaning.
"""

from __future__ import annotations

import dataclasses
import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sharedos.errors import PolicyLanguageError
from sharedos.policy import ast
from sharedos.policy.diagnostics import CODES, Diagnostic
from sharedos.policy.grammar import is_keyword
from sharedos.policy.parser import parse_source
from sharedos.policy.suppress import statement_extent
from sharedos.terminal import ignorable

INDENT = "  "

_TOOL_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
_TOOLPAT_RE = re.compile(r"[A-Za-z0-9_*][A-Za-z0-9_.\-*]*")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class FormatError(PolicyLanguageError):
    """The formatter could not reproduce the file's meaning; the file must be left as it is."""


@dataclass(frozen=True, slots=True)
class FormatResult:
    """``text`` is the formatted source, or ``None`` when ``diagnostics`` say why not."""

    text: str | None
    diagnostics: tuple[Diagnostic, ...]

    @property
    def ok(self) -> bool:
        """True when the file was formatted."""
        return self.text is not None


# ------------------------------------------------------------------ literals


#: Characters a string literal never holds raw: controls, invisible format
#: characters (bidi, zero-width), line separators and lone surrogates (and the
#: other default-ignorable code points: ``sharedos.terminal.ignorable``).
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def quote(value: str) -> str:
    """A double-quoted string literal that the grammar decodes back to ``value``.

    Invisible and control characters are written as escapes, never raw, so
    formatting cannot hide text (Trojan Source).
    """
    out = ['"']
    for ch in value:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ch.isascii() and ch.isprintable():
            out.append(ch)
        elif unicodedata.category(ch) in _ESCAPED_CATEGORIES or ignorable(ch):
            code = ord(ch)
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _number(value: int | float) -> str:
    if isinstance(value, bool):  # pragma: no cover - bools are printed by the caller
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        # The grammar has no infinity; an over-large literal decoded to inf, and
        # any over-large literal decodes back to it.
        return "-1e999" if value < 0 else "1e999"
    if value.is_integer() and abs(value) < 1e16:
        return f"{value:.1f}"
    text = repr(value)
    if value.is_integer() and abs(value) < 2**63 and Decimal(text) != Decimal(value):
        # ``1.2345678901234568e+18`` is not the float it names (SOS105): spell the
        # whole number it holds.
        return f"{int(value)}.0"
    return text


def _tool_ref(name: str) -> str:
    if _TOOL_RE.fullmatch(name) and not is_keyword(name):
        return name
    return quote(name)


def _key(name: str) -> str:
    if _NAME_RE.fullmatch(name) and not is_keyword(name):
        return name
    return quote(name)


def format_value(value: ast.Value) -> str:
    """A test-block value (JSON-like) in canonical form: ``{ k: v }``, ``[a, b]``."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, int | float):
        return _number(value)
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{_key(k)}: {format_value(v)}" for k, v in value.items()) + " }"
    raise FormatError(f"unexpected value {value!r}")  # pragma: no cover - parser builds only these


# --------------------------------------------------------------- expressions

# Binding strength, loosest first; the grammar's levels.
_OR, _AND, _NOT, _CMP, _CONCAT, _ATOM = 1, 2, 3, 4, 5, 6


def _level(expr: ast.Expr) -> int:
    if isinstance(expr, ast.Concat):
        return _CONCAT
    if isinstance(expr, ast.BoolOp):
        return _OR if expr.op == "or" else _AND
    if isinstance(expr, ast.Not | ast.Has):
        return _NOT
    if isinstance(expr, ast.Compare):
        return _CMP
    return _ATOM


def _at_least(expr: ast.Expr, level: int) -> str:
    text = format_expr(expr)
    return text if _level(expr) >= level else f"({text})"


def format_expr(expr: ast.Expr) -> str:
    """An expression with the fewest parentheses that parse back to the same tree."""
    if isinstance(expr, ast.BoolOp):
        # Every operand binds tighter than the operator: a nested chain of the
        # same operator was written in parentheses and keeps them.
        tighter = _AND if expr.op == "or" else _NOT
        return f" {expr.op} ".join(_at_least(e, tighter) for e in expr.operands)
    if isinstance(expr, ast.Not):
        return f"not {_at_least(expr.operand, _NOT)}"
    if isinstance(expr, ast.Has):
        return f"has {expr.ref.dotted}"
    if isinstance(expr, ast.Compare):
        return f"{_at_least(expr.left, _CONCAT)} {expr.op} {_at_least(expr.right, _CONCAT)}"
    if isinstance(expr, ast.Concat):
        return " + ".join(_at_least(e, _ATOM) for e in expr.operands)
    if isinstance(expr, ast.Literal):
        if expr.value is True:
            return "true"
        if expr.value is False:
            return "false"
        if isinstance(expr.value, str):
            return quote(expr.value)
        if isinstance(expr.value, int | float):
            return _number(expr.value)
        raise FormatError("null is not an expression literal")
    if isinstance(expr, ast.Ref):
        return expr.dotted
    if isinstance(expr, ast.Call):
        return f"{expr.func}(" + ", ".join(format_expr(a) for a in expr.args) + ")"
    if isinstance(expr, ast.ListExpr):
        return "[" + ", ".join(format_expr(i) for i in expr.items) + "]"
    raise FormatError(f"unexpected expression {type(expr).__name__}")  # pragma: no cover


# ----------------------------------------------------------------- statements


@dataclass(slots=True)
class _Line:
    """One output line and the source lines it stands for (for comment placement)."""

    text: str
    indent: int
    first: int  # first source line this output line represents
    last: int  # last source line it represents
    closing: bool = False  # a block's closing brace (comments before it are indented inside)
    trailing: str | None = None
    # (tool, action, resource) of a one-line requirement, for column alignment
    requirement: tuple[str, str | None, str | None] | None = None


def _resource(res: ast.ResourceExpr) -> str:
    if isinstance(res, ast.PathResource):
        return f"path({res.arg.dotted})"
    return quote(res.raw)


def _requirement(
    tool: str, action: str | None, resource: str | None, tool_width: int = 0, action_width: int = 0
) -> str:
    """``requirement TOOL { action A; resource R }``, padded to align with its neighbours."""
    head = f"requirement {tool.ljust(tool_width)} {{"
    if action is not None and resource is not None:
        return f"{head} {(f'action {action};').ljust(action_width + 8)} resource {resource} }}"
    if action is not None:
        return f"{head} action {action} }}"
    if resource is not None:
        return f"{head} resource {resource} }}"
    return f"requirement {tool} {{}}"


@dataclass(frozen=True, slots=True)
class _Style:
    """What the layout depends on besides the AST: comment lines and the line width."""

    comment_lines: frozenset[int] = frozenset()
    width: int | None = None

    def must_break(self, first: int, last: int, text: str, indent: int = 0) -> bool:
        """True when a construct on source lines first..last must keep several lines:
        a comment sits inside it (not after its end), or one line would be too wide."""
        if any(first <= c < last for c in self.comment_lines):
            return True
        return self.width is not None and len(INDENT * indent + text) > self.width


def _rule_lines(rule: ast.Rule, style: _Style) -> list[_Line]:
    out = [
        _Line(f"@{ann.name}({quote(ann.value)})", 0, ann.span.line, ann.span.end_line)
        for ann in rule.annotations
    ]
    actions = "*" if rule.actions == ("*",) else ", ".join(rule.actions)
    if rule.effect == "approval":
        who = ", ".join(f"{a.kind} {quote(a.name)}" for a in rule.approvers)
        head = f"require approval by {who} for {actions} on {quote(rule.pattern.raw)}"
    else:
        head = f"{rule.effect} {actions} on {quote(rule.pattern.raw)}"
    clauses = [(kw, c) for kw, c in (("when", rule.when), ("unless", rule.unless)) if c is not None]
    text = head + "".join(f" {kw} {format_expr(c)}" for kw, c in clauses)
    one_line = [*out, _Line(text, 0, rule.span.line, rule.span.end_line)]
    if not clauses or not style.must_break(rule.span.line, rule.span.end_line, text):
        return one_line
    broken = out + _broken_rule(rule, head, clauses)
    too_wide = style.width is not None and len(text) > style.width
    if not too_wide and not _keeps_a_comment_inside(broken[len(out) :], rule, style):
        return one_line  # breaking would not keep any comment inside: stay on one line
    return broken


def _keeps_a_comment_inside(lines: list[_Line], rule: ast.Rule, style: _Style) -> bool:
    """True when some comment inside the rule would sit beside a line other than its last."""
    for c in style.comment_lines:
        if not rule.span.line <= c < rule.span.end_line:
            continue
        covering = [i for i, ln in enumerate(lines) if ln.first <= c <= ln.last]
        target = (
            covering[-1]
            if covering
            else next((i for i, ln in enumerate(lines) if ln.last >= c), len(lines) - 1)
        )
        if target < len(lines) - 1:
            return True
    return False


def _broken_rule(rule: ast.Rule, head: str, clauses: list[tuple[str, ast.Expr]]) -> list[_Line]:
    """The rule one condition operand per line, so that every comment stays beside the
    operand it was written next to."""
    out = [_Line(head, 0, rule.span.line, rule.pattern.span.end_line)]
    for kw, cond in clauses:
        if isinstance(cond, ast.BoolOp):
            tighter = _AND if cond.op == "or" else _NOT
            parts = [_at_least(e, tighter) for e in cond.operands]
            operands: tuple[ast.Expr, ...] = cond.operands
        else:
            parts, operands = [format_expr(cond)], (cond,)
        for i, (part, operand) in enumerate(zip(parts, operands, strict=True)):
            line, indent = (f"{kw} {part}", 1) if i == 0 else (f"{cond.op} {part}", 2)  # type: ignore[union-attr]
            out.append(_Line(line, indent, operand.span.line, operand.span.end_line))
    return out


def _object_clause(
    keyword: str,
    value: dict[str, ast.Value],
    pairs: tuple[ast.Span, ...],
    span: ast.Span | None,
    start: int,
    style: _Style,
) -> list[_Line]:
    """A test's ``context {...}`` / ``call TOOL {...}`` clause: one line, or one key per line
    when a comment sits inside it (or it is too wide)."""
    first = span.line if span is not None else start
    last = span.end_line if span is not None else first
    text = f"{keyword} {format_value(value)}" if value else keyword
    if not value or len(pairs) != len(value) or not style.must_break(first, last, text, 1):
        return [_Line(text, 1, first, first)]
    lines = [_Line(f"{keyword} {{", 1, first, first)]
    items = list(value.items())
    for i, ((key, sub), pair) in enumerate(zip(items, pairs, strict=True)):
        comma = "," if i < len(items) - 1 else ""
        lines.append(_Line(f"{_key(key)}: {format_value(sub)}{comma}", 2, pair.line, pair.line))
    lines.append(_Line("}", 1, last, last, closing=True))
    return lines


def _entry(entry: ast.ToolPolicyEntry) -> str:
    if not entry.quoted and _TOOLPAT_RE.fullmatch(entry.value) and not is_keyword(entry.value):
        return entry.value
    return quote(entry.value)


def _toolpolicy_lines(tp: ast.ToolPolicyDecl) -> list[_Line]:
    start, end = tp.span.line, tp.span.end_line
    clauses: list[tuple[int, list[_Line]]] = []
    printed: set[str] = set()
    lists = {
        "managed": tp.managed,
        "harness_local": tp.harness_local,
        "external_direct": tp.external_direct,
    }
    for key, span in tp.clause_spans:
        if key in printed:
            # A repeated clause was merged by the parser; printing it once would
            # change the file's diagnostics, so refuse (the checker reports it).
            raise FormatError(f"toolpolicy {tp.name} repeats its '{key}' clause; fix that first")
        printed.add(key)
        if key == "mode":
            text = f"mode {tp.mode}"
        else:
            entries = lists[key] or ()
            text = key + (" " + ", ".join(_entry(e) for e in entries) if entries else "")
        clauses.append((span.line, [_Line(text, 1, span.line, span.line)]))
    return _block(f"toolpolicy {_tool_ref(tp.name)} {{", clauses, start, end)


def _test_lines(test: ast.TestBlock, style: _Style) -> list[_Line]:
    start, end = test.span.line, test.span.end_line
    clauses: list[tuple[int, list[_Line]]] = []

    def one(line: int, text: str) -> None:
        clauses.append((line, [_Line(text, 1, line, line)]))

    if test.duplicate_keys:
        # The AST keeps one value per key; printing it would drop the other.
        raise FormatError(f"test {test.name!r} writes a key twice in one object; fix that first")
    if test.skip is not None:
        one(start, "skip" + (f" {quote(test.skip)}" if test.skip else ""))
    if test.policy is not None:
        one(
            test.policy_span.line if test.policy_span else start, f"policy {_tool_ref(test.policy)}"
        )
    if test.context:
        lines = _object_clause(
            "context", test.context, test.context_pair_spans, test.context_span, start, style
        )
        clauses.append((lines[0].first, lines))
    if test.tool is not None:
        call_start = test.tool_span.line if test.tool_span else start
        span = test.call_span or ast.Span(test.span.file, call_start, 1, call_start, 1)
        lines = _object_clause(
            f"call {_tool_ref(test.tool)}", test.args, test.args_pair_spans, span, start, style
        )
        clauses.append((lines[0].first, lines))
    if test.approver is not None:
        first = test.approver_span.line if test.approver_span else start
        lines = _object_clause(
            "approver", test.approver, test.approver_pair_spans, test.approver_span, first, style
        )
        clauses.append((lines[0].first, lines))
    if test.expect_effect is not None:
        expect = f"expect {test.expect_effect}"
        if test.expect_reason:
            expect += f" {test.expect_reason}"
        one(test.expect_span.line if test.expect_span else end, expect)
    return _block(f"test {quote(test.name)} {{", clauses, start, end)


def _block(
    header: str, clauses: list[tuple[int, list[_Line]]], start: int, end: int
) -> list[_Line]:
    if not clauses:
        return [_Line(header + "}", 0, start, end)]
    clauses.sort(key=lambda c: c[0])  # stable: clauses keep source order
    # Each clause stands for its own first line only: a comment written between
    # clauses is placed before the next clause, never hoisted above the block.
    lines = [_Line(header, 0, start, start)]
    for _line, clause in clauses:
        lines.extend(clause)
    lines.append(_Line("}", 0, end, end, closing=True))
    return lines


def _statement_lines(stmt: ast.Statement, style: _Style) -> list[_Line]:
    if isinstance(stmt, ast.NamespaceDecl):
        return [_Line(f"namespace {stmt.name}", 0, stmt.span.line, stmt.span.end_line)]
    if isinstance(stmt, ast.Requirement):
        parts = (
            _tool_ref(stmt.tool),
            stmt.action,
            _resource(stmt.resource) if stmt.resource is not None else None,
        )
        return [
            _Line(_requirement(*parts), 0, stmt.span.line, stmt.span.end_line, requirement=parts)
        ]
    if isinstance(stmt, ast.Rule):
        return _rule_lines(stmt, style)
    if isinstance(stmt, ast.ConditionDecl):
        text = f"condition {stmt.name} = {format_expr(stmt.expr)}"
        return [_Line(text, 0, stmt.span.line, stmt.span.end_line)]
    if isinstance(stmt, ast.ToolPolicyDecl):
        return _toolpolicy_lines(stmt)
    if isinstance(stmt, ast.TestBlock):
        return _test_lines(stmt, style)
    raise FormatError(f"unexpected statement {type(stmt).__name__}")  # pragma: no cover


# ------------------------------------------------------------------- comments


@dataclass(slots=True)
class _Item:
    """A line of output in order: code (``line``) or an own-line comment."""

    first: int
    last: int
    text: str
    indent: int


def _layout(file: ast.PolicyFile, width: int | None = None) -> str:
    source_lines = file.source.split("\n")
    style = _Style(frozenset(c.span.line for c in file.comments), width)
    lines: list[_Line] = []
    owner: list[int] = []  # the statement each output line belongs to
    for k, stmt in enumerate(file.statements):
        produced = _statement_lines(stmt, style)
        lines.extend(produced)
        owner.extend([k] * len(produced))
    extents = [statement_extent(stmt) for stmt in file.statements]

    # Each comment goes to one output line: an own-line comment above the first
    # output line that reaches its source line, a trailing comment after the
    # last output line covering its source line (else it becomes own-line).
    # Statements that shared a source line are split apart: its trailing comment
    # stays with the first of them, the statement a ``sos:ignore`` there governs
    # (``suppress.find``), so formatting never changes what ``check`` reports.
    targets: list[list[tuple[int, int, str, bool]]] = [[] for _ in lines]
    leftover: list[tuple[int, str]] = []
    for comment in file.comments:
        cline = comment.span.line
        target = None
        trailing = False
        if not comment.own_line:
            first_owner = next((k for k, (a, b) in enumerate(extents) if a <= cline <= b), None)
            for i, candidate in enumerate(lines):
                if candidate.first <= cline <= candidate.last and (
                    first_owner is None or owner[i] == first_owner
                ):
                    target, trailing = i, True
        if target is None:
            target = next((i for i, ln in enumerate(lines) if ln.last >= cline), None)
        if target is None:
            leftover.append((cline, comment.text))
        else:
            targets[target].append((cline, comment.span.col, comment.text, trailing))

    # Order is kept: a line's comments print above it in source order, except
    # that the last one stays at the end of the line when it was written there.
    above: list[list[tuple[int, str]]] = []
    for i, found in enumerate(targets):
        found.sort(key=lambda c: (c[0], c[1]))
        if found and found[-1][3]:
            lines[i].trailing = found[-1][2]
            found = found[:-1]
        above.append([(c[0], c[2]) for c in found])

    _align_requirements(lines, source_lines, {i for i, a in enumerate(above) if a})

    items: list[_Item] = []
    for line, comments in zip(lines, above, strict=True):
        indent = line.indent + 1 if line.closing else line.indent
        for cline, text in comments:
            items.append(_Item(cline, cline, "#" + text, indent))
        text = line.text + (f"  #{line.trailing}" if line.trailing is not None else "")
        items.append(_Item(line.first, line.last, text, line.indent))
    for cline, text in leftover:
        items.append(_Item(cline, cline, "#" + text, 0))

    out: list[str] = []
    prev_last: int | None = None
    for item in items:
        if prev_last is not None and out and _blank_between(source_lines, prev_last, item.first):
            out.append("")
        out.append((INDENT * item.indent + item.text).rstrip())
        prev_last = max(prev_last or 0, item.last)
    return "\n".join(out) + "\n" if out else ""


def _align_requirements(
    lines: list[_Line], source_lines: Sequence[str], commented: set[int]
) -> None:
    """Align runs of adjacent one-line requirements in columns (tool, then action).

    A run is broken by anything printed between two requirements: a blank
    line, a comment printed above the next one (``commented`` holds the
    indexes of such lines) or another statement.
    """
    run: list[_Line] = []

    def flush() -> None:
        if len(run) > 1:
            parts = [ln.requirement for ln in run if ln.requirement is not None]
            tool_width = max(len(p[0]) for p in parts)
            action_width = max(
                (len(p[1]) for p in parts if p[1] is not None and p[2] is not None), default=0
            )
            for ln in run:
                if ln.requirement is not None:
                    ln.text = _requirement(
                        *ln.requirement, tool_width=tool_width, action_width=action_width
                    )
        run.clear()

    for i, ln in enumerate(lines):
        if ln.requirement is None:
            flush()
            continue
        if run and (i in commented or _blank_between(source_lines, run[-1].last, ln.first)):
            flush()
        run.append(ln)
    flush()


def _blank_between(source_lines: Sequence[str], after: int, before: int) -> bool:
    """True when a blank source line lies strictly between lines ``after`` and ``before``."""
    return any(
        not source_lines[n - 1].strip()
        for n in range(after + 1, before)
        if 0 < n <= len(source_lines)
    )


# ----------------------------------------------------------------- equivalence

_POSITION_FIELDS = frozenset({"span", "file", "source", "quoted", "comments", "duplicate_keys"})


def shape(node: Any) -> Any:
    """The AST without positions: what formatting must preserve exactly."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        out: list[Any] = [type(node).__name__]
        for f in dataclasses.fields(node):
            if f.name in _POSITION_FIELDS or f.name.endswith("_span") or f.name.endswith("_spans"):
                if f.name == "clause_spans":
                    out.append(tuple(k for k, _ in node.clause_spans))  # type: ignore[attr-defined]
                continue
            out.append((f.name, shape(getattr(node, f.name))))
        return tuple(out)
    if isinstance(node, tuple | list):
        return tuple(shape(n) for n in node)
    if isinstance(node, dict):
        return tuple((k, shape(v)) for k, v in node.items())
    if isinstance(node, float) and math.isnan(node):  # pragma: no cover - the grammar has no NaN
        return "nan"
    if isinstance(node, bool | int | float):
        return (type(node).__name__, node)
    return node


def _comment_texts(comments: Iterable[ast.Comment]) -> list[str]:
    return [c.text.strip() for c in comments]


# ------------------------------------------------------------------ public API


def format_file(file: ast.PolicyFile, *, width: int | None = None) -> str:
    """Print a parsed, error-free file canonically; raise ``FormatError`` if meaning would change.

    ``width``: break rules and test objects longer than this many characters
    (one operand or key per line); by default only a comment inside them does.
    """
    text = _layout(file, width)
    again = parse_source(text, file.path)
    if again.diagnostics or shape(again.file.statements) != shape(file.statements):
        raise FormatError("the formatted text would not parse back to the same policy")
    if _comment_texts(again.file.comments) != _comment_texts(file.comments):
        raise FormatError("the formatted text would lose or reorder a comment")
    return text


_BOM = "\ufeff"


def format_source(
    text: str, filename: str = "<string>", *, width: int | None = None
) -> FormatResult:
    """Format ``text``: the canonical text, or the syntax diagnostics that prevent formatting.

    Accepts what ``check`` accepts, read as ``check`` reads it: a leading
    byte-order mark is kept, a file written with CRLF line ends is formatted
    with CRLF line ends (so ``fmt --check`` does not flag every line of it), and
    a carriage return alone ends a line, as it does for ``check``. Never raises for bad
    input; a file the formatter cannot reproduce faithfully yields a
    ``SOS901`` diagnostic and no text.
    """
    bom = _BOM if text.startswith(_BOM) else ""
    body = text[len(bom) :]
    crlf = "\r\n" in body and body.count("\r\n") == body.count("\n")
    if "\r" in body:
        # Lines end where check, eval and the kernel read them (sharedos.textfile.
        # decode_text): a carriage return alone ends one too. Parsed raw, '# note<CR>
        # forbid read on "/secret/**"' was one comment to fmt and a comment and a
        # forbid to everything else, and fmt moved it where the forbid broke the
        # statement after it (or joined another one).
        body = body.replace("\r\n", "\n").replace("\r", "\n")
    parsed = parse_source(body, filename)
    errors = tuple(d for d in parsed.diagnostics if d.severity == "error")
    if errors:
        return FormatResult(None, errors)
    try:
        formatted = format_file(parsed.file, width=width)
        if crlf:
            formatted = formatted.replace("\n", "\r\n")
        return FormatResult(bom + formatted, ())
    except (FormatError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, FormatError) else "expression nested too deeply"
        return FormatResult(None, (_cannot_format(filename, reason),))


def _cannot_format(filename: str, reason: str) -> Diagnostic:
    info = CODES["SOS901"]
    return Diagnostic(
        code="SOS901",
        severity="error",
        message=f"cannot format this file safely: {reason}; it was left unchanged",
        file=filename,
        line=1,
        col=1,
        end_line=1,
        end_col=2,
        hint=info.hint,
    )
