"""fmt must not change what `check` reports: a suppression stays with the statement it silenced."""

from __future__ import annotations

from pathlib import Path

from sharedos.cli.policy._check import check_with_suppressions
from sharedos.policy.formatter import format_source
from sharedos.policy.lints import LintOptions

HEAD = (
    "namespace files\n"
    "requirement files.read { action read; resource path(args.path) }\n"
    'requirement files.get { action get; resource "{args.owner}/{args.repo}" }\n'
)
# two statements on one line, the suppression is for the first one's SOS504
BODY = (
    'forbid read on "x/**"; @id("all") permit read on "/**" # sos:ignore SOS504: kept on purpose\n'
)


def _check(path: Path) -> tuple[list[tuple[str, int]], int]:
    diags, suppressed = check_with_suppressions([path], LintOptions())
    return sorted((d.code, d.line) for d in diags), suppressed


def test_fmt_keeps_a_suppression_on_the_statement_it_silences(tmp_path: Path) -> None:
    before = tmp_path / "before.sos"
    before.write_text(HEAD + BODY)
    assert _check(before) == ([], 1)
    formatted = format_source(HEAD + BODY, "after.sos").text
    assert formatted is not None
    after = tmp_path / "after.sos"
    after.write_text(formatted)
    # fmt moved the comment to the permit's line: SOS504 is back and SOS515 too
    assert _check(after) == ([], 1), formatted
