"""Load a policy set for the commands that evaluate (eval, explain, compile).

PATHS are ``.sos`` files or directories of them; a single explicit file that
is not ``.sos`` is taken to be a compiled bundle (``sharedos-policy compile``
output), so host runtimes and operators evaluate exactly what was shipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from sharedos.cli.policy._common import EXIT_POLICY, POLICY_SUFFIX, discover_sources


def load_policy_set(paths: Sequence[str]) -> Any:
    """Compile the sources (or load the one bundle) named by ``paths``; policy errors exit 1.

    Diagnostics are printed on stderr exactly as ``check`` prints them.
    """
    from sharedos.policy import BundleError, PolicyError, compile_paths, load_bundle

    if len(paths) == 1 and Path(paths[0]).is_file() and Path(paths[0]).suffix != POLICY_SUFFIX:
        try:
            return load_bundle(paths[0])
        except (BundleError, PolicyError) as exc:
            click.echo(str(exc), err=True)
            raise click.exceptions.Exit(EXIT_POLICY) from None
    files = discover_sources(paths)
    try:
        return compile_paths(files)
    except PolicyError as exc:
        click.echo(str(exc), err=True)
        raise click.exceptions.Exit(EXIT_POLICY) from None
