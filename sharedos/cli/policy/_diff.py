"""``diff``: which requests two policies decide differently, with counterexamples.

Exit codes, like ``diff(1)``: 0 no decision can change (in the kinds
``--kind`` looks for); 1 some can (or the
analysis could not rule it out: its gaps are listed); 2 usage error, or OLD or
NEW does not compile or load; 3 internal error.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from sharedos.cli.policy._common import (
    EXIT_OK,
    EXIT_POLICY,
    EXIT_USAGE,
    POLICY_SUFFIX,
    discover_sources,
    emit_json,
    guarded,
    shown,
)
from sharedos.cli.policy._load import trusted_key_option

#: ``--kind`` spellings -> the report's kinds.
_KINDS = {"widened": "widened", "narrowed": "narrowed", "reason-changed": "reason changed"}


def is_bundle(path: str) -> bool:
    """Is ``path`` given as a compiled bundle (a file that is not ``.sos``)?"""
    given = Path(path)
    return given.is_file() and given.suffix != POLICY_SUFFIX


def refuse_unused_with(also: Sequence[str], sides: Sequence[str | None]) -> None:
    """``--with`` compiles more sources with each side given as sources; a bundle is the
    whole policy and takes none. Refused (usage error) only when no side is sources:
    then ``--with`` would apply to nothing."""
    given = [s for s in sides if s is not None]
    if also and given and all(is_bundle(s) for s in given):
        raise click.UsageError(
            "--with compiles more sources with a side given as sources; every side here is "
            "a bundle (the whole policy), so it would apply to none"
        )


def load_side(path: str, also: Sequence[str], trusted_keys: Sequence[str], which: str) -> Any:
    """Compile OLD or NEW (with the ``--with`` sources) or load it as a bundle.

    A bundle is the whole policy: ``also`` does not apply to it (the other side,
    given as sources, may need them: ``diff deployed.bundle.json rules --with
    policy``; ``refuse_unused_with`` refuses ``--with`` when no side takes it).
    A policy that does not compile, or a bundle that does not load, exits 2
    (exit 1 means "decisions change"), with its diagnostics on stderr."""
    from sharedos.policy import BundleError, PolicyError, compile_paths, load_bundle
    from sharedos.policy.signing import SigningKeyError, load_public_keys

    given = Path(path)
    if not given.exists():
        raise click.BadParameter(f"path does not exist: {path}", param_hint=which)
    if is_bundle(path):
        keys = None
        if trusted_keys:
            try:
                keys = load_public_keys(trusted_keys)
            except SigningKeyError as exc:
                raise click.BadParameter(str(exc), param_hint="--trusted-key") from None
        try:
            return load_bundle(given, trusted_keys=keys)
        except (BundleError, PolicyError) as exc:
            click.echo(f"error: {which} {path}: {exc}", err=True)
            raise click.exceptions.Exit(EXIT_USAGE) from None
    files = discover_sources([path, *also])
    try:
        return compile_paths(files)
    except PolicyError as exc:
        click.echo(f"error: {which} {path} does not compile:", err=True)
        click.echo(str(exc), err=True)
        raise click.exceptions.Exit(EXIT_USAGE) from None


@click.command("diff", short_help="Which requests two policies decide differently.")
@click.argument("old", type=click.Path())
@click.argument("new", type=click.Path())
@click.option(
    "--with",
    "also",
    multiple=True,
    type=click.Path(),
    help="Also compile these .sos files or directories with each side given as sources "
    "(e.g. the run policies); a bundle takes none.",
)
@click.option(
    "--policy",
    "run",
    metavar="RUN",
    help="Decide every request as a run under this toolpolicy (of each side).",
)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(sorted(_KINDS)),
    help="Report only this kind of change (repeatable; default: every kind).",
)
@click.option(
    "--examples",
    default=3,
    show_default=True,
    type=click.IntRange(min=0),
    help="Counterexample requests shown per group (0: every one found).",
)
@trusted_key_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
@guarded
def diff_cmd(
    old: str,
    new: str,
    also: tuple[str, ...],
    run: str | None,
    kinds: tuple[str, ...],
    examples: int,
    trusted_keys: tuple[str, ...],
    fmt: str,
) -> None:
    """Report which requests OLD and NEW decide differently, as counterexamples.

    \b
    OLD and NEW are .sos files, directories of them, or compiled bundles.
    Every counterexample is a concrete request (tool, arguments, context)
    with both decisions and the rules responsible, grouped by tool, action,
    pattern and kind (widened, narrowed, reason changed), and decided twice
    by the real evaluator before it is printed.
    Exit 0: no decision can change (in the kinds --kind looks for; those
    that change in the others are counted). 1: some can, or the analysis is
    incomplete for a construct it lists. 2: usage error, or OLD or NEW does
    not compile or load. 3: internal error.
    """
    from sharedos.policy.analysis.diff import diff_policies

    refuse_unused_with(also, [old, new])
    old_policy = load_side(old, also, trusted_keys, "OLD")
    new_policy = load_side(new, also, trusted_keys, "NEW")
    if run is not None and run not in old_policy.tool_policies | new_policy.tool_policies:
        known = sorted(set(old_policy.tool_policies) | set(new_policy.tool_policies))
        raise click.BadParameter(
            f"no toolpolicy {run!r} is compiled on either side (declared: "
            f"{', '.join(known) or 'none'})",
            param_hint="--policy",
        )
    wanted = [_KINDS[k] for k in kinds] or None
    report = diff_policies(
        old_policy,
        new_policy,
        run_policy=run,
        kinds=wanted,  # type: ignore[arg-type]
        max_examples=examples,
    )
    sides = {
        "old": {"path": old, "bundle_hash": old_policy.bundle_hash},
        "new": {"path": new, "bundle_hash": new_policy.bundle_hash},
    }
    if fmt == "json":
        emit_json({**sides, "run_policy": run, **report.to_dict()})
    else:
        # rule ids, patterns and example calls are the policies' text: an id written with
        # escapes ("\u202e") is a raw bidi override here, and must not reorder the review
        click.echo(shown(f"old: {old} ({old_policy.bundle_hash[:12]})"))
        click.echo(shown(f"new: {new} ({new_policy.bundle_hash[:12]})"))
        if run is not None:
            click.echo(shown(f"run policy: {run}"))
        click.echo(shown(report.render()))
    raise click.exceptions.Exit(EXIT_OK if report.verdict == "unchanged" else EXIT_POLICY)
