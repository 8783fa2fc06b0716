"""Run columns and produce a report: the one path the CLI, the demo and tests share."""

from __future__ import annotations

import importlib
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from sharedos.confine.leftovers import remove_tree
from sharedos.conformance.columns.base import ColumnOptions, ColumnRun
from sharedos.conformance.manifest import Manifest
from sharedos.conformance.report import Report, build_report
from sharedos.errors import ConformanceError
from sharedos.identity import ColumnKind

COLUMN_KINDS: tuple[str, ...] = tuple(k.value for k in ColumnKind)


class ColumnUnavailableError(ConformanceError, RuntimeError):
    """A column module that is not part of this build."""


async def run_columns(kinds: Sequence[str], options: ColumnOptions) -> list[ColumnRun]:
    """Import ``sharedos.conformance.columns.<kind>`` lazily for each kind and run it."""
    runs: list[ColumnRun] = []
    for kind in kinds:
        if kind not in COLUMN_KINDS:
            raise ValueError(f"unknown column {kind!r} (choose from {', '.join(COLUMN_KINDS)})")
        module_name = f"sharedos.conformance.columns.{kind}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                raise ColumnUnavailableError(
                    f"the {kind} column is not part of this build"
                ) from None
            raise
        workdir = options.workdir / kind
        workdir.mkdir(parents=True, exist_ok=True)
        runs.extend(await module.run(replace(options, workdir=workdir)))
    return runs


async def run_report(
    manifest: Manifest,
    kinds: Sequence[str],
    *,
    options: ColumnOptions | None = None,
    extra_columns: Sequence[ColumnRun] = (),
    keep_workdir: Path | None = None,
) -> tuple[Report, list[ColumnRun]]:
    """Run ``kinds`` in a fresh temp dir (or ``keep_workdir``), append ``extra_columns``, grade."""
    tmp = (
        Path(tempfile.mkdtemp(prefix="sharedos-conformance-"))
        if keep_workdir is None
        else keep_workdir
    )
    try:
        opts = options or ColumnOptions(manifest=manifest, workdir=tmp)
        opts = replace(opts, manifest=manifest, workdir=tmp)
        runs = await run_columns(kinds, opts)
        runs.extend(extra_columns)
        # the host's credentials never reach a report, whatever a harness did with them
        runs = [run.scrubbed(opts.secrets) for run in runs]
        return build_report(manifest, runs), runs
    finally:
        if keep_workdir is None:
            remove_tree(Path(tmp))  # a harness's tree of any depth included
