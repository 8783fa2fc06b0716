"""``sharedos-policy fmt``: canonical formatting, idempotent, comments kept."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import click

from sharedos import textfile
from sharedos.atomicfile import write_atomically
from sharedos.cli.policy._common import EXIT_OK, EXIT_POLICY, discover_sources, guarded


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so a crash never leaves a half-written policy file."""
    mode = path.stat().st_mode & 0o7777
    write_atomically(path, text, mode=mode, exact_mode=True)


@click.command("fmt", short_help="Format policy files canonically (--check, --diff, --write).")
@click.argument("paths", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option(
    "--check", "check_only", is_flag=True, help="Write nothing; exit 1 if any file would change."
)
@click.option(
    "--diff", "show_diff", is_flag=True, help="Print a unified diff of the changes; write nothing."
)
@click.option("--write", "write", is_flag=True, help="Rewrite files in place.")
@click.option(
    "--line-width",
    "width",
    type=click.IntRange(min=20),
    help="Break rules and test objects longer than this (one operand or key per line).",
)
@guarded
def fmt_cmd(
    paths: tuple[str, ...], check_only: bool, show_diff: bool, write: bool, width: int | None
) -> None:
    """Format .sos files canonically (idempotent; comments preserved).

    \b
    Without a flag the formatted text is printed on stdout.
    --write   rewrite files in place
    --check   list files that would change; exit 1 if any
    --diff    print a unified diff (may be combined with --check)
    A comment inside a rule or a test object stays where it was: the rule
    keeps one operand per line, the object one key per line.
    PATHS may be '-' to format stdin to stdout.
    A file that does not parse is reported and left untouched (exit 1).
    """
    from sharedos.policy.formatter import format_source

    if write and (check_only or show_diff):
        raise click.UsageError("--write cannot be combined with --check or --diff")
    if "-" in paths:
        if len(paths) != 1:
            raise click.UsageError("'-' (stdin) cannot be combined with other paths")
        if write:
            raise click.UsageError("--write rewrites files in place; '-' (stdin) is no file")
        # read as a file is read: bytes decoded strictly (text that is not UTF-8
        # is reported, not carried through as escapes), line ends kept as they are
        data = sys.stdin.buffer.read(textfile.DEFAULT_LIMIT + 1)
        if len(data) > textfile.DEFAULT_LIMIT:
            click.echo(
                f"<stdin>: error[SOS001]: cannot read policy text: larger than "
                f"{textfile.DEFAULT_LIMIT:,} bytes",
                err=True,
            )
            raise click.exceptions.Exit(EXIT_POLICY)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            from sharedos.policy.loader import undecodable

            click.echo(undecodable(Path("<stdin>"), exc).render(), err=True)
            raise click.exceptions.Exit(EXIT_POLICY) from None
        result = format_source(text, "<stdin>", width=width)
        if result.text is None:
            for diag in result.diagnostics:
                click.echo(diag.render() + "\n", err=True)
            raise click.exceptions.Exit(EXIT_POLICY)
        if not (check_only or show_diff):
            click.echo(result.text, nl=False)
            raise click.exceptions.Exit(EXIT_OK)
        # --check and --diff read stdin as they read a file (they printed it formatted,
        # exit 0, whatever it held)
        differs = result.text != text
        if show_diff and differs:
            diff = difflib.unified_diff(
                text.splitlines(keepends=True),
                result.text.splitlines(keepends=True),
                fromfile="<stdin> (original)",
                tofile="<stdin> (formatted)",
            )
            click.echo("".join(diff), nl=False)
        elif check_only and differs:
            click.echo("would reformat <stdin>")
        if check_only:
            click.echo(
                f"{int(differs)} file{'' if differs else 's'} would be reformatted, "
                f"{int(not differs)} unchanged",
                err=True,
            )
        raise click.exceptions.Exit(EXIT_POLICY if check_only and differs else EXIT_OK)

    files = discover_sources(paths)
    failed = 0
    changed: list[Path] = []
    for path in files:
        try:
            # bounded as check reads it: a pipe that never ends is refused, not kept
            original = textfile.read_bytes(path, limit=textfile.DEFAULT_LIMIT).decode("utf-8")
        except UnicodeDecodeError as exc:
            from sharedos.policy.loader import undecodable

            click.echo(undecodable(path, exc).render(), err=True)
            failed += 1
            continue
        except OSError as exc:
            click.echo(f"{path}: error[SOS001]: cannot read policy file: {exc}", err=True)
            failed += 1
            continue
        result = format_source(original, str(path), width=width)
        if result.text is None:
            failed += 1
            for diag in result.diagnostics:
                click.echo(diag.render() + "\n", err=True)
            click.echo(f"{path}: not formatted (fix the errors above first)", err=True)
            continue
        if result.text != original:
            changed.append(path)
        if show_diff:
            if result.text != original:
                diff = difflib.unified_diff(
                    original.splitlines(keepends=True),
                    result.text.splitlines(keepends=True),
                    fromfile=f"{path} (original)",
                    tofile=f"{path} (formatted)",
                )
                click.echo("".join(diff), nl=False)
        elif check_only:
            if result.text != original:
                click.echo(f"would reformat {path}")
        elif write:
            if result.text != original:
                try:
                    _write_atomically(path, result.text)
                except OSError as exc:
                    failed += 1
                    changed.remove(path)
                    click.echo(f"{path}: cannot write: {exc.strerror or exc}", err=True)
                    continue
                click.echo(f"reformatted {path}", err=True)
        else:
            click.echo(result.text, nl=False)
    if check_only or write:
        verb = "would be reformatted" if check_only else "reformatted"
        click.echo(
            f"{len(changed)} file{'s' if len(changed) != 1 else ''} {verb}, "
            f"{len(files) - len(changed) - failed} unchanged"
            + (f", {failed} with errors" if failed else ""),
            err=True,
        )
    if failed or (check_only and changed):
        raise click.exceptions.Exit(EXIT_POLICY)
    raise click.exceptions.Exit(EXIT_OK)
