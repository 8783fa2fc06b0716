"""Load a policy set for the commands that evaluate (eval, explain, catalog, compile).

PATHS are ``.sos`` files or directories of them; a single explicit file that
is not ``.sos`` is taken to be a compiled bundle (``sharedos-policy compile``
output), so host runtimes and operators evaluate exactly what was shipped.
``--trusted-key`` makes a bundle load only when one of the keys signed it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from sharedos.cli.policy._common import EXIT_POLICY, POLICY_SUFFIX, discover_sources

F = TypeVar("F", bound=Callable[..., Any])


def trusted_key_option(func: F) -> F:
    """``--trusted-key PUB`` (repeatable): load a bundle only if one of these keys signed it."""
    return click.option(
        "--trusted-key",
        "trusted_keys",
        multiple=True,
        type=click.Path(dir_okay=False),
        help="Load a bundle only if this public key (PEM) signed it; repeat to trust several.",
    )(func)


def load_policy_set(paths: Sequence[str], trusted_keys: Sequence[str] = ()) -> Any:
    """Compile the sources (or load the one bundle) named by ``paths``; policy errors exit 1.

    Diagnostics are printed on stderr exactly as ``check`` prints them.
    """
    from sharedos.policy import BundleError, PolicyError, compile_paths, load_bundle
    from sharedos.policy.signing import SigningKeyError, load_public_keys

    keys = None
    if trusted_keys:
        try:
            keys = load_public_keys(trusted_keys)
        except SigningKeyError as exc:
            raise click.BadParameter(str(exc), param_hint="--trusted-key") from None
    if len(paths) == 1 and Path(paths[0]).is_file() and Path(paths[0]).suffix != POLICY_SUFFIX:
        try:
            return load_bundle(paths[0], trusted_keys=keys)
        except (BundleError, PolicyError) as exc:
            click.echo(f"error: {exc}", err=True)
            raise click.exceptions.Exit(EXIT_POLICY) from None
    if keys is not None:
        raise click.UsageError("--trusted-key applies to a compiled bundle, not to .sos sources")
    files = discover_sources(paths)
    try:
        return compile_paths(files)
    except PolicyError as exc:
        click.echo(str(exc), err=True)
        raise click.exceptions.Exit(EXIT_POLICY) from None
