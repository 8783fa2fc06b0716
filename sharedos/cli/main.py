"""``sharedos``: the host-side command (evidence, bridge, conformance, host config, demo).

Subcommands are registered lazily so that ``sharedos bridge --stdio`` does not
pay for importing the conformance or harness machinery (start-up matters: a
harness launches the stdio bridge once per turn).
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from sharedos.cli._errors import SpelledErrorsGroup
from sharedos.cli._help import HELP_OPTION_NAMES

# subcommand name -> "module:attribute" of a click command
_SUBCOMMANDS: dict[str, str] = {
    "evidence": "sharedos.cli.evidence:evidence",
    "approvals": "sharedos.cli.approvals:approvals",
    "bridge": "sharedos.cli.bridge:bridge",
    "bundle": "sharedos.cli.bundle:bundle",
    "conformance": "sharedos.cli.conformance:conformance",
    "demo": "sharedos.cli.demo:demo",
    "host": "sharedos.cli.host:host",
    "run": "sharedos.cli.run:run",
    "upstream": "sharedos.cli.upstream:upstream",
}


class LazyGroup(SpelledErrorsGroup):
    """A click group that imports a subcommand's module only when it is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return None
            raise
        command: Any = getattr(module, attr)
        return command  # type: ignore[no-any-return]


@click.group(cls=LazyGroup, context_settings={"help_option_names": HELP_OPTION_NAMES})
@click.version_option(package_name="sharedos")
def main() -> None:
    """SharedOS: per-turn tool catalogues, per-call authorization, durable evidence."""
