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


def test_h_works_on_a_command_run_on_its_own_first() -> None:
    """A command run alone (embedded, or by another test) keeps ``-h``, alone and later
    under ``sharedos``: click caches each command's help option on its first run."""
    from sharedos.cli.policy import main as policy_main

    runner = CliRunner()
    roots: list[tuple[click.Command, list[str]]] = [(policy_main, ["policy-main"])]
    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        sub = main.get_command(ctx, name)
        assert sub is not None
        roots.append((sub, [name]))

    def leaves(cmd: click.Command, path: list[str]) -> list[tuple[click.Command, list[str]]]:
        found = [(cmd, path)]
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                found += leaves(sub, [*path, name])
        return found

    every = [leaf for cmd, path in roots for leaf in leaves(cmd, path)]
    assert len(every) > 40
    for cmd, path in every:
        res = runner.invoke(cmd, ["-h"], prog_name=path[-1])
        assert res.exit_code == 0 and res.output.startswith("Usage: "), (path, res.output)
    for argv in every_command_path():
        res = runner.invoke(main, [*argv, "-h"])
        assert res.exit_code == 0, (argv, res.output)
