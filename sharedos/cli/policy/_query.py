"""``query``: under which resource patterns, and conditions, could this principal's calls be allowed?"""

from __future__ import annotations

import json
from typing import Any

import click

from sharedos.cli.policy._common import emit_json, guarded, read_json_option, shown
from sharedos.cli.policy._load import load_policy_set, trusted_key_option


def _attribute(item: str) -> tuple[list[str], Any]:
    """``--attr team=web`` -> (["team"], "web"); the value is JSON when it parses as JSON
    (``level=3``, ``orgs=["a","b"]``), else the text; a dotted key nests (``a.b=1``)."""
    key, sep, text = item.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--attr")
    from sharedos.policy.jsonvalues import loads

    try:
        value: Any = loads(text)
    except json.JSONDecodeError:
        value = text
    except ValueError as exc:  # NaN/Infinity, nested too deeply, an over-long integer
        raise click.BadParameter(
            f"{key}: not usable JSON ({str(exc).split(';')[0]})", param_hint="--attr"
        ) from None
    return key.split("."), value


def build_context(
    context_json: str,
    principal: str | None,
    tenant: str | None,
    roles: tuple[str, ...],
    attrs: tuple[str, ...],
) -> dict[str, Any]:
    """The context the query is for: ``--context``, then the options over it, then the
    kernel's defaults. A principal is required (the kernel always has one)."""
    from sharedos.policy.clock import ClockError
    from sharedos.policy.context import complete_context

    context = read_json_option(context_json, "--context")
    if not isinstance(context, dict):
        raise click.BadParameter(
            f"expected a JSON object, got {type(context).__name__}", param_hint="--context"
        )
    if principal is not None:
        context["principal"] = principal
    if tenant is not None:
        context["tenant"] = tenant
    if roles:
        context["roles"] = list(roles)
    if attrs:
        attributes = context.get("attributes")
        if not isinstance(attributes, dict):
            attributes = context["attributes"] = {}
        for item in attrs:
            path, value = _attribute(item)
            node = attributes
            for name in path[:-1]:
                child = node.get(name)
                if not isinstance(child, dict):
                    child = node[name] = {}
                node = child
            node[path[-1]] = value
    if "principal" not in context:
        raise click.UsageError("a principal is required: --principal NAME (or in --context)")
    try:
        return complete_context(context)
    except ClockError as exc:
        raise click.BadParameter(f"now: {exc}", param_hint="--context") from None


@click.command(
    "query", short_help="Under which patterns and conditions a principal's calls could be allowed."
)
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--principal", help="The principal (context.principal).")
@click.option("--tenant", help="The tenant (context.tenant; default: default).")
@click.option("--role", "roles", multiple=True, help="A role (context.roles; repeatable).")
@click.option(
    "--attr",
    "attrs",
    multiple=True,
    metavar="KEY=VALUE",
    help="An attribute (context.attributes.KEY; the value as JSON if it parses; repeatable).",
)
@click.option(
    "--context",
    "context_json",
    default="{}",
    show_default=True,
    help="A whole context: JSON object or @file (the options above override its keys).",
)
@click.option(
    "--action", "actions", multiple=True, help="Only tools that need this action (repeatable)."
)
@click.option("--tool", "tools", multiple=True, help="Only this tool (repeatable).")
@click.option(
    "--policy",
    "run",
    metavar="RUN",
    help="As a run under this toolpolicy: tools outside its managed set are hidden.",
)
@trusted_key_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
@click.option(
    "-v", "--verbose", is_flag=True, help="Also list the permits that cannot apply, and why."
)
@guarded
def query_cmd(
    paths: tuple[str, ...],
    principal: str | None,
    tenant: str | None,
    roles: tuple[str, ...],
    attrs: tuple[str, ...],
    context_json: str,
    actions: tuple[str, ...],
    tools: tuple[str, ...],
    run: str | None,
    trusted_keys: tuple[str, ...],
    fmt: str,
    verbose: bool,
) -> None:
    """Print the resource patterns under which this principal's calls could be allowed.

    \b
    For each tool (grouped when tools share namespace, action and resource
    shape): every permit that could allow some call, its pattern as
    instantiated for this context, its residual condition on the arguments
    and resource, and the forbids that carve parts out of it. This is the
    partial evaluation that builds a turn's catalogue. Exit 0.
    """
    from sharedos.policy.analysis.query import query

    context = build_context(context_json, principal, tenant, roles, attrs)
    policy = load_policy_set(paths, trusted_keys)
    if run is not None and run not in policy.tool_policies:
        known = ", ".join(sorted(policy.tool_policies)) or "none"
        raise click.BadParameter(
            f"no toolpolicy {run!r} is compiled (declared: {known})", param_hint="--policy"
        )
    known_actions = {req.action for req in policy.requirements.values()}
    for action in actions:
        if action not in known_actions:
            raise click.BadParameter(
                f"no requirement needs action {action!r} (known: {', '.join(sorted(known_actions))})",
                param_hint="--action",
            )
    result = query(policy, context, actions=actions, tools=tools, run_policy=run)
    if fmt == "json":
        emit_json(result.to_dict())
    else:
        click.echo(shown(result.render(verbose=verbose)))
