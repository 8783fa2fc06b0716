"""``sharedos upstream``: list, pin, diff and approve the brokered upstreams of a host file.

Exit codes (all subcommands): 0 ok; 1 the configuration, the pin file or an
upstream could not be used (one line each on stderr); 3 ``diff``/``status``
found tools held back (changed or new) or removed.

Credential values are never printed: only the names of the host environment
variables they are read from. The host file is the positional CONFIG or
``--host-config FILE`` (as for ``sharedos run``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from sharedos.cli.hostfile import host_file_option, required_host_file

EXIT_ERROR = 1
EXIT_DRIFT = 3


def _load(config_path: Path) -> tuple[Any, Path]:
    from sharedos.harness.hostconfig import HostConfigError, load_host_config
    from sharedos.upstream.pins import pin_path_for

    try:
        config = load_host_config(config_path)
    except HostConfigError as exc:
        for problem in exc.problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(EXIT_ERROR)
    if not config.upstream:
        click.echo(f"error: {config_path}: no [upstream.<id>] table: nothing to broker", err=True)
        sys.exit(EXIT_ERROR)
    return config, pin_path_for(config_path)


def _pins(path: Path) -> Any:
    from sharedos.upstream.pins import PinError, load_pins

    try:
        return load_pins(path)
    except PinError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)


def _selected(config: Any, only: tuple[str, ...]) -> dict[str, Any]:
    ups = dict(config.upstream)
    unknown = [u for u in only if u not in ups]
    if unknown:
        known = ", ".join(sorted(ups))
        click.echo(f"error: no upstream {', '.join(unknown)} (configured: {known})", err=True)
        sys.exit(EXIT_ERROR)
    return {k: v for k, v in ups.items() if not only or k in only}


def _list(upstreams: dict[str, Any], pins: Any) -> dict[str, Any]:
    import anyio

    from sharedos.upstream.broker import UpstreamBroker

    async def run() -> dict[str, Any]:
        async with UpstreamBroker(upstreams, pins=pins) as broker:
            return await broker.list_all()

    result: dict[str, Any] = anyio.run(run)
    return result


upstream_opt = click.option(
    "--upstream",
    "only",
    multiple=True,
    metavar="ID",
    help="Only this upstream (repeatable; default: all).",
)


@click.group()
def upstream() -> None:
    """Brokered upstream MCP servers: list their tools, pin them, review drift, approve it."""


@upstream.command("status")
@host_file_option
@upstream_opt
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def status(
    config_path: Path | None, host_config_option: Path | None, only: tuple[str, ...], as_json: bool
) -> None:
    """Connect to every upstream and say what a turn would publish from it, and why not more."""
    from sharedos.context import AccessContext
    from sharedos.upstream.broker import UpstreamBroker

    config, pin_path = _load(required_host_file(config_path, host_config_option))
    pins = _pins(pin_path)
    ups = _selected(config, only)
    import anyio

    async def run() -> Any:
        async with UpstreamBroker(ups, pins=pins) as broker:
            return await broker.prepare(AccessContext(principal="sharedos-upstream-status"))

    state = anyio.run(run)
    if as_json:
        click.echo(json.dumps(state.as_dict(), indent=2, sort_keys=True))
    else:
        click.echo(f"pin file: {pin_path}{'' if pin_path.exists() else ' (none yet)'}")
        for line in state.report():
            click.echo(line)
    if any(s.state == "unavailable" for s in state.statuses):
        sys.exit(EXIT_ERROR)
    if any(s.drift for s in state.statuses):
        sys.exit(EXIT_DRIFT)


@upstream.command("pin")
@host_file_option
@upstream_opt
def pin(config_path: Path | None, host_config_option: Path | None, only: tuple[str, ...]) -> None:
    """Record every listed tool's full definition in the pin file next to CONFIG.

    Replaces the pins of the upstreams listed; an upstream that cannot be
    reached keeps its old pins (and the command exits 1).
    """
    _repin(required_host_file(config_path, host_config_option), only, tools=(), verb="pinned")


@upstream.command("approve")
@host_file_option
@upstream_opt
@click.option(
    "--tool",
    "tools",
    multiple=True,
    metavar="NAME",
    help="Approve only this published tool (repeatable; default: everything held back).",
)
def approve(
    config_path: Path | None,
    host_config_option: Path | None,
    only: tuple[str, ...],
    tools: tuple[str, ...],
) -> None:
    """Re-pin what the upstreams list now: changed and new tools are published from the next turn."""
    config = required_host_file(config_path, host_config_option)
    _repin(config, only, tools=tools, verb="approved")


def _repin(config_path: Path, only: tuple[str, ...], *, tools: tuple[str, ...], verb: str) -> None:
    from sharedos.upstream.pins import (
        PinError,
        PinFile,
        UpstreamPins,
        compare,
        now,
        pin_upstream,
        save_pins,
        tool_pin,
    )

    config, pin_path = _load(config_path)
    pins = _pins(pin_path)
    ups = _selected(config, only)
    listings = _list(ups, pins)
    merged = dict(pins.upstreams)
    failed = False
    for uid, listing in listings.items():
        if listing.failure is not None:
            failed = True
            click.echo(
                f"error: upstream {uid}: {listing.failure}; its pins are unchanged", err=True
            )
            continue
        for refusal in listing.refused:
            click.echo(f"  refused (not pinnable): {refusal.describe()}")
        old = pins.for_upstream(uid)
        _, drift = compare(uid, old, listing.tools)
        if not tools:
            merged[uid] = pin_upstream(listing.server, listing.tools)
            for d in drift:
                click.echo(pinned_line(d, verb))
            click.echo(f"upstream {uid}: {len(listing.tools)} tool(s) {verb}")
            continue
        wanted = {t.name: (t, r) for t, r in listing.tools if t.name in tools}
        kept = dict(old.tools) if old is not None else {}
        for name, (tool, raw) in wanted.items():
            kept[name] = tool_pin(tool, raw)
            click.echo(f"  {verb}: {name}")
        merged[uid] = UpstreamPins(server=dict(listing.server), pinnedAt=now(), tools=kept)
    missing = [t for t in tools if not any(t in u.tools for u in merged.values())]
    if missing:
        failed = True
        click.echo(f"error: not listed by any upstream: {', '.join(missing)}", err=True)
    try:
        save_pins(PinFile(upstreams=merged), pin_path)
    except PinError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    click.echo(f"pin file: {pin_path}")
    if failed:
        sys.exit(EXIT_ERROR)


def pinned_line(drift: Any, verb: str) -> str:
    """What pinning (or approving) did to one drifted tool: it is no longer held back."""
    where = f"upstream {drift.upstream!r}"
    if drift.kind == "new":
        return f"  {verb}: {drift.tool} (new in {where}; published from the next turn)"
    if drift.kind == "removed":
        return f"  dropped: {drift.tool} (no longer listed by {where})"
    changed = ", ".join(drift.fields) or "definition"
    return f"  {verb}: {drift.tool} (changed: {changed}; published from the next turn)"


@upstream.command("diff")
@host_file_option
@upstream_opt
def diff(config_path: Path | None, host_config_option: Path | None, only: tuple[str, ...]) -> None:
    """Show, with a unified diff, every tool whose listing differs from its pin (exit 3 if any)."""
    from sharedos.upstream.pins import compare

    config, pin_path = _load(required_host_file(config_path, host_config_option))
    pins = _pins(pin_path)
    ups = _selected(config, only)
    listings = _list(ups, pins)
    drifted = failed = False
    for uid, listing in listings.items():
        if listing.failure is not None:
            failed = True
            click.echo(f"error: upstream {uid}: {listing.failure}", err=True)
            continue
        _, drift = compare(uid, pins.for_upstream(uid), listing.tools)
        if not drift:
            click.echo(f"upstream {uid}: {len(listing.tools)} tool(s), all as pinned")
        for d in drift:
            drifted = True
            click.echo(d.describe())
            if d.diff:
                click.echo(d.diff)
    if failed:
        sys.exit(EXIT_ERROR)
    if drifted:
        sys.exit(EXIT_DRIFT)
