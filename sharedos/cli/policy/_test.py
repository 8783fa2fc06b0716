"""``sharedos-policy test``: run the policies' own test blocks, with rule coverage.

Exit codes (``_common``): 0 every test that ran passed (and coverage met
``--threshold``); 1 a test failed or coverage is below the threshold; 4 the
policy does not compile; 2 usage; 3 internal error. With ``--format json``
stdout is always one JSON document, errors included.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from sharedos.cli.policy._common import (
    EXIT_INTERNAL,
    EXIT_NO_COMPILE,
    EXIT_OK,
    EXIT_POLICY,
    discover_sources,
    emit_json,
    guarded,
    internal_error_text,
    shown,
)


@click.command("test", short_help="Run the policies' test blocks (--coverage: unexercised rules).")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--coverage",
    is_flag=True,
    help="Report rules no test exercised, the coverage percentage, and the when/unless "
    "conditions and or terms no test decided both ways.",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0, 100),
    help="With --coverage: exit 1 when fewer than this percentage of rules were exercised.",
)
@click.option(
    "--run", "run_pattern", metavar="PATTERN", help="Run only tests whose name matches this regex."
)
@click.option(
    "--junit",
    "junit_path",
    type=click.Path(dir_okay=False),
    help="Also write the results as JUnit XML to this file.",
)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option("-v", "--verbose", is_flag=True, help="Show each test's decision, not only failures.")
@guarded
def test_cmd(
    paths: tuple[str, ...],
    coverage: bool,
    threshold: float | None,
    run_pattern: str | None,
    junit_path: str | None,
    fmt: str,
    verbose: bool,
) -> None:
    """Run the test blocks of PATHS (compiled together) against the compiled policy.

    \b
    Prints PASS/FAIL/SKIP per test with file:line, and the decision path of
    every failing test. Exit 0 when every test that ran passed, 1 when a test
    failed (or coverage is below --threshold), 4 when the policy does not
    compile.
    """
    if threshold is not None and not coverage:
        raise click.UsageError("--threshold needs --coverage")
    if run_pattern is not None:
        try:
            re.compile(run_pattern)
        except re.error as exc:
            raise click.BadParameter(
                f"not a regular expression: {exc}", param_hint="--run"
            ) from None
    files = discover_sources(paths)
    if fmt == "json":
        try:
            code, doc = _run(files, coverage, threshold, run_pattern, junit_path)
        except click.exceptions.ClickException:
            raise
        except Exception as exc:  # still JSON on stdout, as promised
            emit_json(
                {"ok": False, "error": {"code": "SOS900", "message": internal_error_text(exc)}}
            )
            raise click.exceptions.Exit(EXIT_INTERNAL) from None
        emit_json(doc)
        raise click.exceptions.Exit(code)
    code, doc = _run(
        files, coverage, threshold, run_pattern, junit_path, echo=True, verbose=verbose
    )
    raise click.exceptions.Exit(code)


def _run(
    files: list[Path],
    coverage: bool,
    threshold: float | None,
    run_pattern: str | None,
    junit_path: str | None,
    *,
    echo: bool = False,
    verbose: bool = False,
) -> tuple[int, dict[str, Any]]:
    from sharedos.policy import PolicyError, compile_paths
    from sharedos.policy.testing import run_tests, select_tests

    try:
        policy = compile_paths(files)
    except PolicyError as exc:
        if echo:
            click.echo(str(exc), err=True)
            click.echo("the policy does not compile: no test was run", err=True)
        doc = {
            "ok": False,
            "error": {"code": "does_not_compile", "message": "the policy does not compile"},
            "diagnostics": [d.to_dict() for d in exc.diagnostics],
        }
        return EXIT_NO_COMPILE, doc
    selected = select_tests(policy.tests, run_pattern)
    if run_pattern is not None and policy.tests and not selected:
        # a misspelt filter must not turn a test step green with nothing run
        count = len(policy.tests)
        raise click.BadParameter(
            f"no test name matches {run_pattern!r} (the policy has {count} test "
            f"block{'s' if count != 1 else ''})",
            param_hint="--run",
        )
    report = run_tests(policy, selected, branches=coverage)
    if junit_path is not None:
        try:
            Path(junit_path).write_text(report.junit_xml(), encoding="utf-8")
        except OSError as exc:
            raise click.BadParameter(
                f"cannot write {junit_path}: {exc.strerror}", param_hint="--junit"
            ) from None
    below = coverage and threshold is not None and not report.coverage.meets(threshold)
    doc = report.to_dict(with_coverage=coverage)
    doc["ok"] = report.ok and not below
    if threshold is not None:
        doc["threshold"] = threshold
    if echo:
        _print(report, coverage, threshold, below, verbose)
    return (EXIT_OK if doc["ok"] else EXIT_POLICY), doc


def _print(
    report: Any, coverage: bool, threshold: float | None, below: bool, verbose: bool
) -> None:
    for outcome in report.outcomes:
        click.echo(shown(f"{outcome.status} {outcome.location} {outcome.name}"))
        if outcome.skipped:
            if outcome.message and outcome.message != "skipped":
                click.echo(shown(f"     skipped: {outcome.message}"))
        elif not outcome.passed:
            click.echo(shown(f"     {outcome.message}"))
            for line in outcome.trace.split("\n"):
                click.echo(shown(f"     | {line}"))
        elif verbose and outcome.decision is not None:
            d = outcome.decision
            rules = ", ".join(r.id for r in d.rule_ids) or "-"
            click.echo(
                shown(
                    f"     {d.effect.value} ({d.reason.value}) resource={d.resource} rules={rules}"
                )
            )
    total = len(report.outcomes)
    failed = len(report.failed)
    skipped = len(report.skipped)
    if total == 0:
        click.echo("no test blocks found")
    else:
        click.echo(
            f"{total} test{'s' if total != 1 else ''}: {total - failed - skipped} passed, "
            f"{failed} failed" + (f", {skipped} skipped" if skipped else "")
        )
    if coverage:
        cov = report.coverage
        click.echo(f"coverage: {cov.covered}/{cov.total} rules exercised ({cov.percent}%)")
        for ref in cov.uncovered:
            click.echo(
                shown(f"  not exercised: {ref.file}:{ref.line}:{ref.col} {ref.effect} {ref.id}")
            )
        if report.branches is not None:
            from sharedos.policy.branches import render

            for line in render(report.branches):
                click.echo(shown(line))
        if below:
            click.echo(f"coverage is below the threshold of {threshold:g}%")
