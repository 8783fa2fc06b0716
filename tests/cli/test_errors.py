"""click's ``Error: …`` lines quote what a command was given or found: spelled, on both
entry points and for every subcommand, never raw on the operator's terminal."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sharedos.cli.main import main as sharedos_main
from sharedos.cli.policy import main as policy_main

#: an OSC 52 clipboard write, a cursor move and erase, a C1 CSI, a bidi override
HOSTILE = "\x1b]52;c;cm0gLXJmIH4K\x07\x1b[1A\x1b[2K\u009b2J\u202e"
SPELLED = "\\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b[1A\\x1b[2K\\x9b2J\\u202e"
RAW = {"\x1b", "\x07", "\u009b", "\u202e"}


@pytest.mark.parametrize(
    ("cli", "argv"),
    [
        # a message of SharedOS's own (evidence: a ClickException quoting the path)
        (sharedos_main, ["evidence", "list", "--db", "{p}"]),
        (sharedos_main, ["approvals", "list", "--db", "{p}"]),
        # click's own parameter checks, raised while a subcommand parses its arguments
        (policy_main, ["check", "{p}"]),
        (sharedos_main, ["evidence", "verify", "--db", "{p}", "--turn", "x"]),
    ],
)
def test_an_error_message_quoting_its_input_is_spelled(
    tmp_path: Path, cli: click.Command, argv: list[str]
) -> None:
    # before: ``Error: no evidence database at /…ESC]52;…BEL…`` wrote the clipboard, erased
    # the line above and reordered the rest of it on the operator's terminal
    path = str(tmp_path / f"store{HOSTILE}.sqlite")
    result = CliRunner().invoke(cli, [a.replace("{p}", path) for a in argv])
    assert result.exit_code != 0
    assert not RAW & set(result.output), ascii(result.output)
    assert f"store{SPELLED}.sqlite" in result.output


def test_a_message_of_many_lines_keeps_its_lines_and_tabs(tmp_path: Path) -> None:
    from sharedos.cli._errors import SpelledErrorsGroup

    @click.group(cls=SpelledErrorsGroup)
    def top() -> None:
        pass

    @top.command()
    def fail() -> None:
        raise click.ClickException(f"the host file is not usable:\n\t[upstream.x{HOSTILE}]")

    result = CliRunner().invoke(top, ["fail"])
    assert result.exit_code == 1
    assert result.output == f"Error: the host file is not usable:\n\t[upstream.x{SPELLED}]\n"
