"""``sharedos-policy test``: run the policies' own test blocks, with rule coverage."""

from __future__ import annotations

import click

from sharedos.cli.policy._common import EXIT_OK, EXIT_POLICY, discover_sources, emit_json, guarded


@click.command("test", short_help="Run the policies' test blocks (--coverage: unexercised rules).")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--coverage", is_flag=True, help="Report rules no test exercised and the coverage percentage."
)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option("-v", "--verbose", is_flag=True, help="Show each test's decision, not only failures.")
@guarded
def test_cmd(paths: tuple[str, ...], coverage: bool, fmt: str, verbose: bool) -> None:
    """Run the test blocks of PATHS (compiled together) against the compiled policy.

    Prints PASS/FAIL per test with file:line. Exit 0 when every test passes,
    1 when a test fails or the policy does not compile.
    """
    from sharedos.policy import PolicyError, compile_paths
    from sharedos.policy.testing import run_tests

    files = discover_sources(paths)
    try:
        policy = compile_paths(files)
    except PolicyError as exc:
        click.echo(str(exc), err=True)
        raise click.exceptions.Exit(EXIT_POLICY) from None
    report = run_tests(policy)
    if fmt == "json":
        emit_json(report.to_dict(with_coverage=coverage))
        raise click.exceptions.Exit(EXIT_OK if report.ok else EXIT_POLICY)

    for outcome in report.outcomes:
        mark = "PASS" if outcome.passed else "FAIL"
        click.echo(f"{mark} {outcome.location} {outcome.name}")
        if not outcome.passed:
            click.echo(f"     {outcome.message}")
        elif verbose and outcome.decision is not None:
            d = outcome.decision
            rules = ", ".join(r.id for r in d.rule_ids) or "-"
            click.echo(
                f"     {d.effect.value} ({d.reason.value}) resource={d.resource} rules={rules}"
            )
    total = len(report.outcomes)
    failed = len(report.failed)
    if total == 0:
        click.echo("no test blocks found")
    else:
        click.echo(
            f"{total} test{'s' if total != 1 else ''}: {total - failed} passed, {failed} failed"
        )
    if coverage:
        cov = report.coverage
        click.echo(f"coverage: {cov.covered}/{cov.total} rules exercised ({cov.percent}%)")
        for ref in cov.uncovered:
            click.echo(f"  not exercised: {ref.file}:{ref.line}:{ref.col} {ref.effect} {ref.id}")
    raise click.exceptions.Exit(EXIT_OK if report.ok else EXIT_POLICY)
