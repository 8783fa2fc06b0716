"""``keygen``, ``sign`` and ``verify``: Ed25519 signatures on compiled bundles."""

from __future__ import annotations

from pathlib import Path

import click

from sharedos.cli.policy._common import EXIT_OK, EXIT_POLICY, guarded


def _bundle_error(exc: Exception) -> None:
    click.echo(f"error: {exc}", err=True)
    raise click.exceptions.Exit(EXIT_POLICY)


@click.command("keygen", short_help="Create an Ed25519 key pair for signing bundles.")
@click.option(
    "-o",
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Private key file to create (mode 0600); the public key goes to OUT.pub.",
)
@guarded
def keygen_cmd(out: Path) -> None:
    """Create an Ed25519 key pair: OUT (private) and OUT.pub (public), neither overwritten.

    Give OUT to whoever signs bundles, and OUT.pub to every host that loads them.
    """
    from sharedos.policy.signing import key_id, load_public_key, write_keypair

    try:
        private, public = write_keypair(out)
    except FileExistsError as exc:
        raise click.BadParameter(
            f"{exc.filename or out} exists; refusing to overwrite a key", param_hint="-o"
        ) from None
    except OSError as exc:
        raise click.BadParameter(f"cannot write {out}: {exc.strerror}", param_hint="-o") from None
    click.echo(f"{key_id(load_public_key(public))}  {private} {public}")


@click.command("sign", short_help="Sign a compiled bundle with an Ed25519 key.")
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option(
    "--key", "key_path", required=True, type=click.Path(dir_okay=False), help="Private key (PEM)."
)
@click.option(
    "--revision",
    default=None,
    help="The release name hosts stamp on evidence (default: the bundle's own, if any).",
)
@click.option(
    "--sequence",
    type=click.IntRange(min=1),
    default=None,
    help="A number larger than every earlier release's: hosts refuse a lower one "
    "(default: the bundle's own, else the signing time in microseconds).",
)
@guarded
def sign_cmd(bundle: str, key_path: str, revision: str | None, sequence: int | None) -> None:
    """Verify BUNDLE (format, compiler, hash) and add a signature by the key; print its id.

    The signature covers the envelope, the revision, the sequence and the signing time.
    """
    from sharedos.policy.bundle import BundleError, sign_bundle
    from sharedos.policy.signing import SigningKeyError, load_private_key

    try:
        key = load_private_key(key_path)
    except SigningKeyError as exc:
        raise click.BadParameter(str(exc), param_hint="--key") from None
    try:
        signer = sign_bundle(bundle, key, revision=revision, sequence=sequence)
    except BundleError as exc:
        _bundle_error(exc)
    except OSError as exc:
        _bundle_error(BundleError(f"cannot write {bundle}: {exc.strerror or exc}"))
    click.echo(f"signed {bundle} with key {signer}")


@click.command("verify", short_help="Check a bundle's hash and its signature by a public key.")
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option(
    "--pubkey",
    "pubkeys",
    required=True,
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Trusted public key (PEM); repeat to trust several.",
)
@guarded
def verify_cmd(bundle: str, pubkeys: tuple[str, ...]) -> None:
    """Exit 0 when BUNDLE is intact and signed by one of the keys, 1 otherwise."""
    from sharedos.policy.bundle import BundleError, verify_bundle
    from sharedos.policy.signing import SigningKeyError, load_public_keys

    try:
        keys = load_public_keys(pubkeys)
    except SigningKeyError as exc:
        raise click.BadParameter(str(exc), param_hint="--pubkey") from None
    try:
        signer = verify_bundle(bundle, keys)
    except BundleError as exc:
        _bundle_error(exc)
    click.echo(f"ok: {bundle} is intact and signed by key {signer}")
    raise click.exceptions.Exit(EXIT_OK)
