"""click's ``Error: …`` lines, spelled as everything else SharedOS prints on a terminal.

A ``ClickException`` message quotes what the command was given or found: a path or
an id the operator pasted, an evidence store's or a ledger's error, a value a
record holds. click prints it raw on stderr, so an escape sequence in it (an OSC 52
clipboard write, a cursor move, a U+202E) reached the terminal. Both entry points'
groups spell every such message (``printable_text``: line breaks and tabs kept) before
click shows it, whichever subcommand raised it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from sharedos.terminal import printable_text

__all__ = ["SpelledErrorsGroup", "spelled_errors"]


@contextlib.contextmanager
def spelled_errors() -> Iterator[None]:
    """Spell the message of a ``ClickException`` raised inside (click shows it later)."""
    try:
        yield
    except click.ClickException as exc:
        # typed Final by click, yet ``show`` reads it only when the error is shown: the same
        # exception (its context, usage line and exit code) with its message spelled
        exc.message = printable_text(exc.message)  # type: ignore[misc]
        raise


class SpelledErrorsGroup(click.Group):
    """A group whose parsing and subcommands raise only spelled ``ClickException`` messages
    (parsing errors of its options and of every subcommand's, and what a command raises)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with spelled_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with spelled_errors():
            return super().invoke(ctx)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """click's ``main``, with standard output that refuses a write (``> /dev/full``)
        said in one line and exit ``EXIT_OUTPUT`` instead of a traceback: on both entry
        points, and for what runs before any command (``--help``, ``--version``), which a
        command's own guard does not see."""
        from sharedos.cli._output import give_up_on_stdout, stdout_refused

        try:
            return super().main(*args, **kwargs)
        except OSError as exc:
            if not stdout_refused(exc):
                raise
            raise SystemExit(give_up_on_stdout(exc).exit_code) from None
