"""``sharedos bundle``: publish and check distributed policy bundles (keygen, sign, verify, fetch).

``keygen DIR`` writes an ed25519 key pair (``DIR/NAME.pem`` 0600, ``DIR/NAME.pub``);
the same kind of key signs bundles and evidence seals. ``sign --key PEM
BUNDLE`` writes ``BUNDLE.sig``. ``verify [--key PUB]... SOURCE`` fetches a
bundle from a directory, file or URL and runs every check a host runs before
using it (exit 0: it would be used; 1: it would be refused; 2: usage).
"""

from __future__ import annotations

import os
from pathlib import Path

import click


@click.group()
def bundle() -> None:
    """Publish and check policy bundles that hosts fetch and verify."""


@bundle.command("keygen")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--name", default="sharedos", show_default=True, help="Base name of the key files.")
def keygen_cmd(directory: Path, name: str) -> None:
    """Write an ed25519 key pair: NAME.pem (private, 0600) and NAME.pub."""
    from sharedos.evidence.chain import Signer

    directory.mkdir(parents=True, exist_ok=True)
    private, public = directory / f"{name}.pem", directory / f"{name}.pub"
    if private.exists() or public.exists():
        raise click.ClickException(f"{private} or {public} exists already; not overwriting a key")
    signer = Signer.generate()
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(signer.private_pem())
    public.write_bytes(signer.public_pem())
    click.echo(f"{signer.key_id}: private key {private}, public key {public}")


@bundle.command("sign")
@click.option(
    "--key", "key", required=True, type=click.Path(dir_okay=False, exists=True, path_type=Path)
)
@click.argument("bundle_file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
def sign_cmd(key: Path, bundle_file: Path) -> None:
    """Write BUNDLE.sig: the base64 ed25519 signature of the bundle's exact bytes."""
    from sharedos.bundles import sign_bundle

    try:
        signature = sign_bundle(bundle_file.read_bytes(), key.read_bytes())
    except ValueError as exc:
        raise click.ClickException(f"{key}: {exc}") from None
    target = bundle_file.with_name(bundle_file.name + ".sig")
    target.write_bytes(signature)
    click.echo(f"signed {bundle_file} -> {target}")


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
