"""``Seconds``: the option type of every deadline a command takes (run, conformance, login)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from sharedos.cli._params import Seconds


def command(kind: Seconds) -> click.Command:
    @click.command()
    @click.option("--wait", type=kind)
    def main(wait: float) -> None:
        click.echo(repr(wait))

    return main


@pytest.mark.parametrize(
    ("kind", "value", "ok"),
    [
        (Seconds(), "0.5", True),
        (Seconds(), "1e9", True),
        (Seconds(), "0", False),
        (Seconds(), "-3", False),
        (Seconds(), "nan", False),
        (Seconds(), "inf", False),
        (Seconds(), "-inf", False),
        (Seconds(), "soon", False),
        (Seconds(high=3600), "3600", True),
        (Seconds(high=3600), "3600.5", False),
        (Seconds(1, low_open=False), "1", True),
        (Seconds(1, low_open=False), "0.9", False),
        (Seconds(1, low_open=False), "NaN", False),
    ],
)
def test_seconds_are_a_finite_deadline_in_range(kind: Seconds, value: str, ok: bool) -> None:
    result = CliRunner().invoke(command(kind), ["--wait", value])
    assert (result.exit_code == 0) is ok, result.output
    if ok:
        assert float(result.output) == float(value)
    else:
        assert "Invalid value for '--wait'" in result.output


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["run", "--policy", "p", "--timeout", "nan"], "--timeout"),
        (["conformance", "run", "--timeout", "inf"], "--timeout"),
        (["upstream", "login", "u", "--host-config", "h.toml", "--wait", "nan"], "--wait"),
    ],
)
def test_every_deadline_option_refuses_nan_and_infinity(argv: list[str], option: str) -> None:
    from sharedos.cli.main import main

    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in result.output
