"""``-h`` as well as ``--help`` on every command, however it is reached."""

from __future__ import annotations

import click

__all__ = ["HELP_OPTION_NAMES", "with_short_help"]

HELP_OPTION_NAMES = ["-h", "--help"]


def with_short_help(command: click.Command) -> click.Command:
    """Give ``command`` and every subcommand already attached to it ``-h`` as ``--help``.

    Click hands a group's context settings down only when the command is reached
    through that group, and it caches each command's help option the first time the
    command runs; a command first run on its own (embedded, or from a test) would keep
    ``--help`` alone for the life of the process. Setting it on each command makes the
    answer the same however the command is reached. Returns ``command``.
    """
    command.context_settings.setdefault("help_option_names", list(HELP_OPTION_NAMES))
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            with_short_help(sub)
    return command
