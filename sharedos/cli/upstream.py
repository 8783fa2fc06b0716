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

from sharedos.cli._help import with_short_help
from sharedos.cli._params import Seconds
from sharedos.cli.hostfile import host_file_option, required_host_config, required_host_file
from sharedos.terminal import printable, unambiguous

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
        click.echo(
            unambiguous(f"error: {config_path}: no [upstream.<id>] table: nothing to broker"),
            err=True,
        )
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


def _broker(config: Any, upstreams: dict[str, Any], pins: Any) -> Any:
    """A broker for ``upstreams`` with the host file's token store (opened when needed)."""
    import os

    from sharedos.redaction import Redactor
    from sharedos.upstream.broker import UpstreamBroker
    from sharedos.upstream.tokenstore import store_opener

    broker = UpstreamBroker(
        upstreams, pins=pins, tokens=store_opener(config.tokens, os.environ, config.base_dir)
    )
    # the host's secrets, as ``sharedos run`` has them: a tool definition holding one is
    # held back (never pinned, never printed), an upstream's stderr is scrubbed of them
    broker.host_secrets = Redactor(config.held_secrets(os.environ))
    return broker


def _context(principal: str | None, roles: tuple[str, ...], tenant: str) -> Any:
    """The principal whose credentials the upstreams are listed with (None: the operator's)."""
    if principal is None:
        return None
    from sharedos.context import AccessContext

    return AccessContext(principal=principal, roles=roles, tenant=tenant)


def _list(config: Any, upstreams: dict[str, Any], pins: Any, context: Any = None) -> dict[str, Any]:
    import anyio

    async def run() -> dict[str, Any]:
        async with _broker(config, upstreams, pins) as broker:
            result: dict[str, Any] = await broker.list_all(context)
            return result

    listed: dict[str, Any] = anyio.run(run)
    return listed


upstream_opt = click.option(
    "--upstream",
    "only",
    multiple=True,
    metavar="ID",
    help="Only this upstream (repeatable; default: all).",
)


def as_principal(func: Any) -> Any:
    """``--principal``, ``--role``, ``--tenant``: list with that principal's credentials."""
    func = click.option(
        "--tenant", default="default", show_default=True, help="The principal's tenant."
    )(func)
    func = click.option(
        "--role", "roles", multiple=True, metavar="ROLE", help="A role of the principal (groups)."
    )(func)
    return click.option(
        "--principal",
        default=None,
        metavar="NAME",
        help="List with this principal's credentials (per-person upstreams; default: the "
        "operator's shared ones).",
    )(func)


@click.group()
def upstream() -> None:
    """Brokered upstream MCP servers: list their tools, pin them, review drift, approve it."""


@upstream.command("status")
@host_file_option
@upstream_opt
@as_principal
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def status(
    config_path: Path | None,
    host_config_option: Path | None,
    only: tuple[str, ...],
    principal: str | None,
    roles: tuple[str, ...],
    tenant: str,
    as_json: bool,
) -> None:
    """Connect to every upstream and say what a turn would publish from it, and why not more."""
    from sharedos.context import AccessContext

    config, pin_path = _load(required_host_file(config_path, host_config_option))
    pins = _pins(pin_path)
    ups = _selected(config, only)
    context = _context(principal, roles, tenant) or AccessContext(
        principal="sharedos-upstream-status"
    )
    import anyio

    async def run() -> Any:
        async with _broker(config, ups, pins) as broker:
            return await broker.prepare(context)

    state = anyio.run(run)
    if as_json:
        click.echo(json.dumps(state.as_dict(), indent=2, sort_keys=True))
    else:
        click.echo(unambiguous(f"pin file: {pin_path}{'' if pin_path.exists() else ' (none yet)'}"))
        for line in state.report():
            # an upstream's words (its server name, a refused tool's name): spelled out
            click.echo(unambiguous(line))
    if any(s.state in ("unavailable", "no-credential", "unauthorized") for s in state.statuses):
        sys.exit(EXIT_ERROR)
    if any(s.drift for s in state.statuses):
        sys.exit(EXIT_DRIFT)


@upstream.command("pin")
@host_file_option
@upstream_opt
@as_principal
def pin(
    config_path: Path | None,
    host_config_option: Path | None,
    only: tuple[str, ...],
    principal: str | None,
    roles: tuple[str, ...],
    tenant: str,
) -> None:
    """Record every listed tool's full definition in the pin file next to CONFIG.

    Replaces the pins of the upstreams listed; an upstream that cannot be
    reached keeps its old pins (and the command exits 1). A per-person upstream is
    listed with ``--principal``'s credentials.
    """
    _repin(
        required_host_file(config_path, host_config_option),
        only,
        tools=(),
        verb="pinned",
        context=_context(principal, roles, tenant),
    )


@upstream.command("approve")
@host_file_option
@upstream_opt
@as_principal
@click.option(
    "--tool",
    "tools",
    multiple=True,
    metavar="NAME",
    help="Approve only this published tool (repeatable; default: everything held back).",
)
@click.option(
    "--expect",
    metavar="DIGEST",
    default=None,
    help="Approve only if the upstreams still list what `upstream diff` showed "
    "(the digest it printed); otherwise change nothing and exit 1.",
)
def approve(
    config_path: Path | None,
    host_config_option: Path | None,
    only: tuple[str, ...],
    principal: str | None,
    roles: tuple[str, ...],
    tenant: str,
    tools: tuple[str, ...],
    expect: str | None,
) -> None:
    """Re-pin what the upstreams list now: changed and new tools are published from the next turn.

    \b
    An upstream may change between `upstream diff` and `approve`: with
    --expect DIGEST (the listing digest `diff` printed) nothing is approved
    unless the upstreams still list exactly what was reviewed."""
    config = required_host_file(config_path, host_config_option)
    _repin(
        config,
        only,
        tools=tools,
        verb="approved",
        context=_context(principal, roles, tenant),
        expect=expect,
    )


def _repin(
    config_path: Path,
    only: tuple[str, ...],
    *,
    tools: tuple[str, ...],
    verb: str,
    context: Any = None,
    expect: str | None = None,
) -> None:
    from sharedos.upstream.pins import (
        PinError,
        PinFile,
        ToolPin,
        UpstreamPins,
        compare,
        listing_digest,
        now,
        pin_upstream,
        save_pins,
        tool_pin,
        updating,
    )

    config, pin_path = _load(config_path)
    pins = _pins(pin_path)
    ups = _selected(config, only)
    listings = _list(config, ups, pins, context)
    if expect is not None:
        failures = [uid for uid, listing in listings.items() if listing.failure is not None]
        digest = listing_digest({u: ls.tools for u, ls in listings.items() if u not in failures})
        if failures or expect.strip() != digest:
            why = (
                f"upstream {', '.join(failures)} could not be listed"
                if failures
                else f"they list {digest}, not the {expect.strip()} that was reviewed"
            )
            click.echo(
                unambiguous(
                    f"error: the upstreams do not list what `upstream diff` showed ({why}); "
                    "nothing was approved: run `sharedos upstream diff` again"
                ),
                err=True,
            )
            sys.exit(EXIT_ERROR)
    whole: dict[str, UpstreamPins] = {}  # upstreams pinned as listed now
    some: dict[str, tuple[dict[str, Any], dict[str, ToolPin]]] = {}  # (server, tools) of --tool
    failed = False
    for uid, listing in listings.items():
        if listing.failure is not None:
            failed = True
            click.echo(
                unambiguous(f"error: upstream {uid}: {listing.failure}; its pins are unchanged"),
                err=True,
            )
            continue
        for refusal in listing.refused:
            click.echo(unambiguous(f"  refused (not pinnable): {refusal.describe()}"))
        old = pins.for_upstream(uid)
        _, drift = compare(uid, old, listing.tools)
        if not tools:
            whole[uid] = pin_upstream(listing.server, listing.tools)
            for d in drift:
                click.echo(pinned_line(d, verb))
            click.echo(f"upstream {uid}: {len(listing.tools)} tool(s) {verb}")
            continue
        wanted = {t.name: (t, r) for t, r in listing.tools if t.name in tools}
        some[uid] = (dict(listing.server), {})
        for name, (tool, raw) in wanted.items():
            some[uid][1][name] = tool_pin(tool, raw)
            click.echo(f"  {verb}: {name}")
    try:
        # merged into the file as it is now: another pin/approve may have written it
        # while these upstreams were listed
        with updating(pin_path) as current:
            merged = dict(current.upstreams)
            merged.update(whole)
            for uid, (server, chosen) in some.items():
                earlier = current.for_upstream(uid)
                kept = {**(earlier.tools if earlier is not None else {}), **chosen}
                merged[uid] = UpstreamPins(server=server, pinnedAt=now(), tools=kept)
            missing = [t for t in tools if not any(t in u.tools for u in merged.values())]
            if missing:
                failed = True
                click.echo(f"error: not listed by any upstream: {', '.join(missing)}", err=True)
            save_pins(PinFile(upstreams=merged), pin_path)
    except PinError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    click.echo(unambiguous(f"pin file: {pin_path}"))
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


def drift_lines(drift: Any) -> list[str]:
    """What ``sharedos upstream diff`` shows of one drifted tool: its line and its diff,
    each line spelled out (``unambiguous``). The operator approves from it, and the
    upstream wrote it: a C1 control, a bidi override or DEL in a description would
    conceal, reorder or rewrite the diff on the terminal."""
    lines = [drift.describe()]
    if drift.diff:
        lines += drift.diff.split("\n")
    return [unambiguous(line) for line in lines]


@upstream.command("diff")
@host_file_option
@upstream_opt
@as_principal
def diff(
    config_path: Path | None,
    host_config_option: Path | None,
    only: tuple[str, ...],
    principal: str | None,
    roles: tuple[str, ...],
    tenant: str,
) -> None:
    """Show, with a unified diff, every tool whose listing differs from its pin (exit 3 if any),
    and the digest of the listing shown (for `upstream approve --expect`)."""
    from sharedos.upstream.pins import compare, listing_digest

    host_path = required_host_file(config_path, host_config_option)
    config, pin_path = _load(host_path)
    pins = _pins(pin_path)
    ups = _selected(config, only)
    listings = _list(config, ups, pins, _context(principal, roles, tenant))
    drifted = failed = False
    for uid, listing in listings.items():
        if listing.failure is not None:
            failed = True
            click.echo(unambiguous(f"error: upstream {uid}: {listing.failure}"), err=True)
            continue
        _, drift = compare(uid, pins.for_upstream(uid), listing.tools)
        if not drift:
            click.echo(f"upstream {uid}: {len(listing.tools)} tool(s), all as pinned")
        for d in drift:
            drifted = True
            click.echo("\n".join(drift_lines(d)))
    if failed:
        sys.exit(EXIT_ERROR)
    if drifted:
        digest = listing_digest({uid: listing.tools for uid, listing in listings.items()})
        again = _approve_command(host_path, only, principal, roles, tenant, digest)
        click.echo(unambiguous(f"listing {digest}: `{again}` approves exactly what is shown here"))
        sys.exit(EXIT_DRIFT)


def _approve_command(
    host_path: Path,
    only: tuple[str, ...],
    principal: str | None,
    roles: tuple[str, ...],
    tenant: str,
    digest: str,
) -> str:
    """The ``upstream approve --expect`` that approves what ``diff`` showed: the same host
    file, upstreams and principal, for the digest covers exactly the listing of those (an
    ``approve`` of other upstreams, or as someone else, lists something else and refuses)."""
    import shlex

    argv = ["sharedos", "upstream", "approve", "--host-config", str(host_path)]
    for uid in only:
        argv += ["--upstream", uid]
    if principal is not None:
        argv += ["--principal", principal]
        for role in roles:
            argv += ["--role", role]
        if tenant != "default":
            argv += ["--tenant", tenant]
    return shlex.join([*argv, "--expect", digest])


# -- per-person identity: login, logout, stored secrets, the store key ----------------------


def _one(config: Any, uid: str) -> Any:
    if uid not in config.upstream:
        known = ", ".join(sorted(config.upstream)) or "none"
        click.echo(f"error: no upstream {uid} (configured: {known})", err=True)
        sys.exit(EXIT_ERROR)
    return config.upstream[uid]


def _opener(config: Any) -> Any:
    import os

    from sharedos.upstream.tokenstore import TokenStoreError, open_store

    try:
        store = open_store(config.tokens, os.environ, config.base_dir)
    except TokenStoreError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    return lambda: store


@upstream.command("login")
@click.argument("upstream_id", metavar="ID")
@required_host_config
@click.option("--principal", required=True, metavar="NAME", help="Whose tokens these are.")
@click.option(
    "--tenant",
    default=None,
    metavar="TENANT",
    help="The principal's tenant (default: the upstream's tenant, the only one it serves).",
)
@click.option(
    "--scope", "scopes", multiple=True, metavar="SCOPE", help="Ask for this scope too (repeatable)."
)
@click.option(
    "--no-browser", is_flag=True, help="Print the sign-in address only (do not open a browser)."
)
@click.option(
    "--wait",
    "wait_s",
    type=Seconds(1, low_open=False),
    default=600.0,
    show_default=True,
    help="Seconds to wait for the browser to come back.",
)
def login(
    upstream_id: str,
    host_config: Path,
    principal: str,
    tenant: str | None,
    scopes: tuple[str, ...],
    no_browser: bool,
    wait_s: float,
) -> None:
    """Sign PRINCIPAL in to the OAuth upstream ID: the authorization-code flow with PKCE and a
    loopback redirect (127.0.0.1, an ephemeral port). The tokens are kept encrypted in the
    token store ([tokens]) for that principal and upstream, and refreshed by SharedOS."""
    import os

    import anyio

    from sharedos.upstream.oauth import OAuthError
    from sharedos.upstream.oauth_login import login as run_login

    config, _ = _load(host_config)
    up = _one(config, upstream_id)
    if up.oauth is None:
        click.echo(
            f"error: upstream {upstream_id} has no [upstream.{upstream_id}.oauth] table", err=True
        )
        sys.exit(EXIT_ERROR)
    # the upstream serves the per-person credentials of its own tenant only
    # (credentials.select): tokens kept under another tenant would never be used
    if tenant is not None and tenant != up.tenant:
        click.echo(
            f"error: upstream {upstream_id}'s per-person credentials are for tenant "
            f"{up.tenant!r}, not {tenant!r}: tokens of another tenant's {principal!r} would "
            "never be used",
            err=True,
        )
        sys.exit(EXIT_ERROR)
    opener = _opener(config)
    try:
        result = anyio.run(
            lambda: run_login(
                up,
                up.tenant,
                principal,
                opener,
                os.environ,
                out=sys.stderr,
                open_browser=not no_browser,
                scopes=scopes,
                wait_s=wait_s,
            )
        )
    except OAuthError as exc:
        # the authorization server's words (its redirect's error, its answers): escaped
        click.echo(printable(f"error: {exc}"), err=True)
        sys.exit(EXIT_ERROR)
    lifetime = f"{result.expires_in:g} s" if result.expires_in else "no stated lifetime"
    click.echo(
        printable(
            f"signed in: {principal} at upstream {upstream_id} (scope {result.scope or '-'}; "
            f"access token valid {lifetime}; "
            f"{'refreshable' if result.refreshable else 'not refreshable'}); "
            f"the upstream lists {result.tools} tool(s) to {principal}"
        )
    )


@upstream.command("logout")
@click.argument("upstream_id", metavar="ID")
@required_host_config
@click.option("--principal", required=True, metavar="NAME", help="Whose tokens to remove.")
@click.option(
    "--tenant",
    default=None,
    metavar="TENANT",
    help="The principal's tenant (default: the upstream's tenant).",
)
def logout(upstream_id: str, host_config: Path, principal: str, tenant: str | None) -> None:
    """Revoke PRINCIPAL's tokens for upstream ID (where its server offers revocation) and
    remove them from the token store."""
    import os

    import anyio

    from sharedos.upstream.oauth_login import logout as run_logout

    config, _ = _load(host_config)
    up = _one(config, upstream_id)
    opener = _opener(config)
    who = up.tenant if tenant is None else tenant
    found, said = anyio.run(lambda: run_logout(up, who, principal, opener, os.environ))
    click.echo(
        printable(
            f"{'logged out' if found else 'nothing to do'}: {principal} at upstream "
            f"{upstream_id}: {said}"
        )
    )


@upstream.group("secret")
def secret() -> None:
    """Named secrets of the encrypted token store (credentials written { store = "NAME" })."""


@secret.command("set")
@click.argument("upstream_id", metavar="ID")
@click.argument("name", metavar="NAME")
@required_host_config
def secret_set(upstream_id: str, name: str, host_config: Path) -> None:
    """Keep the value read from standard input (never from the command line) as the secret
    NAME of upstream ID, encrypted."""
    import re

    from sharedos.upstream.secrets import MIN_CREDENTIAL_LENGTH

    config, _ = _load(host_config)
    _one(config, upstream_id)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", name):
        click.echo("error: a secret is named by 1-64 letters, digits, '_' and '-'", err=True)
        sys.exit(EXIT_ERROR)
    value = sys.stdin.read().removesuffix("\n").removesuffix("\r")
    if len(value) < MIN_CREDENTIAL_LENGTH:
        click.echo(
            "error: the value on standard input is empty or shorter than "
            f"{MIN_CREDENTIAL_LENGTH} characters",
            err=True,
        )
        sys.exit(EXIT_ERROR)
    from sharedos.upstream.tokenstore import TokenStoreError

    try:
        path = _opener(config)().put_secret(upstream_id, name, value)
    except (TokenStoreError, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        click.echo(f"error: the secret was not stored: {why}", err=True)
        sys.exit(EXIT_ERROR)
    click.echo(f"stored: secret {name} of upstream {upstream_id} ({path}, encrypted)")


@secret.command("remove")
@click.argument("upstream_id", metavar="ID")
@click.argument("name", metavar="NAME")
@required_host_config
def secret_remove(upstream_id: str, name: str, host_config: Path) -> None:
    """Remove the stored secret NAME of upstream ID."""
    config, _ = _load(host_config)
    _one(config, upstream_id)
    removed = _opener(config)().delete_secret(upstream_id, name)
    click.echo(f"{'removed' if removed else 'not stored'}: secret {name} of upstream {upstream_id}")


@upstream.command("keygen")
@click.option(
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Where to write the key (created 0600; never inside the token store).",
)
def keygen(output: Path) -> None:
    """Write a new token store key (32 random bytes, base64url) to FILE, readable by its owner
    only; name it in the host file as [tokens] key = { file = "FILE" } (or put its text in
    the variable [tokens] key = { env = ... } names)."""
    from sharedos.atomicfile import create_whole
    from sharedos.upstream.tokenstore import generate_key

    try:
        # whole or not at all: a full disk or a kill never leaves an empty or cut key, which
        # no rerun may replace (tokens sealed with it must not outlive it: fsynced)
        create_whole(output, generate_key() + "\n", mode=0o600)
    except FileExistsError:
        click.echo(
            f"error: {output} exists; a key is never overwritten (tokens sealed with it would be lost)",
            err=True,
        )
        sys.exit(EXIT_ERROR)
    except OSError as exc:
        click.echo(
            f"error: cannot write {output}: {exc.strerror or exc}; nothing was written there",
            err=True,
        )
        sys.exit(EXIT_ERROR)
    click.echo(f"wrote a token store key to {output} (0600)")


with_short_help(upstream)
