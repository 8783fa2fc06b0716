"""``sharedos bundle verify``: fetch a distributed policy bundle and check it as a host would.

``verify [--key PUB]... SOURCE`` fetches the bundle from a directory, a file
or an http(s) URL and runs every check a host runs before using it (exit 0:
a host would use it; 1: a host would refuse it; 2: usage). Bundles are built
with ``sharedos-policy compile`` and signed with ``sharedos-policy sign``
(keys: ``sharedos-policy keygen``); the same kind of key signs evidence seals.
"""

from __future__ import annotations

from pathlib import Path

import click

from sharedos.cli._help import with_short_help


@click.group()
def bundle() -> None:
    """Check the policy bundles hosts fetch and verify."""


@bundle.command("verify")
@click.option(
    "--key",
    "keys",
    multiple=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A trusted public key (PEM); with any, the bundle must be signed by one.",
)
@click.argument("source")
def verify_cmd(keys: tuple[Path, ...], source: str) -> None:
    """Fetch SOURCE (directory, file or http(s) URL) and check it as a host would."""
    from sharedos.bundles import BundleRejected, BundleVerifier, open_source
    from sharedos.bundles.source import Fetched, SourceError

    try:
        verifier = BundleVerifier(keys)
    except (OSError, ValueError) as exc:
        raise click.UsageError(f"cannot use the keys: {exc}") from None
    try:
        fetched = open_source(source).fetch(None)
    except SourceError as exc:
        click.echo(f"refused: {exc}", err=True)
        raise SystemExit(1) from None
    assert isinstance(fetched, Fetched)
    try:
        loaded = verifier.verify(fetched)
    except BundleRejected as exc:
        click.echo(f"refused: {exc}", err=True)
        raise SystemExit(1) from None
    click.echo(f"ok: {loaded.describe()}")


with_short_help(bundle)
