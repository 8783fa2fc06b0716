"""``sharedos-policy check``: parse, check and lint policy files; report every diagnostic."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import click

from sharedos.cli.policy._common import (
    EXIT_OK,
    EXIT_POLICY,
    discover_sources,
    emit_json,
    guarded,
    read_json_file,
)
from sharedos.policy.diagnostics import Diagnostic, sort_key


def load_lint_options(context_schema: str | None, catalog: str | None) -> object:
    """Build ``LintOptions`` from the option files; a bad file is a usage error (exit 2)."""
    from sharedos.policy.lints import LintOptions
    from sharedos.policy.schemas import SchemaError, catalog_from_json, schema_from_json

    opts = LintOptions()
    if context_schema is not None:
        data = read_json_file(Path(context_schema), "--context-schema")
        try:
            opts.context_schema = schema_from_json(data, Path(context_schema).name)
        except SchemaError as exc:
            raise click.BadParameter(str(exc), param_hint="--context-schema") from None
        opts.context_schema_name = context_schema
    if catalog is not None:
        data = read_json_file(Path(catalog), "--catalog")
        try:
            opts.catalog = catalog_from_json(data)
        except SchemaError as exc:
            raise click.BadParameter(f"{catalog}: {exc}", param_hint="--catalog") from None
    return opts


def check_files(files: Sequence[Path], options: object) -> list[Diagnostic]:
    """Every diagnostic for ``files`` checked together: syntax, meaning, then lints
    (suppressed warnings left out: ``check_with_suppressions`` counts them)."""
    return check_with_suppressions(files, options)[0]


def check_with_suppressions(files: Sequence[Path], options: object) -> tuple[list[Diagnostic], int]:
    """Every diagnostic for ``files`` after ``# sos:ignore`` suppressions, and how many
    warnings those silenced (malformed and unused suppressions are diagnostics)."""
    from sharedos.policy import suppress
    from sharedos.policy.lints import LintOptions, lint
    from sharedos.policy.loader import parse_and_check, program_names, read_file

    diagnostics: list[Diagnostic] = []
    sources: list[tuple[str, str]] = []
    for path in files:
        text, problem = read_file(path)
        if problem is not None:
            diagnostics.append(problem)
        elif text is not None:
            sources.append((str(path), text))
    # rules without @id are named as a compile of the same paths names them
    parsed, found, _policies = parse_and_check(sources, names=program_names(files))
    diagnostics.extend(found)
    assert isinstance(options, LintOptions)
    diagnostics.extend(lint(parsed, options))
    result = suppress.apply(parsed, diagnostics)
    return sorted(result.kept, key=sort_key), result.count


@click.command("check", short_help="Parse, check and lint policy files; report every diagnostic.")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--context-schema",
    type=click.Path(dir_okay=False),
    help="JSON Schema (or name->type map) of the context; unknown context.x are warned about.",
)
@click.option(
    "--catalog",
    type=click.Path(dir_okay=False),
    help='JSON list of {"name", "inputSchema"}: args.x a tool lacks are warned about.',
)
@click.option("--strict", is_flag=True, help="Treat warnings as errors (exit 1).")
@click.option(
    "--max-errors",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Print at most this many diagnostics (0: all); the summary still counts every one.",
)
@guarded
def check_cmd(
    paths: tuple[str, ...],
    fmt: str,
    context_schema: str | None,
    catalog: str | None,
    strict: bool,
    max_errors: int,
) -> None:
    """Parse, check and lint every .sos file under PATHS, compiled together.

    Prints every diagnostic with file:line:col, a caret excerpt and its code.
    Exit 0 when there are no errors (warnings allowed unless --strict), 1 otherwise.
    """
    files = discover_sources(paths)
    options = load_lint_options(context_schema, catalog)
    diagnostics, suppressed = check_with_suppressions(files, options)
    if strict:
        diagnostics = [dataclasses.replace(d, severity="error") for d in diagnostics]
    errors = sum(1 for d in diagnostics if d.severity == "error")
    warnings = len(diagnostics) - errors
    shown = diagnostics[:max_errors] if max_errors else diagnostics
    if fmt == "json":
        emit_json(
            {
                "ok": errors == 0,
                "files": [str(f) for f in files],
                "errors": errors,
                "warnings": warnings,
                "suppressed": suppressed,
                "diagnostics": [d.to_dict() for d in shown],
                "truncated": len(shown) < len(diagnostics),
            }
        )
    else:
        for diag in shown:
            click.echo(diag.render() + "\n")
        if len(shown) < len(diagnostics):
            click.echo(
                f"... {len(diagnostics) - len(shown)} more not shown (--max-errors {max_errors})\n"
            )
        noun = "file" if len(files) == 1 else "files"
        status = "ok" if errors == 0 else "failed"
        click.echo(
            f"{status}: {len(files)} {noun} checked, {errors} error{'s' if errors != 1 else ''}, "
            f"{warnings} warning{'s' if warnings != 1 else ''}"
            + (f", {suppressed} suppressed" if suppressed else "")
            + (" (--strict: warnings count as errors)" if strict and diagnostics else "")
        )
    raise click.exceptions.Exit(EXIT_POLICY if errors else EXIT_OK)
