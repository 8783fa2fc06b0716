"""Per-statement, per-code suppression of warnings: ``# sos:ignore SOS208: reason``.

A comment ``sos:ignore CODE[, CODE...]: REASON`` on the line of a statement
(anywhere from its first to its last line), or on its own line right before
it, silences those warning codes for that statement only. Suppressions are
counted in ``check``'s output, never silent:

* a suppression without a reason, naming an unknown code, or aimed at an
  error (errors cannot be suppressed) is itself a warning (``SOS514``);
* a suppression for a code that does not fire on its statement is a warning
  (``SOS515``), so a fixed problem does not leave a stale excuse behind.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from sharedos.policy import ast
from sharedos.policy.diagnostics import CODES, Diagnostic, make

_MARK_RE = re.compile(r"^\s*sos:ignore\b(.*)$")
_BODY_RE = re.compile(r"^\s+(SOS\d{3}(?:\s*,\s*SOS\d{3})*)\s*(?::(.*))?$")


@dataclass(frozen=True, slots=True)
class Suppression:
    """One ``sos:ignore`` comment and the lines of the statement it governs."""

    codes: tuple[str, ...]
    reason: str
    span: ast.Span
    first: int
    last: int

    def covers(self, diag: Diagnostic) -> bool:
        """Is ``diag`` in this suppression's statement and of one of its codes?"""
        return (
            diag.file == self.span.file
            and self.first <= diag.line <= self.last
            and diag.code in self.codes
        )


@dataclass(slots=True)
class Suppressed:
    """Diagnostics after suppression: what is left, what was silenced, and by what."""

    kept: list[Diagnostic] = field(default_factory=list)
    silenced: list[tuple[Diagnostic, Suppression]] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many warnings were suppressed."""
        return len(self.silenced)


def statement_extent(stmt: ast.Statement) -> tuple[int, int]:
    """The source lines a statement occupies, its annotations included (first, last)."""
    first = stmt.span.line
    if isinstance(stmt, ast.Rule) and stmt.annotations:
        first = min(first, *(a.span.line for a in stmt.annotations))
    return first, stmt.span.end_line


def _source(files: Sequence[ast.PolicyFile], name: str) -> str:
    return next((f.source for f in files if f.path == name), "")


def find(
    files: Sequence[ast.PolicyFile],
) -> tuple[list[Suppression], list[Diagnostic]]:
    """Every suppression of ``files``, and the ``SOS514`` warnings for malformed ones."""
    found: list[Suppression] = []
    problems: list[Diagnostic] = []
    for f in files:
        extents = sorted(statement_extent(s) for s in f.statements)
        for comment in f.comments:
            mark = _MARK_RE.match(comment.text)
            if mark is None:
                continue
            sp = comment.span

            def bad(message: str, sp: ast.Span = sp, source: str = f.source) -> None:
                problems.append(
                    make(
                        "SOS514",
                        message,
                        file=sp.file,
                        source=source,
                        line=sp.line,
                        col=sp.col,
                        end_col=sp.end_col,
                        severity="warning",
                    )
                )

            body = _BODY_RE.match(mark.group(1))
            if body is None:
                bad("a suppression names warning codes: # sos:ignore SOS208: reason")
                continue
            codes = tuple(c.strip() for c in body.group(1).split(","))
            reason = (body.group(2) or "").strip()
            unknown = [c for c in codes if c not in CODES]
            if unknown:
                bad(f"unknown diagnostic code {unknown[0]} in a suppression")
                continue
            if not reason:
                bad(
                    f"suppression of {', '.join(codes)} gives no reason: write "
                    f"# sos:ignore {', '.join(codes)}: why this warning does not apply here"
                )
                continue
            if comment.own_line:
                target = next((e for e in extents if e[0] > sp.line), None)
            else:
                target = next((e for e in extents if e[0] <= sp.line <= e[1]), None)
            if target is None:
                bad("this suppression is not on or right before a statement")
                continue
            found.append(Suppression(codes, reason, sp, target[0], target[1]))
    return found, problems


def apply(
    files: Sequence[ast.PolicyFile], diagnostics: Sequence[Diagnostic], *, audit: bool = True
) -> Suppressed:
    """Silence the warnings the files' suppressions cover.

    With ``audit`` (``check``, ``compile``: every lint ran, so an unused
    suppression is known to be unused), malformed suppressions (``SOS514``),
    suppressions aimed at an error (``SOS514``) and unused ones (``SOS515``)
    are reported among the diagnostics kept.
    """
    suppressions, problems = find(files)
    out = Suppressed()
    used: set[tuple[int, str]] = set()
    aimed_at_errors: set[tuple[int, str]] = set()
    for diag in diagnostics:
        match = next((s for s in suppressions if s.covers(diag)), None)
        if match is None:
            out.kept.append(diag)
        elif diag.severity == "error":
            out.kept.append(diag)
            aimed_at_errors.add((id(match), diag.code))
        else:
            used.add((id(match), diag.code))
            out.silenced.append((diag, match))
    if not audit:
        return out
    out.kept.extend(problems)
    for s in suppressions:
        for code in s.codes:
            if (id(s), code) in used:
                continue
            source = _source(files, s.span.file)
            if (id(s), code) in aimed_at_errors:
                message = f"{code} here is an error, and errors cannot be suppressed"
                kind = "SOS514"
            else:
                message = (
                    f"suppression of {code} is unused: no {code} warning fires on this statement"
                )
                kind = "SOS515"
            out.kept.append(
                make(
                    kind,
                    message,
                    file=s.span.file,
                    source=source,
                    line=s.span.line,
                    col=s.span.col,
                    end_col=s.span.end_col,
                    severity="warning",
                )
            )
    return out
