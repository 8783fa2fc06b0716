"""Diagnostics: positioned, coded, renderable errors and warnings.

Every problem the parser or checker finds becomes a ``Diagnostic`` with a
stable code (``SOS0xx`` input files, ``SOS1xx`` syntax, ``SOS2xx`` meaning,
``SOS3xx`` toolpolicy, ``SOS4xx`` tests, ``SOS5xx`` lints, ``SOS9xx`` the tool
itself), a position, a one-line hint and a
caret excerpt. ``CODES`` is the catalogue the reference documentation is
generated from; a code is never reused for a different meaning.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from sharedos.errors import PolicyLanguageError
from sharedos.terminal import unambiguous

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class CodeInfo:
    """What a diagnostic code means and the usual fix."""

    code: str
    title: str
    hint: str


_CATALOGUE: tuple[CodeInfo, ...] = (
    # -- input files
    CodeInfo(
        "SOS001", "cannot read policy file", "check the path exists and is a readable UTF-8 file"
    ),
    CodeInfo("SOS002", "no policy files found", "pass .sos files or directories that contain them"),
    # -- syntax
    CodeInfo(
        "SOS101",
        "unexpected token",
        "check the statement against the grammar; a statement starts with namespace, requirement, permit, forbid, require, condition, toolpolicy, test or @id",
    ),
    CodeInfo(
        "SOS102",
        "invalid character",
        "remove the character, or put it inside a double-quoted string",
    ),
    CodeInfo(
        "SOS103", "incomplete statement", "close every '{' with '}' and finish the last statement"
    ),
    CodeInfo(
        "SOS104",
        "invalid string literal",
        'strings are double-quoted on one line; escapes are \\" \\\\ \\/ \\n \\t \\r \\uXXXX \\UXXXXXXXX',
    ),
    CodeInfo(
        "SOS105",
        "number out of range",
        "integers are 64-bit and other numbers must fit a 64-bit float; write a number in range, a whole one as an integer",
    ),
    CodeInfo(
        "SOS106",
        "invisible or bidirectional character",
        "write the character as a \\uXXXX escape inside a string (sharedos-policy fmt does), or remove it",
    ),
    # -- meaning
    CodeInfo(
        "SOS201",
        "unknown action",
        "use an action that a requirement of this namespace declares, or add that requirement",
    ),
    CodeInfo(
        "SOS202",
        "duplicate requirement",
        "keep one requirement per tool; delete or merge the other",
    ),
    CodeInfo(
        "SOS203",
        "undefined name",
        "conditions may read context.*, args.*, resource, action and the named conditions of their namespace",
    ),
    CodeInfo(
        "SOS204",
        "type error",
        "compare values of the same kind; 'in' needs a list on the right (contains(s, sub) tests substrings)",
    ),
    CodeInfo(
        "SOS205",
        "unknown function",
        "the functions are startswith, endswith, contains, lower, path, segment, any_in and all_in",
    ),
    CodeInfo("SOS206", "invalid tool name", "a tool name is 1-128 characters of [A-Za-z0-9_.-]"),
    CodeInfo(
        "SOS207",
        "invalid resource pattern",
        "segments are separated by '/'; '*' and '**' must be whole segments or '*' inside a segment; interpolate only {context.x}",
    ),
    CodeInfo(
        "SOS208",
        "invalid resource expression",
        'use resource path(args.x) or a template such as "{args.owner}/{args.repo}"',
    ),
    CodeInfo(
        "SOS209",
        "incomplete requirement",
        "a requirement needs exactly one 'action NAME' and one 'resource EXPR'",
    ),
    CodeInfo("SOS210", "duplicate rule id", "give each @id a unique value"),
    CodeInfo(
        "SOS211", "unknown annotation", 'a rule takes @id("...") and @description("..."), each once'
    ),
    CodeInfo(
        "SOS212",
        "requirement outside its namespace",
        "declare the requirement after 'namespace NS', where NS is the part of its tool name before the first dot",
    ),
    CodeInfo(
        "SOS213",
        "wrong number of arguments",
        "check the function's arity in docs/policy-language.md (Functions)",
    ),
    CodeInfo(
        "SOS214",
        "invalid named condition",
        "give each named condition of a namespace its own name, not a keyword, function or root",
    ),
    CodeInfo(
        "SOS215",
        "named condition refers to itself",
        "break the cycle: a named condition may use other named conditions, but not itself",
    ),
    CodeInfo(
        "SOS216",
        "invalid approver",
        'name each approver once, as role "NAME" or group "NAME": a non-empty NFC name without control characters or outer spaces',
    ),
    CodeInfo(
        "SOS217",
        "condition too large once expanded",
        "use a large named condition once per condition, not several times over: each use is a copy",
    ),
    # -- toolpolicy (the ToolPolicy validators decide; these codes position their verdicts)
    CodeInfo(
        "SOS301",
        "strict toolpolicy lists external_direct tools",
        "remove the external_direct entries or declare 'mode open'",
    ),
    CodeInfo(
        "SOS302",
        "strict toolpolicy names no harness_local tools",
        "name the harness's own tools (e.g. harness_local \"patch\") or declare 'mode open'",
    ),
    CodeInfo(
        "SOS303",
        "invalid managed pattern",
        "managed entries are tool names or dot-separated patterns with '*' segments and an optional final '**'",
    ),
    CodeInfo(
        "SOS304",
        "invalid tool name in toolpolicy",
        "harness_local and external_direct entries are tool names: 1-128 characters of [A-Za-z0-9_.-]",
    ),
    CodeInfo("SOS305", "duplicate toolpolicy", "give each toolpolicy a unique name"),
    CodeInfo("SOS306", "invalid toolpolicy mode", "mode is 'strict' or 'open'"),
    CodeInfo(
        "SOS307",
        "incomplete toolpolicy",
        "a toolpolicy needs one 'mode' and each list clause at most once",
    ),
    # -- test blocks
    CodeInfo(
        "SOS401",
        "test calls an unknown tool",
        "call a tool some requirement declares, or expect 'deny tool_unavailable'",
    ),
    CodeInfo(
        "SOS402",
        "incomplete test",
        "a test needs one 'call TOOL {...}' and one 'expect allow|deny|approval [REASON]'",
    ),
    CodeInfo(
        "SOS403",
        "unknown reason code",
        "use a decision reason: allowed, tool_unavailable, unresolvable_resource, no_matching_permit, forbidden, approval_required with 'expect approval' (and not_in_run_policy in a test with 'policy NAME')",
    ),
    CodeInfo("SOS404", "duplicate test name", "give each test block a unique name"),
    CodeInfo(
        "SOS406",
        "invalid approver in a test",
        'write approver { principal: "NAME", roles: ["ROLE", ...], groups: ["GROUP", ...] } (principal required)',
    ),
    CodeInfo(
        "SOS405",
        "test names an unknown toolpolicy",
        "name a declared toolpolicy in 'policy NAME', and compile its file alongside",
    ),
    # -- lints (warnings; ``check --strict`` makes them errors)
    CodeInfo("SOS501", "unknown context attribute", "use an attribute the context schema declares (host-specific values live under context.attributes), or add it to the schema"),
    CodeInfo("SOS502", "context attribute used as the wrong type", "compare the attribute with a value of its declared type; for a list use 'x in context.roles'"),
    CodeInfo("SOS503", "permit shadowed by a forbid", "narrow the forbid (pattern, actions or a when/unless condition) or delete the permit that can never apply"),
    CodeInfo("SOS504", "rule never matches", "make the pattern's shape (absolute or relative, depth) match the resource of a requirement it governs"),
    CodeInfo("SOS505", "argument not in the tool's inputSchema", "read an argument the tool's inputSchema declares, or fix the spelling"),
    CodeInfo("SOS506", "requirement for a tool the catalogue lacks", "remove the requirement, or register the tool in the catalogue"),
    CodeInfo("SOS507", "list interpolated into a pattern", "interpolate a string attribute; to test membership write a condition: when x in context.roles"),
    CodeInfo("SOS508", "constant condition", "the condition does not depend on the call: fix the comparison, or remove the condition (or the rule)"),
    CodeInfo("SOS509", "managed pattern matches no requirement", "fix the spelling, or compile the rule files that declare those tools alongside"),
    CodeInfo("SOS510", "duplicate toolpolicy entry", "list each tool once, in one clause"),
    CodeInfo("SOS511", "duplicate key in a test object", "write each key once; only the last value is used"),
    CodeInfo("SOS512", "condition reads the raw resource argument", "read the canonical form: resource, or path(args.x); the argument as sent may hold '..' or '//'"),
    CodeInfo("SOS513", "literal that cannot match what it reads as", "write the literal in NFC, in one script, without characters that only look like ASCII; compare lower(x) with a lower-case literal"),
    CodeInfo("SOS514", "invalid suppression", "write '# sos:ignore CODE: reason' for a warning code, with a reason after the colon"),
    CodeInfo("SOS515", "unused suppression", "remove the suppression, or move it to the statement whose warning it is for"),
    CodeInfo("SOS516", "approval rule that never takes effect", "an approval rule acts only on calls a permit allows and no forbid forbids: narrow the forbid, add the permit, or delete the approval rule"),
    CodeInfo("SOS517", "test denied before any rule", "fix the call's arguments or run policy, or expect the reason ('deny unresolvable_resource', 'deny not_in_run_policy') if that is what the test is for"),
    CodeInfo("SOS900", "internal error", "a bug in sharedos-policy, not in the policy: report it with SHAREDOS_POLICY_DEBUG=1 output"),
    CodeInfo("SOS901", "cannot format file safely", "fix the file's other diagnostics first; fmt never rewrites a file it cannot reproduce exactly"),
    # -- the tool itself
)  # fmt: skip

#: code -> CodeInfo, for every code SharedOS's policy tools can emit (the one catalogue).
CODES: dict[str, CodeInfo] = {info.code: info for info in _CATALOGUE}


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One error or warning at a source position.

    ``line``/``col`` are 1-based; ``end_col`` is exclusive. ``excerpt`` is the
    source line the diagnostic points into (empty when unknown).
    """

    code: str
    severity: Severity
    message: str
    file: str
    line: int
    col: int
    end_line: int
    end_col: int
    hint: str
    excerpt: str = ""
    #: column (1-based) of the excerpt's first character: a long line is cut
    #: to a window around the span (``EXCERPT_WIDTH``), never printed whole
    excerpt_col: int = 1

    @property
    def location(self) -> str:
        """``file:line:col``."""
        return f"{self.file}:{self.line}:{self.col}"

    def render(self) -> str:
        """Human form: header, numbered excerpt with carets under the span, hint."""
        # every line spelled out (``unambiguous``): the excerpt is the policy file's own
        # text, and a raw escape, carriage return or bidi override there (what SOS106 warns
        # of) must not retitle, rewrite or reorder the terminal that shows the warning
        out = [unambiguous(f"{self.location}: {self.severity}[{self.code}]: {self.message}")]
        if self.excerpt:
            gutter = str(self.line)
            pad = " " * len(gutter)
            # a tab outside the span is one space (indentation, alignment); inside the span
            # it is spelled: a diagnostic about a tab ("contains a control character") must
            # not point at what reads as a space (``expandtabs(1)`` keeps every index)
            raw = self.excerpt
            start = max(self.col - self.excerpt_col, 0)
            if self.excerpt_col > 1:  # the line was cut on the left
                raw = "..." + raw
                start += 3
            text = raw.expandtabs(1)
            if self.end_line == self.line and self.end_col > self.col:
                width = self.end_col - self.col
            else:
                width = max(len(text) - start, 1)
            width = max(1, min(width, max(len(text) - start, 1)))
            # spelled piece by piece, so the carets are counted on the text as shown (an
            # escape spelled ``\\x1b`` takes four cells, not one; a bidi override six, not none)
            before, within = unambiguous(text[:start]), unambiguous(raw[start : start + width])
            out.append(f" {gutter} | {before}{within}{unambiguous(text[start + width :])}")
            # in terminal cells: a wide character (CJK, fullwidth) takes two, a
            # combining mark none, so the carets stay under the span
            lead, span = _cells(before), _cells(within)
            out.append(f" {pad} | {' ' * lead}{'^' * max(span, 1)}")
        if self.hint:
            out.append(unambiguous(f"  hint: {self.hint}"))
        return "\n".join(out)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (the CLI's ``--format json``)."""
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "end_line": self.end_line,
            "end_col": self.end_col,
            "hint": self.hint,
            "excerpt": self.excerpt,
            "excerpt_col": self.excerpt_col,
        }


def _cells(text: str) -> int:
    """How many terminal cells ``text`` takes (East Asian wide and fullwidth: two;
    combining marks and zero-width format characters: none)."""
    if text.isascii():
        return len(text)
    import unicodedata

    cells = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) == "Cf":
            continue
        cells += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return cells


#: Longest excerpt shown, in characters; a longer line is cut around the span.
EXCERPT_WIDTH = 160


@lru_cache(maxsize=8)
def _lines(source: str) -> tuple[str, ...]:
    # A pure memo (keyed by the text itself): thousands of diagnostics in one
    # large file split it once, not once each. Lines end at '\n' alone, as the
    # lexer counts them: str.splitlines also breaks at a form feed, NEL or
    # U+2028, and every line after one would show another line's text.
    return tuple(line.removesuffix("\r") for line in source.split("\n"))


def source_line(source: str, line: int) -> str:
    """Line ``line`` (1-based) of ``source`` without its newline, or ``""``."""
    if line < 1:
        return ""
    lines = _lines(source)
    return lines[line - 1] if line <= len(lines) else ""


def excerpt_window(text: str, col: int, end_col: int) -> tuple[str, int]:
    """``text`` cut to at most ``EXCERPT_WIDTH`` characters around columns ``col``..``end_col``:
    (excerpt, column of its first character)."""
    if len(text) <= EXCERPT_WIDTH:
        return text, 1
    span = max(end_col - col, 1)
    before = max((EXCERPT_WIDTH - min(span, EXCERPT_WIDTH)) // 2, 10)
    start = max(col - 1 - before, 0)
    cut = text[start : start + EXCERPT_WIDTH]
    return (cut + "..." if start + EXCERPT_WIDTH < len(text) else cut), start + 1


def make(
    code: str,
    message: str,
    *,
    file: str,
    source: str,
    line: int,
    col: int,
    end_line: int | None = None,
    end_col: int | None = None,
    hint: str | None = None,
    severity: Severity = "error",
) -> Diagnostic:
    """Build a diagnostic, filling the hint from ``CODES`` and the excerpt from ``source``."""
    info = CODES[code]
    end = (col + 1) if end_col is None else end_col
    excerpt, excerpt_col = excerpt_window(source_line(source, line), col, end)
    return Diagnostic(
        code=code,
        severity=severity,
        message=message,
        file=file,
        line=line,
        col=col,
        end_line=line if end_line is None else end_line,
        end_col=end,
        hint=info.hint if hint is None else hint,
        excerpt=excerpt,
        excerpt_col=excerpt_col,
    )


def sort_key(diag: Diagnostic) -> tuple[str, int, int, str]:
    """Order diagnostics by file, position, code."""
    return (diag.file, diag.line, diag.col, diag.code)


def render_all(diagnostics: Iterable[Diagnostic]) -> str:
    """Every diagnostic rendered, blank-line separated, in file/position order."""
    return "\n\n".join(d.render() for d in sorted(diagnostics, key=sort_key))


def has_errors(diagnostics: Iterable[Diagnostic]) -> bool:
    """True when any diagnostic is an error (warnings do not stop compilation)."""
    return any(d.severity == "error" for d in diagnostics)


class PolicyError(PolicyLanguageError):
    """Policy text that cannot be compiled. ``str()`` is the rendered diagnostics."""

    def __init__(self, diagnostics: Iterable[Diagnostic]) -> None:
        self.diagnostics: list[Diagnostic] = sorted(diagnostics, key=sort_key)
        super().__init__(render_all(self.diagnostics))
