"""The host configuration file on the command line, spelled the same way by every command.

``--host-config FILE`` is accepted by every command that reads the host file
(``run``, ``conformance run``, ``host check``, ``upstream …``). The commands
that always need it (``host check``, ``upstream …``) also take it as their
positional argument, as they always did: give one of the two, not both.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

_PATH = click.Path(dir_okay=False, path_type=Path)


def host_file_option(func: F) -> F:
    """Add an optional positional ``CONFIG`` and ``--host-config FILE`` (resolved by
    ``required_host_file``)."""
    func = click.option(
        "--host-config",
        "host_config_option",
        type=_PATH,
        metavar="FILE",
        help="The host configuration (TOML); the same as the positional CONFIG.",
    )(func)
    return click.argument("config_path", metavar="[CONFIG]", required=False, type=_PATH)(func)


#: ``--host-config FILE``, required, for the commands that take no positional CONFIG
#: (``upstream login|logout``, ``upstream secret set|remove``)
required_host_config = click.option(
    "--host-config",
    "host_config",
    required=True,
    type=_PATH,
    metavar="FILE",
    help="The host configuration (TOML).",
)


def required_host_file(config_path: Path | None, host_config_option: Path | None) -> Path:
    """The one host file given (positionally or with ``--host-config``); a usage error otherwise."""
    if config_path is not None and host_config_option is not None:
        if config_path != host_config_option:
            raise click.UsageError("give the host configuration once: CONFIG or --host-config")
        return config_path
    chosen = config_path or host_config_option
    if chosen is None:
        raise click.UsageError("which host configuration? give CONFIG or --host-config FILE")
    return chosen
