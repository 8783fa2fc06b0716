"""``sharedos run``: one agent turn, for one user, under one run policy -- the operator's main job.

::

    sharedos run --host-config host.toml --harness claude-code \\
        --principal alice --role dev --policy brokered-dev "review the last commit"

1. resolves the trusted context from the flags (or ``--context FILE``), never
   from the harness;
2. compiles the rules and run policies, registers the built-in files tools
   (``--sandbox``) and the host file's brokered upstreams;
3. opens the turn: lists every upstream (down ones are reported and left
   out), computes the catalogue, opens the turn bridge;
4. launches the harness through the MCP harness runtime (over the transport
   the host file names: HTTP, or stdio through a bridge process that relays
   every call to this process), streams its output (each stdout/stderr line on
   stderr as it arrives, prefixed with the harness id and scrubbed of the
   host's secrets; ``--no-stream`` keeps it quiet), prints its answer on
   stdout (exact into a pipe, spelled on a terminal), closes the turn (the
   port is released);
5. prints an evidence summary: attempts, allowed / denied / failed, by reason,
   and the name the model used for each (``wire.alias``).

``--json`` prints exactly one JSON document on stdout (the answer is in it);
everything else goes to stderr. ``--dry-run`` prints the catalogue this user
would get, and why each tool is in or out, without launching anything.

The harness's private run directory (its transcript and HOME) is made under
``--workdir``, or in a fresh 0700 ``sharedos-run-*`` temporary directory that
is removed after the run unless ``--keep``; either way its path is printed.

Under a strict run policy the harness runs confined (docs/confinement.md):
in a bubblewrap sandbox that shows none of the managed roots (the
``--sandbox`` root, the evidence store, the rules, the host file and its keys,
every upstream's roots) and reaches only the bridge and its model endpoint.
A strict run that cannot be confined does not start (exit 5) unless
``--unconfined`` is given, which is then stamped on the turn's identity and
its evidence. Under an open run policy the harness is not confined, and the
run says so. Whatever kills ``sharedos run`` (``SIGKILL`` included), no
process of the run outlives it.

Exit codes:
  0  the turn ran and the harness exited 0 (or --dry-run printed the catalogue)
  1  the host configuration, policy, context or plan could not be used (nothing ran)
  2  command-line usage error
  3  the harness ran but failed: non-zero exit, timed out, or its turn failed by
     its own account although it exited 0 (Pi, when its model call failed: a note
     says why; the summary is printed), or its model endpoint refuses connections
     (said before it starts)
  4  the harness could not be started (not installed, not executable); checked
     before the turn and the upstreams are opened. Also when its files for the turn
     cannot be written (a full disk under the run directory), or its command line is too
     long for the system (a prompt over 128 KiB: E2BIG): the turn then opened and
     was sealed with no call, and nothing of it is left in the run directory
  5  the run policy is strict and the harness cannot be confined (no bubblewrap, not
     Linux, or a managed root would be visible in its sandbox); nothing ran
  6  standard output could not be written (``> /dev/full``, an I/O error): the turn
     may have run; its evidence holds it (every ``sharedos`` command exits 6 so)
  128+N  stopped by signal N (SIGINT, Ctrl-C: 130; SIGTERM: 143, SIGHUP: 129): the turn
     was closed in order (calls in flight recorded ``cancelled``, the turn sealed, the harness's
     process tree ended, the temporary run directory removed); a signal the run was
     started with ignored (``nohup``: SIGHUP; ``cmd &`` in a script: SIGINT) stays
     ignored. A second stop signal while the run closes (Ctrl-C twice) ends it at once
     by that signal, saying so: the turn may be left unsealed, the run directory on disk
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from sharedos import textfile
from sharedos.cli._help import with_short_help
from sharedos.cli._params import Seconds
from sharedos.confine.leftovers import Claim, claim, discard, sweep
from sharedos.redaction import Redactor
from sharedos.terminal import is_terminal, printable, printable_text, unambiguous

EXIT_OK = 0
EXIT_CONFIG = 1
EXIT_HARNESS_FAILED = 3
EXIT_HARNESS_UNAVAILABLE = 4
EXIT_CANNOT_CONFINE = 5


def _fail(message: str, code: int = EXIT_CONFIG) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _context(
    principal: str | None,
    tenant: str | None,
    roles: Sequence[str],
    attrs: Sequence[str],
    context_file: Path | None,
) -> Any:
    from pydantic import ValidationError

    from sharedos.context import AccessContext

    data: dict[str, Any] = {}
    if context_file is not None:
        try:
            data = json.loads(textfile.read_text(context_file))
        except (OSError, ValueError) as exc:
            _fail(f"{context_file}: cannot read the context file: {exc}")
        if not isinstance(data, dict):
            _fail(f"{context_file}: a context file is a JSON object (principal, tenant, roles ...)")
        data.pop("turn_id", None)  # a turn id is minted per turn, never taken from a file
    if principal is not None:
        data["principal"] = principal
    if tenant is not None:  # given on the command line, "default" too: it overrides the file
        data["tenant"] = tenant
    if roles:
        data["roles"] = list(roles)
    # as written, never coerced: tuple("admin") would be the roles a, d, m, i, n
    for key, kind, shape in (
        ("roles", list, "a list of role names"),
        ("attributes", dict, "an object"),
    ):
        if data.get(key) is None:
            data.pop(key, None)
        elif not isinstance(data[key], kind):
            _fail(f"{context_file}: {key} is {shape}, not {type(data[key]).__name__}")
    attributes = dict(data.get("attributes") or {})
    for item in attrs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--attr {item!r}: write KEY=VALUE")
        attributes[key] = value
    if attributes:
        data["attributes"] = attributes
    if "principal" not in data:
        _fail("who is asking? give --principal (or a --context file with a principal)")
    data["turn_id"] = f"run-{uuid.uuid4().hex}"
    try:
        return AccessContext.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "context"
        _fail(f"context {where}: {first['msg']}")
    raise AssertionError("unreachable")


def _plan(plan_file: Path | None) -> list[Any]:
    from sharedos.testing.scripted_model.plan import ScriptedAttempt

    if plan_file is None:
        return []
    try:
        items = json.loads(textfile.read_text(plan_file))
    except (OSError, ValueError) as exc:
        _fail(f"{plan_file}: cannot read the plan: {exc}")
    # the arguments as written, an object (or absent, or null): never coerced (dict([["path", "/x"]])
    # would make a call nobody wrote), never a traceback
    if not isinstance(items, list) or not all(
        isinstance(i, dict)
        and isinstance(i.get("tool"), str)
        and (i.get("arguments") is None or isinstance(i["arguments"], dict))
        for i in items
    ):
        _fail(f'{plan_file}: a plan is a JSON list of {{"tool": NAME, "arguments": {{...}}}}')
    return [
        ScriptedAttempt(key=f"plan-{n}", tool=i["tool"], arguments=dict(i.get("arguments") or {}))
        for n, i in enumerate(items, 1)
    ]


def catalog_entries(
    host: Any, context: Any, tool_policy: Any, upstreams: Any
) -> tuple[Any, list[dict[str, Any]]]:
    """The catalogue, and every tool this context could be offered: in or out, why, source."""
    kernel = host.kernel
    catalog = kernel.list_tools(context, tool_policy)
    policy = kernel.policy
    entries: list[dict[str, Any]] = []
    for tool in kernel.view(context).tools():
        source = tool.metadata.source if tool.metadata is not None else "?"
        listed = tool.name in catalog.names
        if listed:
            why = "managed by the run policy, and some permit can apply to this user"
        elif not tool_policy.is_managed(tool.name):
            why = f"not in run policy {tool_policy.name}'s managed set"
        elif tool.name not in policy.requirements:
            why = "no requirement governs it (not listed, not callable)"
        else:
            why = "no permit can apply to this user (or a forbid covers every case)"
        entries.append({"tool": tool.name, "in": listed, "why": why, "source": source})
    if upstreams is not None:
        for status in upstreams.statuses:
            for refusal in status.refused:
                entries.append(
                    {
                        "tool": f"{status.namespace}.{refusal.tool}",
                        "in": False,
                        "why": str(refusal.reason),
                        "source": f"upstream:{status.upstream}",
                        "upstreamReport": True,
                    }
                )
            for drift in status.drift:
                if drift.kind != "removed":
                    entries.append(
                        {
                            "tool": drift.tool,
                            "in": False,
                            "why": drift.describe(),
                            "source": f"upstream:{status.upstream}",
                            "upstreamReport": True,
                        }
                    )
            if status.state == "unavailable":
                entries.append(
                    {
                        "tool": f"{status.namespace}.*",
                        "in": False,
                        "why": f"upstream {status.upstream} is unavailable: {status.message}",
                        "source": f"upstream:{status.upstream}",
                        "upstreamReport": True,
                    }
                )
    return catalog, entries


def explain_catalog(host: Any, context: Any, tool_policy: Any, upstreams: Any) -> list[str]:
    """Every tool this context could be offered, in or out of the catalogue, and why.

    Each line spelled unambiguously (``sharedos.terminal.unambiguous``): a tool an upstream
    listed under a name with terminal escapes is refused, and shown, by that name."""
    catalog, entries = catalog_entries(host, context, tool_policy, upstreams)
    lines = [f"catalogue for {context.principal} under {tool_policy.name}: {len(catalog)} tool(s)"]
    lines.append(f"catalogHash {catalog.catalog_hash}")
    for e in entries:
        where = "" if e.get("upstreamReport") else f"  [{e['source']}]"
        lines.append(f"  {e['tool']:<36} {'in' if e['in'] else 'out'}: {e['why']}{where}")
    return [unambiguous(line) for line in lines]


def summary_lines(
    records: Sequence[Any], wires: Sequence[dict[str, Any] | None] | None = None
) -> list[str]:
    """The evidence summary printed after a turn: counts and one line per attempt (with the
    name the model used for it, when the harness's account says), each line spelled
    unambiguously, as ``sharedos evidence`` shows records: a tool name is recorded as the
    harness sent it, terminal escapes included."""
    by: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for r in records:
        outcome = str(r.outcome)
        by[outcome] = by.get(outcome, 0) + 1
        if r.reason is not None and outcome != "succeeded":
            key = f"{outcome}/{r.reason}"
            reasons[key] = reasons.get(key, 0) + 1
    allowed = by.get("succeeded", 0)
    head = (
        f"evidence: {len(records)} attempt(s): {allowed} allowed and succeeded, "
        f"{by.get('denied', 0)} denied, {by.get('failed', 0)} failed"
    )
    if by.get("cancelled"):
        head += f", {by['cancelled']} cancelled"
    lines = [head]
    if reasons:
        lines.append("  by reason: " + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())))
    for i, r in enumerate(records):
        where = f" {r.resource}" if r.resource else ""
        why = f" ({r.reason})" if r.reason and str(r.outcome) != "succeeded" else ""
        wire = wires[i] if wires is not None and i < len(wires) else None
        alias = f"; the model called it {wire['alias']}" if wire and wire.get("alias") else ""
        lines.append(f"  #{r.seq} {r.tool}{where}: {r.outcome}{why}{alias}")
    return [unambiguous(line) for line in lines]


@click.command()
@click.argument("prompt", required=False, default="")
@click.option(
    "--host-config",
    "host_config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Host configuration (harness launch settings and [upstream.ID] tables).",
)
@click.option("--harness", "harness_id", default="claude-code", show_default=True)
@click.option("--principal", help="Who the turn is for (the trusted context).")
@click.option(
    "--tenant",
    default=None,
    help="The principal's tenant (default: the --context file's, else 'default').",
)
@click.option("--role", "roles", multiple=True, help="A role of the principal (repeatable).")
@click.option("--attr", "attrs", multiple=True, metavar="KEY=VALUE", help="A context attribute.")
@click.option(
    "--context",
    "context_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A JSON file with principal, tenant, roles, attributes (flags override it).",
)
@click.option("--policy", "policy_name", required=True, help="The run policy (toolpolicy name).")
@click.option(
    "--rules",
    "rule_paths",
    multiple=True,
    type=click.Path(exists=True, path_type=Path),
    help="Rule/policy files or directories (default: the host configuration's [policy] "
    "bundle, else the shipped rules/ and policy/; refused when the host trusts only signed "
    "bundles).",
)
@click.option(
    "--sandbox",
    type=click.Path(file_okay=False, path_type=Path),
    help="Root of the built-in files tools (without it they are not offered).",
)
@click.option(
    "--evidence",
    "evidence_db",
    default=None,
    metavar="PATH|URL",
    help="The evidence store: a SQLite path or a postgresql:// URL "
    "(default: the host configuration's [evidence] url, else evidence.sqlite).",
)
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="For the offline scripted model: a JSON list of {tool, arguments} calls it makes.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=Seconds(high=3600),
    help="Harness deadline in seconds (more than 0, at most 3600; default: the host "
    "configuration's timeout_s).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the harness's private turn directory (transcript, its HOME) is made and kept "
    "(default: a fresh 0700 temporary directory, removed after the run unless --keep).",
)
@click.option(
    "--keep",
    is_flag=True,
    help="Keep the temporary run directory (its path is printed); with --workdir it is kept anyway.",
)
@click.option(
    "--stream/--no-stream",
    default=True,
    show_default=True,
    help="Print the harness's output lines on stderr as they arrive.",
)
@click.option(
    "--unconfined",
    is_flag=True,
    help="Run a strict run policy's harness without its OS sandbox (stamped on the turn's "
    "identity, evidence and every report as NOT CONFINED).",
)
@click.option("--dry-run", is_flag=True, help="Print the catalogue and why; launch nothing.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON document on stdout (the answer, attempts, catalogue or dry run); "
    "everything else goes to stderr.",
)
def run(
    prompt: str,
    host_config_path: Path | None,
    harness_id: str,
    principal: str | None,
    tenant: str | None,
    roles: tuple[str, ...],
    attrs: tuple[str, ...],
    context_file: Path | None,
    policy_name: str,
    rule_paths: tuple[Path, ...],
    sandbox: Path | None,
    evidence_db: str | None,
    plan_file: Path | None,
    timeout_s: float | None,
    workdir: Path | None,
    keep: bool,
    stream: bool,
    unconfined: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Run one agent turn for one user under one run policy, with built-in and brokered tools."""
    from sharedos.harness.hostconfig import HostConfigError, default_host_config, load_host_config
    from sharedos.policy import PolicyError, compile_paths
    from sharedos.resources import shipped_dir
    from sharedos.upstream.pins import PinError, load_pins, pin_path_for

    context = _context(principal, tenant, roles, attrs, context_file)
    try:
        host_config = (
            load_host_config(host_config_path) if host_config_path else default_host_config()
        )
    except HostConfigError as exc:
        for problem in exc.problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(EXIT_CONFIG)
    runtime = None
    if not dry_run:
        try:
            host_config.get(harness_id)
        except HostConfigError as exc:
            _fail(str(exc))
        runtime = _harness_runtime(harness_id, host_config)
    if rule_paths and host_config.policy.bundle:
        # the host file names where this host's policy comes from; --rules replacing it is
        # said, and refused where the file trusts only signed bundles ([policy] keys)
        if host_config.policy.keys:
            _fail(
                f"{host_config.source}: this host enforces only policy bundles signed by its "
                "[policy] keys; --rules would replace them with unsigned sources (use a host "
                "file without [policy] bundle to try local rules)"
            )
        click.echo(
            f"policy: --rules, not the host file's [policy] bundle ({host_config.source})",
            err=True,
        )
    try:
        if not rule_paths and host_config.policy.bundle:
            policy = _bundle_policy(host_config)  # a distributed bundle, verified
        else:
            policy = compile_paths(
                list(rule_paths) or [shipped_dir("rules"), shipped_dir("policy")]
            )
    except PolicyError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_CONFIG)
    tool_policy = policy.tool_policies.get(policy_name)
    if tool_policy is None:
        known = ", ".join(sorted(policy.tool_policies)) or "none"
        _fail(f"no run policy {policy_name!r} (defined: {known})")
    if not dry_run:
        why = confinement_check(tool_policy, unconfined)
        if why is not None:
            sys.exit(_cannot_confine(tool_policy.name, why))
    pins = None
    if host_config.upstream and host_config_path is not None:
        try:
            pins = load_pins(pin_path_for(host_config_path))
        except PinError as exc:
            _fail(str(exc))
    plan = _plan(plan_file)
    import anyio

    code = anyio.run(
        _stopped_by_signal,
        dict(
            host_config=host_config,
            harness_id=harness_id,
            context=context,
            policy=policy,
            tool_policy=tool_policy,
            sandbox=sandbox,
            evidence_db=evidence_db,
            pins=pins,
            plan=plan,
            prompt=prompt,
            timeout_s=timeout_s,
            workdir=workdir,
            keep=keep,
            stream=stream,
            unconfined=unconfined,
            rule_paths=[p.resolve() for p in rule_paths]
            or [shipped_dir("rules"), shipped_dir("policy")],
            dry_run=dry_run,
            as_json=as_json,
            runtime=runtime,
        ),
    )
    sys.exit(code)


def _harness_runtime(harness_id: str, host_config: Any) -> Any:
    """The harness's runtime, its CLI proven to start (``--version``) and every ``${VAR}`` of
    its env set, before anything opens."""
    from sharedos.harness.hostconfig import HostConfigError
    from sharedos.harness.runtime import create_mcp_harness_runtime
    from sharedos.harness.tools import HarnessUnavailable

    runtime = create_mcp_harness_runtime(harness_id, host_config)
    try:
        runtime.version()
        runtime.check_env()
    except HarnessUnavailable as exc:
        # before the turn, the evidence store and the upstreams are opened
        _fail(str(exc), EXIT_HARNESS_UNAVAILABLE)
    except HostConfigError as exc:  # e.g. a ${VAR} in its command or its env that is unset
        _fail(str(exc))
    return runtime


def _host_key_signs_bundles(host_config: Any, trusted: list[Any]) -> str | None:
    """``hostconfig.host_key_signs_bundles`` for the host's ``[evidence] sign_key`` (None
    when it has none, or one that cannot be read: opening the store says why)."""
    from sharedos.evidence.chain import Signer
    from sharedos.harness.hostconfig import HostConfigError, host_key_signs_bundles

    if not host_config.evidence.sign_key or not trusted:
        return None
    try:
        path = host_config.resolve_file(host_config.evidence.sign_key)
        signer = Signer.from_pem(textfile.read_private(path))
    except (OSError, ValueError, HostConfigError):
        return None
    return host_key_signs_bundles(signer.key_id, trusted)


def _bundle_policy(host_config: Any) -> Any:
    """The policy of the host's ``[policy] bundle``, verified (exit 1 when none can be used)."""
    from sharedos.bundles import BundleManager, BundleVerifier, open_source
    from sharedos.bundles.source import SourceError
    from sharedos.harness.hostconfig import HostConfigError

    cfg = host_config.policy
    try:
        verifier = BundleVerifier(host_config.resolve_file(k) for k in cfg.keys)
    except (OSError, ValueError, HostConfigError) as exc:
        click.echo(unambiguous(f"error: [policy] keys: {exc}"), err=True)
        sys.exit(EXIT_CONFIG)
    problem = _host_key_signs_bundles(host_config, verifier.keys)
    if problem is not None:
        click.echo(unambiguous(f"error: [evidence] sign_key {problem}"), err=True)
        sys.exit(EXIT_CONFIG)
    try:
        location = host_config.bundle_location()
        # the last release this host enforced, so a restart cannot be rolled back
        state = host_config.bundle_state()
    except HostConfigError as exc:
        click.echo(unambiguous(f"error: {exc}"), err=True)
        sys.exit(EXIT_CONFIG)
    try:
        source = open_source(location, host_config.bundle_hidden())
    except SourceError as exc:  # a URL no request may be made of (its message masks it)
        click.echo(unambiguous(f"error: [policy] bundle: {exc}"), err=True)
        sys.exit(EXIT_CONFIG)
    manager = BundleManager(source, verifier, state=state)
    result = manager.poll()
    if result.current is None:
        # the source as every message shows it (a presigned URL's signature never shown)
        shown = manager.source.origin
        # what the bundle's server or its document said: spelled, as everything else shown
        click.echo(
            unambiguous(f"error: no usable policy bundle from {shown}: {result.detail}"), err=True
        )
        sys.exit(EXIT_CONFIG)
    kept = (  # the source failed: the last release this host enforced, from its copy
        f", the last release this host enforced (its source failed: {result.detail})"
        if result.status == "kept"
        else ""
    )
    click.echo(unambiguous(f"policy: bundle {result.current.describe()}{kept}"), err=True)
    from sharedos.bundles.verify import BundledPolicy

    # every record of the run says its policy came from the copy, not from the source
    return BundledPolicy(
        result.current.policy, result.current.revision, kept=result.status == "kept"
    )


def _shadow(host_config: Any, enforced: Any = None) -> Any:
    """The decider of the host's ``[policy] shadow`` beside the ``enforced`` policy (None
    without one, or when it cannot be loaded: the host says why on stderr and enforces
    exactly as without it)."""
    location = host_config.policy.shadow
    if not location:
        return None
    from sharedos.bundles.shadow import load_shadow
    from sharedos.harness.hostconfig import HostConfigError
    from sharedos.kernel.shadow import ShadowDecider

    try:
        loaded = load_shadow(*host_config.shadow_source())
    except HostConfigError as exc:
        click.echo(
            unambiguous(f"shadow policy not loaded: {exc}; enforcement is unchanged"), err=True
        )
        return None
    click.echo(unambiguous(loaded.line()), err=True)
    if loaded.shadow is None:
        return None
    try:
        return ShadowDecider(
            loaded.shadow.policy, enforced=enforced, time_zone=host_config.policy.time_zone
        )
    except Exception as exc:  # a shadow never stops the host
        click.echo(unambiguous(f"shadow policy not used: {exc}"), err=True)
        return None


async def _run_turn(opts: dict[str, Any]) -> int:
    from sharedos.catalog import ToolRegistry
    from sharedos.kernel import Kernel, RuntimeHost
    from sharedos.toolpolicy import RunMode
    from sharedos.upstream.broker import UpstreamBroker
    from sharedos.upstream.sandbox import UpstreamConfinementPolicy

    host_config = opts["host_config"]
    context = opts["context"]
    policy = opts["policy"]
    tool_policy = opts["tool_policy"]
    registry = ToolRegistry()
    if opts["sandbox"] is not None:
        from sharedos.confine.door import private_dirs
        from sharedos.confine.programs import import_dirs, sharedos_installation
        from sharedos.tools import register_files_tools
        from sharedos.tools.files import root_holds_code, root_holds_runs, root_holds_state

        sandbox = Path(opts["sandbox"])
        if not sandbox.is_dir():
            _fail(f"--sandbox {sandbox}: not a directory")
        problem = root_holds_state(sandbox, state_paths(opts, host_config))
        if problem is None:
            runs = [*private_dirs(), *([opts["workdir"]] if opts.get("workdir") else [])]
            problem = root_holds_runs(sandbox, runs)
        if problem is None:
            code = (
                *host_programs(opts.get("runtime"), host_config),
                *import_dirs(),
                *host_imports(host_config),
            )
            problem = root_holds_code(
                sandbox,
                code,
                trees=sharedos_installation(),
                inside=host_trees(opts.get("runtime"), host_config),
            )
        if problem is not None:
            _fail(f"--sandbox {problem}")
        register_files_tools(registry, sandbox)
    upstreams = host_config.upstream
    # the host's handler deadline must outlast every upstream's own call timeout and the
    # ping after it, so a slow upstream is reported as upstream_timeout (and cancelled
    # upstream), not timeout, and one hung as a whole is found out (its session reopened)
    from sharedos.upstream.connection import PING_S

    longest = max((u.timeouts.call_s + PING_S for u in upstreams.values()), default=25.0)
    from sharedos.evidence.store import EvidenceStoreError
    from sharedos.evidence.url import open_configured_store
    from sharedos.harness.hostconfig import HostConfigError

    evidence = host_config.evidence
    try:
        store = open_configured_store(
            opts["evidence_db"] or host_config.evidence_location() or "evidence.sqlite",
            synchronous=evidence.synchronous,
            sign_key=host_config.resolve_file(evidence.sign_key) if evidence.sign_key else None,
            otlp_endpoint=evidence.otlp_endpoint,
            checkpoint_interval_s=evidence.checkpoint_interval_s,
        )
    except (EvidenceStoreError, HostConfigError) as exc:  # HostConfigError: an unset ${VAR}
        _fail(str(exc))
    try:
        kernel = Kernel(policy, registry, time_zone=opts["host_config"].policy.time_zone)
        shadow = _shadow(host_config, policy)
        confinement = UpstreamConfinementPolicy(
            required=tool_policy.mode is RunMode.STRICT and not opts["unconfined"],
            managed=(*state_paths(opts, host_config), *_kept_run_directory(opts)),
            never_writable=host_programs(opts.get("runtime"), host_config),
        )
        from sharedos.upstream.tokenstore import store_opener

        tokens = store_opener(host_config.tokens, os.environ, host_config.base_dir)
        async with UpstreamBroker(
            upstreams, pins=opts["pins"], confinement=confinement, tokens=tokens
        ) as broker:
            broker.attach(registry, policy)
            # the run's secrets known before any upstream is listed (the harnesses' env
            # values, the keys, the store's password): a tool definition holding one is
            # held back from the turn's first listing too, not only from later ones
            broker.host_secrets = Redactor(run_secrets(opts, None))
            async with broker.turn(context) as turn_upstreams:
                secrets = run_secrets(opts, turn_upstreams)
                # and from what an upstream writes on its stderr (the operator's terminal): a
                # model may pass one of them into a call, and the upstream log the call
                broker.host_secrets = Redactor(secrets)
                host = RuntimeHost(
                    kernel,
                    store,
                    handler_timeout_s=longest + 5.0,
                    shadow=shadow,
                    approvals=host_config.approvals.settings(),
                    # every secret this run holds: scrubbed from every record and every
                    # answer, as from the harness's own output (``_launch``)
                    host_secrets=secrets,
                )
                for line in turn_upstreams.report():
                    click.echo(line, err=True)
                if opts["dry_run"]:
                    if opts["as_json"]:
                        catalog, entries = catalog_entries(
                            host, context, tool_policy, turn_upstreams
                        )
                        doc = {
                            "principal": context.principal,
                            "runPolicy": tool_policy.name,
                            "catalogHash": catalog.catalog_hash,
                            "tools": [
                                {k: v for k, v in e.items() if k != "upstreamReport"}
                                for e in entries
                            ],
                            "upstreams": turn_upstreams.as_dict()["upstreams"],
                        }
                        # scrubbed as everything the run prints (an upstream's message)
                        doc = json.loads(json.dumps(doc, default=str))
                        click.echo(json.dumps(broker.host_secrets.scrub_json(doc), indent=2))
                        return EXIT_OK
                    for line in explain_catalog(host, context, tool_policy, turn_upstreams):
                        click.echo(broker.host_secrets.scrub(line))
                    return EXIT_OK
                try:
                    return await _launch(opts, host, context, tool_policy, turn_upstreams)
                finally:
                    await _say_unwritten(host)
    finally:
        store.close()


async def _say_unwritten(host: Any) -> None:
    """One line when records of calls the store refused (a full disk, a lock) could not be
    written before exit (those calls did not run, and nothing in the store says so), and
    one per turn whose seal the store refused as it closed and has not taken since."""
    from sharedos.kernel.recorder import unwritten_note

    note = unwritten_note(
        await host.settle_unwritten(), host.unsealed_turns(), host.unwritten_outcomes()
    )
    if note is not None:
        click.echo(note, err=True)


def stream_printer(harness_id: str) -> Any:
    """The output hook of ``sharedos run``: each harness line on stderr, as it arrives.

    stdout lines are prefixed ``[ID]``, stderr lines ``[ID stderr]``; stdout of
    ``sharedos run`` stays for the answer (and ``--json``). Lines arrive scrubbed of
    the host's secrets; control characters are shown escaped, so what a harness (or
    a tool result it echoes) prints cannot move the cursor or rewrite the terminal.
    """

    def printer(stream: str, line: str) -> None:
        tag = harness_id if stream == "stdout" else f"{harness_id} {stream}"
        click.echo(f"[{tag}] {printable(line)}", err=True)

    return printer


#: Signals that stop a run in order (Ctrl-C included: asyncio's own SIGINT handling
#: cancels the run too, but then leaves as KeyboardInterrupt, click's exit 1 "nothing ran")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


async def _stopped_by_signal(opts: dict[str, Any]) -> int:
    """``_run_turn``, closed down in order when SIGINT, SIGTERM or SIGHUP arrives.

    Python's default for SIGTERM and SIGHUP ends the process on the spot, as SIGKILL
    would: the turn unsealed, its temporary run directory (the harness's transcript,
    tool results included) left on disk; for SIGINT it is KeyboardInterrupt, which
    click turns into exit 1 ("nothing ran") after the turn ran. Here each cancels the
    main task once: every ``finally`` runs, so calls in flight are recorded
    ``cancelled``, the turn is sealed, the harness's process tree is ended and the
    run directory removed; the exit status is then 128 + the signal's number.
    A second one while that runs (Ctrl-C pressed twice) ends the process at once by
    that signal's default action, after saying on stderr what it leaves undone (the
    turn possibly unsealed, the run directory on disk); the harness's tree still ends
    with it (its supervisor's parent-death signal).
    A signal the run was started with ignored stays ignored: ``nohup sharedos run``
    must outlive its terminal's hangup, and a script's ``sharedos run ... &`` its
    Ctrl-C (a shell ignores SIGINT in its background jobs), as any other command does.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    got: list[int] = []
    handled = tuple(s for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN)

    def stop(signum: int) -> None:
        if got:  # a second one while the run closes: leave at once, and say what is left
            name = signal.Signals(signum).name
            click.echo(
                f"sharedos: {name} while stopping: leaving at once, without closing the run: turn "
                f"{opts['context'].turn_id} may be left unsealed, a call in flight without its "
                "outcome, the run directory on disk",
                err=True,
            )
            for each in handled:
                loop.remove_signal_handler(each)
            # the default action: for SIGINT not asyncio's KeyboardInterrupt (restored by
            # remove_signal_handler), which would run the cleanup on and leave as exit 1
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        got.append(signum)
        click.echo(f"sharedos: stopping the run ({signal.Signals(signum).name})", err=True)
        task.cancel()

    for signum in handled:
        loop.add_signal_handler(signum, stop, signum)
    try:
        code = await _run_turn(opts)
    except asyncio.CancelledError:
        if not got or task.uncancel() > 0:
            raise
        code = EXIT_CONFIG
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
    return 128 + got[0] if got else code


def _kept_run_directory(opts: dict[str, Any]) -> tuple[str, ...]:
    """``--workdir``, made now, as no upstream sandbox may show it: it keeps every turn's
    directory (the harness's transcript and tool results, its MCP configuration with the
    turn's bearer token while it runs), as the runs' private base does, which every upstream
    sandbox masks. Made before the upstreams start, so that a root holding it can mask it
    (a path that does not exist yet cannot be, and the upstream is then left out)."""
    if opts.get("workdir") is None:
        return ()
    base = Path(opts["workdir"]).resolve()
    with contextlib.suppress(OSError):  # said when the turn makes its directory there
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
    return (str(base),)


def _run_directory(opts: dict[str, Any]) -> tuple[Path, bool, Claim | None]:
    """Where the harness's private turn directory is made, whether it is removed after, and
    this run's claim on it (released once it is removed)."""
    if opts["workdir"] is not None:
        # absolute: the harness runs in a directory of its own below it, and every path the
        # run hands it (its MCP configuration, its HOME) must mean the same there
        base = Path(opts["workdir"]).resolve()
        click.echo(f"run directory: {base} (--workdir; kept)", err=True)
        return base, False, None
    from sharedos.confine.door import run_base

    _sweep_leftovers()
    # under a private base every upstream sandbox masks, not in the temporary directory
    # itself: an upstream whose roots hold that directory would see this run's transcript
    try:
        base = Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=run_base()))  # 0700
    except OSError as exc:  # another user's directory in its place: said, never used
        _fail(f"cannot make the run directory: {exc.strerror or exc}", EXIT_HARNESS_UNAVAILABLE)
    if opts["keep"]:
        click.echo(f"run directory: {base} (kept: --keep)", err=True)
        return base, False, None
    click.echo(f"run directory: {base} (removed after the run; --keep keeps it)", err=True)
    claimed = None
    with contextlib.suppress(OSError):  # killed outright, this run leaves it: the next removes it
        claimed = claim(base)
    return base, True, claimed


#: name prefix of a run's temporary directory
RUN_PREFIX = "sharedos-run-"


def _sweep_leftovers() -> None:
    """Remove what runs killed outright left (``sharedos.confine.leftovers``): their run,
    door, stdio and turn-file directories, each with a dead turn's transcript or secret."""
    from sharedos.bridge.turnfile import TURN_PREFIX
    from sharedos.confine.door import DOOR_PREFIX, STDIO_PREFIX, private_base, run_base

    removed = sweep(Path(tempfile.gettempdir()), (RUN_PREFIX, TURN_PREFIX))
    with contextlib.suppress(OSError):
        removed += sweep(private_base(), (DOOR_PREFIX, STDIO_PREFIX, TURN_PREFIX))
    with contextlib.suppress(OSError):
        removed += sweep(run_base(), (RUN_PREFIX,))
    if removed:
        click.echo(
            f"removed {len(removed)} temporary director{'y' if len(removed) == 1 else 'ies'} "
            "left by runs that were killed",
            err=True,
        )


def _attempt_wires(result: Any) -> list[dict[str, Any] | None]:
    """Per evidence record, what the harness side saw: the name the model used, its call id,
    whether the harness marked the result as an error (from its own account of the turn)."""
    from sharedos.harness.correlate import correlate

    out: list[dict[str, Any] | None] = []
    for link in correlate(result.evidence, result.issued, result.output.tool_events):
        issued, event = link.issued, link.event
        alias = (issued.alias if issued else None) or (event.alias if event else None)
        if alias is None and event is None:
            out.append(None)
            continue
        wire: dict[str, Any] = {
            "alias": alias,
            "harnessCallId": (event.call_id if event else None)
            or (issued.call_id if issued else None),
        }
        if event is not None and event.is_error is not None:
            wire["isError"] = event.is_error
        out.append(wire)
    return out


def confinement_check(tool_policy: Any, unconfined: bool) -> str | None:
    """Why this run cannot start confined (``None``: it can, or needs not be)."""
    from sharedos.confine import ConfinementUnavailable, find_bubblewrap
    from sharedos.toolpolicy import RunMode

    if tool_policy.mode is not RunMode.STRICT or unconfined:
        return None
    try:
        find_bubblewrap()
    except ConfinementUnavailable as exc:
        return str(exc)
    return None


#: what to do about each reason a strict run cannot start confined
_INSTALL = "Install bubblewrap, or pass"
_FIX_PATH = (
    "Keep the run directory (--workdir), the [confinement] readonly paths and the harness's "
    "command apart from the managed roots, each path existing, or pass"
)
_OR_PASS = "Pass"


def _cannot_confine(policy_name: str, why: str, remedy: str = _INSTALL) -> int:
    """Say why a strict run did not start, and the remedy for that reason (``bubblewrap`` is
    no answer to a managed root the sandbox would show)."""
    click.echo(
        f"error: run policy {policy_name!r} is strict, so its harness must run confined, and it "
        f"cannot be: {why}. Nothing ran. {remedy} --unconfined to run it anyway (the turn is "
        "then recorded and reported as NOT CONFINED).",
        err=True,
    )
    return EXIT_CANNOT_CONFINE


def run_secrets(
    opts: dict[str, Any], turn_upstreams: Any, environ: Mapping[str, str] | None = None
) -> list[str]:
    """Every secret value a run holds, one list for its records, answers and output.

    Every harness's env values, the evidence signing key's contents, every upstream
    credential the host file names and the run can read (another principal's too:
    ``HostConfig.credential_secrets``), the credentials of every upstream serving the
    turn (a model that learns one must not have it recorded in another tool's arguments
    either; none when ``turn_upstreams`` is None, before the turn opens) and the evidence
    store's passwords (``store_passwords``: the location's, ``PGPASSWORD``, the connection
    service files', the password files').
    """
    host_config = opts["host_config"]
    env = os.environ if environ is None else environ
    location = opts.get("evidence_db") or host_config.evidence_location(env)
    secrets = list(host_config.held_secrets(env, str(location) if location else None))
    for creds in turn_upstreams.credentials.values() if turn_upstreams is not None else ():
        secrets.extend(creds.secrets())
    return list(dict.fromkeys(secrets))


def state_paths(opts: dict[str, Any], host_config: Any) -> list[str]:
    """SharedOS's own state, which no sandbox (harness or upstream) may show."""
    from sharedos.evidence.url import store_files

    roots = [str(p) for p in opts.get("rule_paths") or []]
    evidence = opts.get("evidence_db") or host_config.evidence_location() or "evidence.sqlite"
    return [*roots, *store_files(evidence), *host_config.state_paths()]


def host_programs(runtime: Any, host_config: Any = None) -> tuple[str, ...]:
    """Code the host runs outside any sandbox, as ``code_paths`` finds it (with the ``PATH``
    directories a bare name is looked up in): the ``bwrap`` it confines with, the harness
    CLI the host file names (the host runs ``CLI --version`` itself before every turn, and
    an open run runs the CLI unconfined) and every stdio upstream that declares no roots
    (unconfined, supervised, in an open or ``--unconfined`` run), with the git directories
    of the repositories such an upstream is pointed at and the installs of a package
    runner it is started by (``host_trees``). No
    upstream sandbox may write them: what it wrote would run next as the host."""
    from sharedos.confine.detect import BWRAP_ENV, bubblewrap_program
    from sharedos.confine.programs import code_paths, git_commands, runs_git, upstream_environ
    from sharedos.confine.upstream import script_args

    path_env = os.environ.get("PATH")
    found: list[str] = []
    # the sandbox program itself (``$SHAREDOS_BWRAP``, or ``bwrap`` on ``PATH`` where the
    # system has none): the host runs it unconfined, and it is every later sandbox
    bwrap = bubblewrap_program()
    if bwrap is not None:
        found += code_paths(os.environ.get(BWRAP_ENV) or bwrap, path_env)
    if runtime is not None:
        path_env = runtime.environ.get("PATH")
        for part in runtime.command[:2]:
            if "/" in part or part == runtime.command[0]:
                found += code_paths(part, path_env)
    for upstream in getattr(host_config, "upstream", {}).values():
        if upstream.transport != "stdio" or upstream.command is None or upstream.roots is not None:
            continue
        found += code_paths(upstream.command, path_env)
        for script in script_args(upstream.args, upstream.cwd):
            found += code_paths(script, path_env)
        # the programs a git upstream runs by name, on ITS PATH: git itself, and a
        # ``diff.external = difft`` of git's global configuration (``git_commands``)
        environ = upstream_environ(upstream.env)
        if runs_git(upstream.command, upstream.args, environ):
            for name in git_commands(environ):
                found += code_paths(name, environ.get("PATH"))
    return tuple(dict.fromkeys([*found, *host_trees(runtime, host_config)]))


def host_imports(host_config: Any = None) -> tuple[str, ...]:
    """Where every unconfined stdio upstream loads code from by name, beyond its program
    (``upstream.sandbox.upstream_imports``: its ``env``'s ``PYTHONPATH``, the working
    directory of ``python -m SERVER``): no files root may hold them."""
    from sharedos.upstream.sandbox import upstream_imports

    return upstream_imports(getattr(host_config, "upstream", {}).values())


def host_trees(runtime: Any, host_config: Any = None) -> tuple[str, ...]:
    """Directories whose every file the host runs or reads as code outside any sandbox,
    besides SharedOS's installation (part of ``host_programs``): the installs of a package
    runner the harness CLI or an unconfined stdio upstream is started by (``npx -y
    server``: ``~/.npm/_npx``, run from there again unchecked; ``runner_dirs``) and the git
    directories of the repositories such an upstream's arguments or declared cwd lie in
    (``--repository REPO``: git run there as the host runs ``core.fsmonitor`` and the
    hooks; ``git_dirs``) with git's global configuration files (``~/.gitconfig``, read in
    every repository: ``git_config_files``). No files root may hold them or lie inside them."""
    from sharedos.confine.programs import (
        GIT_ENV,
        git_config_files,
        git_dirs,
        runner_dirs,
        runs_git,
        unfenced_git_server,
        upstream_environ,
    )

    found: list[str] = []
    if runtime is not None:
        found += runner_dirs(
            runtime.command[0], runtime.environ
        )  # ``command = ["npx", "-y", "CLI"]``
    for upstream in getattr(host_config, "upstream", {}).values():
        if upstream.transport != "stdio" or upstream.command is None or upstream.roots is not None:
            continue
        # where ITS runner keeps installs: the SDK passes it HOME and PATH of the host's
        # environment, and its own env (``UV_CACHE_DIR``), nothing else
        environ = upstream_environ(upstream.env)
        found += runner_dirs(upstream.command, environ)
        # an upstream that runs git (``mcp-server-git``, a ``git`` word, a ``GIT_DIR`` in
        # its env): the repositories of its arguments and cwd, and the one its environment
        # names (``GIT_DIR``, ``GIT_WORK_TREE``: git there reads that one, wherever its
        # arguments and cwd lie). Any other's (``server-filesystem /srv/project``) never
        # runs git there: its repository may lie in a files root or a confined ``rw`` root
        if not runs_git(upstream.command, upstream.args, environ):
            continue
        # the configuration git reads in every repository (``~/.gitconfig``): what it
        # names runs there as a repository's own ``core.fsmonitor`` does
        found += git_config_files(environ)
        named = [v for k, v in environ.items() if k in GIT_ENV]
        where = [*upstream.args, *([upstream.cwd] if upstream.cwd else []), *named]
        # the whole work tree: git pointed anywhere in it enters a repository made there.
        # One naming no repository and no cwd runs git where the SDK starts it: the
        # host's working directory
        repositories = git_dirs(where, upstream.cwd, work_trees=True)
        if not repositories and upstream.cwd is None:
            repositories = git_dirs([os.getcwd()], work_trees=True)
        found += repositories
        if unfenced_git_server(upstream.command, upstream.args):
            found.append(os.sep)  # mcp-server-git without --repository: any repo_path
    return tuple(dict.fromkeys(found))


def managed_roots(opts: dict[str, Any], host: Any) -> list[str]:
    """The managed roots a confined harness must not see (the runtime adds its own finds)."""
    from sharedos.evidence.url import store_files

    roots = [str(p) for p in opts.get("rule_paths") or []]
    if opts.get("sandbox") is not None:
        roots.append(str(Path(opts["sandbox"]).resolve()))
    path = getattr(host.evidence, "path", None)
    if isinstance(path, str):
        roots += store_files(path)
    evidence = opts.get("evidence_db")
    if evidence:
        roots += store_files(evidence)  # a PostgreSQL store has no path: its sockets
    return roots


async def _launch(
    opts: dict[str, Any], host: Any, context: Any, tool_policy: Any, turn_upstreams: Any
) -> int:
    from sharedos.confine import ConfinementUnavailable, ManagedRootVisible
    from sharedos.harness.endpoints import ModelEndpointRefused
    from sharedos.harness.tools import HarnessUnavailable

    runtime = opts["runtime"]
    transport = runtime.harness.transport
    catalog = host.kernel.list_tools(context, tool_policy)
    click.echo(
        f"turn {context.turn_id}: {context.principal} under {tool_policy.name}, "
        f"{len(catalog)} tool(s), catalogHash {catalog.catalog_hash}, over {transport}",
        err=True,
    )
    # the run's secrets are scrubbed from the harness's output, streamed or captured
    secrets = run_secrets(opts, turn_upstreams, runtime.environ)
    base, remove, claimed = _run_directory(opts)
    try:
        result = await runtime.run_turn(
            host,
            context,
            tool_policy,
            plan=opts["plan"],
            workdir=base,
            transport=transport,
            timeout_s=opts["timeout_s"],
            prompt=opts["prompt"] or None,
            on_output=stream_printer(runtime.harness.id) if opts["stream"] else None,
            secrets=secrets,
            unconfined=opts["unconfined"],
            managed_roots=managed_roots(opts, host),
            upstream_confinement=turn_upstreams.confinement(),
        )
    except ModelEndpointRefused as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_HARNESS_FAILED
    except HarnessUnavailable as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_HARNESS_UNAVAILABLE
    except ManagedRootVisible as exc:  # a path the view would show, or that does not exist
        return _cannot_confine(tool_policy.name, str(exc), _FIX_PATH)
    except ConfinementUnavailable as exc:  # bubblewrap was found: the sandbox did not start
        return _cannot_confine(tool_policy.name, str(exc), _OR_PASS)
    finally:
        if remove:
            discard(base, claimed)  # never recursing: the harness could make a tree of any depth
    return _report(opts, result, turn_upstreams, base, remove, Redactor(secrets))


def shown_answer(answer: str, stdout: Any) -> str:
    """The harness's answer as ``sharedos run`` prints it on ``stdout``: exact into a pipe
    or a file (it is the command's product: a script reads what the model said), but
    spelled line by line (``printable_text``) on a terminal. The model writes it, steered
    by every tool result it read: an OSC 52 there would write the operator's clipboard, a
    ``ESC[1A ESC[2K`` erase the summary above it, a U+202E reorder it."""
    return printable_text(answer) if is_terminal(stdout) else answer


def _report(
    opts: dict[str, Any],
    result: Any,
    turn_upstreams: Any,
    base: Path,
    removed: bool,
    redactor: Redactor,
) -> int:
    """The answer and the evidence summary (or the one JSON document); the exit code.

    Everything printed is scrubbed of the run's secrets (``redactor``), as the records and
    the streamed output are: the scripted model's calls (``harness.issued``) and the
    harness's answer carry what it was given, a credential passed as an argument included.
    """
    answer = result.output.final_text
    if answer is None and result.output.error is None and not result.output.events:
        answer = result.process.stdout.rstrip() or None  # a CLI that prints no events

    if answer is not None:
        answer = redactor.scrub(answer)
    confinement = result.identity.confinement
    if confinement is not None:
        click.echo(f"confinement: {confinement.label()}", err=True)
        for uid, how in sorted((confinement.upstreams or {}).items()):
            click.echo(f"  upstream {uid}: {how}", err=True)
    records = result.evidence
    wires = _attempt_wires(result)
    if opts["as_json"]:
        doc = json.loads(
            json.dumps(
                {
                    "turnId": result.turn_id,
                    "catalogHash": result.identity.catalog_hash,
                    "transport": result.transport,
                    "answer": answer,
                    "runDirectory": {"path": str(base), "removed": removed},
                    "confinement": confinement.model_dump(mode="json", by_alias=True)
                    if confinement is not None
                    else None,
                    "upstreams": turn_upstreams.as_dict()["upstreams"],
                    "attempts": [
                        {
                            "seq": r.seq,
                            "tool": r.tool,
                            "outcome": str(r.outcome),
                            "reason": str(r.reason) if r.reason else None,
                            "resource": r.resource,
                            "wire": wire,
                        }
                        for r, wire in zip(records, wires, strict=True)
                    ],
                    "harness": result.diagnostics(),
                },
                default=str,
            )
        )
        click.echo(json.dumps(redactor.scrub_json(doc), indent=2))
    elif answer:
        click.echo(shown_answer(answer, sys.stdout), color=True)  # never stripped: exact
    for line in summary_lines(records, wires):
        click.echo(redactor.scrub(line), err=True)
    for note in result.notes:  # the tail of the harness's stderr, say
        click.echo(redactor.scrub(unambiguous(f"note: {note}")), err=True)
    if result.failed:
        return EXIT_HARNESS_FAILED
    return EXIT_OK


with_short_help(run)
