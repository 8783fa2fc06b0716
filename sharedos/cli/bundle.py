"""``sharedos bundle verify``: fetch a distributed policy bundle and check it as a host would.

``verify [--key PUB]... [--state FILE | --host-file HOST] [SOURCE]`` fetches the
bundle from a directory, a file or an http(s) URL and runs every check a host
runs before using it (exit 0: a host would use it; 1: a host would refuse it;
2: usage). With a host's anti-rollback state (``--state``, or ``--host-file``,
which also gives the host's source and keys) that includes refusing a release
older than the one the host already enforced. Bundles are built
with ``sharedos-policy compile`` and signed with ``sharedos-policy sign``
(keys: ``sharedos-policy keygen``); the same kind of key signs evidence seals.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from sharedos.cli._help import with_short_help
from sharedos.terminal import unambiguous

if TYPE_CHECKING:
    from sharedos.bundles.state import BundleState


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
@click.option(
    "--state",
    "state_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A host's anti-rollback state file: refuse what that host would refuse as older.",
)
@click.option(
    "--host-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Check as the host this file configures: its [policy] bundle (when SOURCE is "
    "not given), keys (when no --key) and anti-rollback state (when no --state).",
)
@click.argument("source", required=False)
def verify_cmd(
    keys: tuple[Path, ...], state_file: Path | None, host_file: Path | None, source: str | None
) -> None:
    """Fetch SOURCE (directory, file or http(s) URL) and check it as a host would.

    Without --state or --host-file no host's history is known, so a bundle
    older than one a host already enforced still passes here: give the host
    file (or its state file) to see what that host would do.
    """
    from sharedos.bundles import BundleRejected, BundleVerifier, open_source
    from sharedos.bundles.manager import rollback_problem
    from sharedos.bundles.source import Fetched, SourceError
    from sharedos.bundles.state import BundleState, StateError

    key_paths: list[str | Path] = list(keys)
    state = BundleState(state_file) if state_file is not None else None
    hidden: tuple[str, ...] = ()
    if host_file is not None:
        source, key_paths, state, hidden = _from_host_file(host_file, source, key_paths, state)
    if source is None:
        raise click.UsageError("give SOURCE, or --host-file of a host with a [policy] bundle")
    try:
        verifier = BundleVerifier(key_paths)
    except (OSError, ValueError) as exc:
        raise click.UsageError(f"cannot use the keys: {exc}") from None
    try:
        fetched = open_source(source, hidden).fetch(None)
    except SourceError as exc:
        click.echo(unambiguous(f"refused: {exc}"), err=True)
        raise SystemExit(1) from None
    assert isinstance(fetched, Fetched)
    try:
        loaded = verifier.verify(fetched)
    except BundleRejected as exc:
        click.echo(unambiguous(f"refused: {exc}"), err=True)
        raise SystemExit(1) from None
    if state is not None:
        state_file = state.path
        try:
            floor = state.load()
        except StateError as exc:  # a host refuses every bundle until this is fixed
            click.echo(
                unambiguous(f"refused: {exc}: a host reading it refuses every bundle"), err=True
            )
            raise SystemExit(1) from None
        why = rollback_problem(loaded, floor)
        if why is not None:
            click.echo(unambiguous(f"refused: {why}"), err=True)
            raise SystemExit(1) from None
        if floor is None:  # a host that never loaded a release, or a mistyped path
            click.echo(
                unambiguous(
                    f"note: {state_file} records no release (no such file): nothing was "
                    "compared for rollback; a host with this state takes any signed release"
                ),
                err=True,
            )
    click.echo(unambiguous(f"ok: {loaded.describe()}"))


def _from_host_file(
    host_file: Path, source: str | None, keys: list[str | Path], state: BundleState | None
) -> tuple[str, list[str | Path], BundleState, tuple[str, ...]]:
    """SOURCE, keys and state as the host ``host_file`` configures them, where not given,
    and what messages naming the host's bundle URL mask (``HostConfig.bundle_hidden``)."""
    hidden: tuple[str, ...] = ()
    from sharedos.harness.hostconfig import HostConfigError, load_host_config

    try:
        config = load_host_config(host_file)
        if source is None:
            source = config.bundle_location()
            hidden = config.bundle_hidden()
        if not keys:
            keys = [config.resolve_file(k) for k in config.policy.keys]
        if state is None:
            state = config.bundle_state()
    except HostConfigError as exc:
        raise click.UsageError(str(exc)) from None
    return source, keys, state, hidden


with_short_help(bundle)
