"""``sharedos conformance run``: run columns against the manifest and write the reports."""

from __future__ import annotations

from pathlib import Path

import anyio
import click

from sharedos.conformance.columns.base import ColumnOptions
from sharedos.conformance.manifest import ManifestError, load_manifest
from sharedos.conformance.report import Report, render_matrix, write_reports
from sharedos.conformance.runner import COLUMN_KINDS, ColumnUnavailableError, run_report

SHAPE_CHOICES = ("responses", "anthropic", "pi", "dsh", "all")


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
    help="Live/mcp columns: harness(es), e.g. claude-code, codex, pi, pi-adapter, all.",
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
    help="Directory for the JSON, text and HTML reports.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=300.0,
    show_default=True,
    help="Per-column deadline (s).",
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
) -> None:
    """Run the manifest through the chosen column(s); exit 1 if any cell failed."""
    try:
        manifest = load_manifest(manifest_path)
    except ManifestError as exc:
        raise click.ClickException(str(exc)) from None
    options = ColumnOptions(
        manifest=manifest,
        workdir=Path("."),
        shapes=shapes,
        harnesses=harnesses,
        transport=transport,
        host_config=host_config,
        policy_paths=rules or None,
        timeout_s=timeout_s,
    )

    async def _run() -> Report:
        report, _ = await run_report(manifest, columns, options=options)
        return report

    try:
        report = anyio.run(_run)
    except (ColumnUnavailableError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:  # a policy that does not compile, etc.: a message, not a traceback
        from sharedos.policy import PolicyError

        if isinstance(exc, PolicyError):
            raise click.ClickException(f"the rules do not compile:\n{exc}") from None
        raise
    stem = "conformance-" + "-".join(columns)
    paths = write_reports(report, out_dir, stem=stem)
    click.echo(report.catalog_check.message)
    click.echo("")
    click.echo(render_matrix(report))
    t = report.totals
    click.echo(
        f"\n{t['passed']} passed, {t['failed']} failed, {t['not_exercised']} not exercised, "
        f"{t['not_available']} not available"
    )
    for kind, path in paths.items():
        click.echo(f"{kind} report: {path}")
    if not report.ok:
        raise SystemExit(1)
