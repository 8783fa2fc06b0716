"""``sharedos conformance run``: run columns against the manifest and write the reports.

Exit status: 0 when every cell that was exercised passed; 1 when a cell
failed; 2 for a usage error (an unknown column, shape, transport or harness);
3 when no cell was exercised at all (every row not exercised or not
available): a run that proved nothing is not a success.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import anyio
import click

from sharedos.cli._help import with_short_help
from sharedos.cli._params import Seconds
from sharedos.conformance.columns.base import ColumnOptions, ColumnRun
from sharedos.conformance.grading import columns_as_run
from sharedos.conformance.manifest import Manifest, ManifestError, load_manifest
from sharedos.conformance.report import (
    Report,
    confinement_summary,
    render_matrix,
    report_paths,
    totals_line,
    write_private_text,
    write_reports,
)
from sharedos.conformance.runner import COLUMN_KINDS, ColumnUnavailableError, run_report
from sharedos.harness.hostconfig import (
    HostConfig,
    HostConfigError,
    default_host_config,
    load_host_config,
)
from sharedos.redaction import NO_SECRETS, Redactor
from sharedos.terminal import unambiguous

SHAPE_CHOICES = ("responses", "anthropic", "pi", "dsh", "all")
#: exit status when nothing at all was exercised
EXIT_NOTHING_EXERCISED = 3


@click.group()
def conformance() -> None:
    """Prove, column by column, what the kernel refused (manifest rows × columns)."""


@conformance.command("run")
@click.option(
    "--column",
    "columns",
    type=click.Choice(COLUMN_KINDS),
    multiple=True,
    required=True,
    help="Column kind to run (repeat for a side-by-side report).",
)
@click.option(
    "--shape",
    "shapes",
    type=click.Choice(SHAPE_CHOICES),
    multiple=True,
    help="Scripted column: vendor wire shape(s) (default all).",
)
@click.option(
    "--harness",
    "harnesses",
    multiple=True,
    help="Live/mcp columns: harness id(s) of the host configuration, e.g. claude-code, codex, "
    "pi, pi-adapter, dsh, or all.",
)
@click.option(
    "--host-config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Live/mcp columns: the operator's host configuration (TOML).",
)
@click.option(
    "--transport", type=click.Choice(("http", "stdio", "all")), help="Live/mcp columns: transport."
)
@click.option(
    "--manifest",
    "manifest_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Manifest file (default: the shipped manifest).",
)
@click.option(
    "--rules",
    "rules",
    type=click.Path(exists=True, path_type=Path),
    multiple=True,
    help="Policy files/directories to compile instead of the shipped rules.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("reports"),
    show_default=True,
    help="Directory for the JSON, text and HTML reports (written 0600).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=Seconds(),
    default=300.0,
    show_default=True,
    help="Per-column deadline (s).",
)
@click.option(
    "--columns-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write every column as it ran (JSON, 0600, scrubbed): each attempt with what the "
    "harness side saw, the harness-local observations, and each cell's grade.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Columns of one kind run at once, each in its own kernel, store and sandbox "
    "(the report is the same; on a small machine more jobs can outlast the turn deadline).",
)
def run_command(
    columns: tuple[str, ...],
    shapes: tuple[str, ...],
    harnesses: tuple[str, ...],
    host_config: Path | None,
    transport: str | None,
    manifest_path: Path | None,
    rules: tuple[Path, ...],
    out_dir: Path,
    timeout_s: float,
    columns_out: Path | None,
    jobs: int,
) -> None:
    """Run the manifest through the chosen column(s).

    Exit 1 if any cell failed, 2 for a usage error (an unknown harness), 3 if
    nothing was exercised at all.
    """
    stem = "conformance-" + "-".join(columns)
    _check_columns_out(columns_out, out_dir, stem)
    manifest = _manifest(manifest_path)
    host = _host(host_config) if {"live", "mcp"} & set(columns) else None
    if host is not None:
        _check_harnesses(harnesses, host)
    secrets = Redactor(host.secret_values(os.environ)) if host is not None else NO_SECRETS
    options = ColumnOptions(
        manifest=manifest,
        workdir=Path("."),
        shapes=shapes,
        harnesses=harnesses,
        transport=transport,
        host_config=host_config,
        policy_paths=rules or None,
        timeout_s=timeout_s,
        secrets=secrets,
        evidence_synchronous=host.evidence.synchronous if host is not None else "NORMAL",
        jobs=jobs,
    )
    report, runs = _run(manifest, columns, options)
    try:
        paths = write_reports(report, out_dir, stem=stem, secrets=secrets)
        if columns_out is not None:
            document = json.dumps(columns_as_run(manifest, runs), indent=1, default=str)
            write_private_text(columns_out, secrets.scrub(document))
            paths["columns"] = columns_out
    except OSError as exc:  # a full disk, a quota, a directory that cannot be made
        where = exc.filename if exc.filename is not None else out_dir
        raise click.ClickException(
            f"cannot write {where}: {exc.strerror or exc}; nothing was written there"
        ) from None
    _print_summary(report, paths, secrets)
    _exit_for(report)


def _check_columns_out(columns_out: Path | None, out_dir: Path, stem: str) -> None:
    """``--columns-out`` naming one of the reports would replace it: a usage error, before
    anything runs."""
    if columns_out is None:
        return
    target = os.path.realpath(columns_out)
    for kind, path in report_paths(out_dir, stem).items():
        if os.path.realpath(path) == target:
            raise click.UsageError(
                f"--columns-out {columns_out} is where the {kind} report is written "
                f"(--out {out_dir}); name another file"
            )


def _manifest(path: Path | None) -> Manifest:
    """The manifest, or a positioned one-line error."""
    try:
        return load_manifest(path)
    except ManifestError as exc:
        raise click.ClickException(str(exc)) from None


def _host(path: Path | None) -> HostConfig:
    """The host configuration (or the embedded offline default), or its positioned problems."""
    try:
        return load_host_config(path) if path is not None else default_host_config()
    except HostConfigError as exc:
        raise click.ClickException("the host configuration is not usable:\n" + str(exc)) from None


def _check_harnesses(requested: Sequence[str], host: HostConfig) -> None:
    """A harness that the host configuration does not name is a usage error, before any run."""
    unknown = [h for h in requested if h and h != "all" and h not in host.harness]
    if unknown:
        known = ", ".join(host.harness) or "none"
        raise click.UsageError(
            f"unknown harness {', '.join(repr(h) for h in unknown)} "
            f"(the host configuration {host.source} names: {known}; or use all)"
        )


def _run(
    manifest: Manifest, columns: Sequence[str], options: ColumnOptions
) -> tuple[Report, list[ColumnRun]]:
    """Run the columns; a rule set that does not compile is a message, not a traceback."""
    from sharedos.policy import PolicyError

    async def go() -> tuple[Report, list[ColumnRun]]:
        return await run_report(manifest, columns, options=options)

    try:
        return anyio.run(go)
    except (ColumnUnavailableError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    except PolicyError as exc:
        raise click.ClickException(f"the rules do not compile:\n{exc}") from None


def _print_summary(report: Report, paths: dict[str, Path], secrets: Redactor) -> None:
    """The catalogue check, the matrix, the totals and where the reports are (scrubbed)."""
    summary = confinement_summary(report)
    lines = [
        report.catalog_check.message,
        "",
        *([*summary, ""] if summary else []),
        render_matrix(report),
        "",
        totals_line(report),
        *(f"{kind} report: {path}" for kind, path in paths.items()),
    ]
    # scrubbed before control characters are spelled out (a secret may hold a newline)
    text = secrets.scrub("\n".join(lines))
    click.echo(secrets.scrub("\n".join(unambiguous(line) for line in text.split("\n"))))


def exit_status(report: Report) -> tuple[int, str | None]:
    """The run's exit status and the line that explains a non-zero one: 1 when a cell
    failed or the columns were not given the same catalogue (their refusals cannot be
    compared, so the run proved nothing it claims); 3 when no cell was exercised at all."""
    t = report.totals
    if not report.ok:
        return 1, None
    if not report.catalog_check.equal:
        return 1, "error: " + report.catalog_check.message
    if t["passed"] == 0:
        return EXIT_NOTHING_EXERCISED, (
            "error: nothing was exercised: every cell is not exercised, not available or "
            "informational (see the notes of each column)"
        )
    return 0, None


def _exit_for(report: Report) -> None:
    """Leave with ``exit_status(report)``, saying why on standard error."""
    status, why = exit_status(report)
    if why is not None:
        click.echo(unambiguous(why), err=True)
    if status:
        raise SystemExit(status)


with_short_help(conformance)
