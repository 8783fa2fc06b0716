"""The ``sharedos`` command as a whole: help on every command, lazily loaded subcommands."""

from __future__ import annotations

import click
from click.testing import CliRunner

from sharedos.cli.main import main


def every_command_path() -> list[list[str]]:
    """The argv prefix of every command and subcommand, walked through the real click tree."""
    paths: list[list[str]] = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        paths.append(path)
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, name
                walk(sub, [*path, name])

    walk(main, [])
    return paths


def test_help_works_with_h_everywhere() -> None:
    """``-h`` is ``--help`` on every sharedos command and subcommand (issue 13)."""
    paths = every_command_path()
    assert ["conformance", "run"] in paths and ["host", "check"] in paths and ["bridge"] in paths
    runner = CliRunner()
    for argv in paths:
        res = runner.invoke(main, [*argv, "-h"])
        assert res.exit_code == 0, (argv, res.output)
        assert res.output.startswith("Usage: "), (argv, res.output)
        assert res.output == runner.invoke(main, [*argv, "--help"]).output
