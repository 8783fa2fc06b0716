"""``sharedos bridge --stdio --turn FILE``: the MCP server command a harness launches for one turn.

It lives with the bridge (not in ``sharedos.cli``) so that ``python -m
sharedos.bridge`` needs nothing above the bridge layer; ``sharedos.cli``
mounts this same command.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command("bridge")
@click.option(
    "--stdio",
    "stdio",
    is_flag=True,
    help="Serve MCP on stdin/stdout (the only mode a harness launches).",
)
@click.option(
    "--turn",
    "turn_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The private turn file (0600) the host prepared for this turn.",
)
def bridge(stdio: bool, turn_path: Path) -> None:
    """Serve one turn's permission-filtered catalogue over MCP (stdio).

    Everything that affects authorization comes from the turn file the host
    wrote; the harness supplies only its path. HTTP bridges are opened by the
    host in-process (``sharedos.bridge.open_turn``), never from the command line.
    Exit codes: 0 the client left, 3 the turn closed (or had closed before the
    launch), 2 the turn file or its policy could not be used (one line on stderr).
    """
    if not stdio:
        raise click.UsageError(
            "only --stdio is served from the command line; HTTP turns are opened by the host"
        )
    from sharedos.bridge.stdio import main_stdio

    raise SystemExit(main_stdio(turn_path))
