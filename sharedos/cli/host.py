"""``sharedos host``: the operator's host configuration (how harness CLIs are launched)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sharedos.cli._help import with_short_help
from sharedos.cli.hostfile import host_file_option, required_host_file
from sharedos.terminal import unambiguous


@click.group()
def host() -> None:
    """Host configuration: which harness CLIs to launch, how, and with which declared model."""


@host.command("check")
@host_file_option
@click.option(
    "--versions", is_flag=True, help="Also run each CLI's --version (proves it can start)."
)
def check(config_path: Path | None, host_config_option: Path | None, versions: bool) -> None:
    """Validate CONFIG (or --host-config FILE); print file:line:col for every problem (exit 1),
    or a summary (exit 0).

    Environment values are never printed: only their names.
    """
    from sharedos import textfile
    from sharedos.harness.hostconfig import (
        HostConfigError,
        check_keys,
        check_locations,
        check_shadow,
        parse_host_config,
    )

    def say(line: str, *, err: bool = False) -> None:
        # spelled (``unambiguous``): a reviewer runs this on a host file someone else wrote
        # (a pull request), and a command "\u001b[2K\r/usr/bin/safe" in it must not print
        # as the safe command, nor a CLI's --version output rewrite the summary
        click.echo(unambiguous(line), err=err)

    file = required_host_file(config_path, host_config_option)
    try:
        try:
            text = textfile.read_text(file)  # once: a pipe reads only once
        except OSError as exc:
            raise HostConfigError(
                [f"{file}: cannot read host configuration: {exc.strerror or exc}"]
            ) from None
        config = parse_host_config(text, str(file), base_dir=file.resolve().parent)
    except HostConfigError as exc:
        for problem in exc.problems:
            say(f"error: {problem}", err=True)
        sys.exit(1)
    # what `sharedos run` would stop at, found before the summary's first line says "ok"
    key_problems = sorted(
        [*check_locations(config, text), *check_keys(config, text)],
        key=lambda problem: _position(problem, str(config.source)),
    )
    shadow_line, shadow_problem = check_shadow(config, text)
    launches: dict[str, tuple[str | None, str | None]] = {}
    if versions:
        from sharedos.harness.runtime import create_mcp_harness_runtime
        from sharedos.harness.tools import HarnessUnavailable

        for hid, cfg in config.harness.items():
            found: str | None = None
            try:
                runtime = create_mcp_harness_runtime(cfg, config)
                found = runtime.version()
                runtime.check_env()  # a ${VAR} unset here would fail its launch
                launches[hid] = (found, None)
            except (HarnessUnavailable, HostConfigError) as exc:
                launches[hid] = (found, str(exc))
    count = len(key_problems) + (shadow_problem is not None)
    count += sum(1 for _found, error in launches.values() if error is not None)
    verdict = "ok" if count == 0 else f"{count} problem{'s' if count != 1 else ''}"
    say(f"{file}: {verdict}, {len(config.harness)} harness(es), {len(config.upstream)} upstream(s)")
    for uid, up in config.upstream.items():
        say(f"  upstream {uid}: {up.summary()}")
        if up.per_person:
            say(f"    {up.identity_summary()}")
    if any(u.per_person for u in config.upstream.values()):
        import os

        say(f"  token store: {config.tokens.summary(os.environ, config.base_dir)}")
    say(f"  confinement: {_confinement_line(config)}")
    for problem in key_problems:
        say(f"error: {problem}", err=True)
    if shadow_line is not None:
        say(f"  {shadow_line}")
    if shadow_problem is not None:
        say(f"error: {shadow_problem}", err=True)
    for hid, cfg in config.harness.items():
        env_names = ", ".join(cfg.env.redacted()) or "none"
        ext = f", MCP client: {cfg.mcp_extension}" if cfg.mcp_extension else ", MCP client: native"
        say(
            f"  {hid}: kind {cfg.kind}, transport {cfg.transport}, provider {cfg.provider}, "
            f"declared model {cfg.declared_model!r}{ext}; env: {env_names}"
        )
        found, error = launches.get(hid, (None, None))
        if found is not None:
            say(f"    version: {found}")
        if error is not None:
            say(f"    error: {error}", err=True)
    if count:
        sys.exit(1)


def _position(problem: str, source: str) -> tuple[int, int]:
    """The ``line, col`` of a ``SOURCE:LINE:COL: …`` problem (file order); (0, 0) if none."""
    line, _, rest = problem.removeprefix(f"{source}:").partition(":")
    col = rest.partition(":")[0]
    return (int(line), int(col)) if line.isdigit() and col.isdigit() else (0, 0)


def _confinement_line(config: object) -> str:
    """The ``[confinement]`` settings and whether a sandbox can be set up here."""
    from sharedos.confine import ConfinementUnavailable, find_bubblewrap

    conf = getattr(config, "confinement", None)
    if conf is None:
        return "default"
    ports = ", ".join(map(str, conf.loopback_ports)) or "none"
    extra = ", ".join(conf.readonly) or "none"
    try:
        mech = find_bubblewrap()
        here = f"{mech.name} {mech.version} available"
    except ConfinementUnavailable as exc:
        here = f"NOT available here ({exc}): strict runs will refuse to start (exit 5)"
    return (
        f"network {conf.network}, relayed loopback ports: {ports}, extra read-only: {extra}; {here}"
    )


with_short_help(host)
