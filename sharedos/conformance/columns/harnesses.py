"""What the mcp and live columns share: which harnesses and transports, rows grouped into turns.

A harness column runs one harness turn per (context, run policy) group of
manifest rows, in manifest order with the default group first, against a
fresh kernel environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sharedos.conformance.columns.base import ColumnOptions, ColumnRun
from sharedos.conformance.manifest import Manifest, Row
from sharedos.harness.adapters import HarnessUnavailable, get_adapter
from sharedos.harness.hostconfig import (
    HostConfig,
    HostConfigError,
    default_host_config,
    load_host_config,
)
from sharedos.harness.runtime import McpHarnessRuntime, create_mcp_harness_runtime
from sharedos.identity import ColumnKind
from sharedos.testing.scripted_model import ScriptedAttempt
from sharedos.testing.scripted_model.local import LocalCall

TRANSPORTS = ("http", "stdio")


def label_for(hid: str, host: HostConfig | None = None) -> str:
    """The report label of a harness id: its adapter's label when the id is configured."""
    try:
        kind = host.harness[hid].kind if host is not None and hid in host.harness else hid
        return get_adapter(kind).label
    except HarnessUnavailable:
        return hid


def expand_harnesses(requested: Sequence[str], host: HostConfig) -> list[str]:
    """Harness ids to run: ``all`` means every harness the host configuration names."""
    wanted = [h for h in requested if h] or ["all"]
    out: list[str] = []
    for item in wanted:
        ids = list(host.harness) if item == "all" else [item]
        for hid in ids:
            if hid not in out:
                out.append(hid)
    return out


def expand_transports(requested: str | None, default: str) -> list[str]:
    """``None`` → the host file's preference; ``both``/``all`` → http and stdio."""
    if requested in (None, ""):
        return [default]
    if requested in ("both", "all"):
        return list(TRANSPORTS)
    if requested not in TRANSPORTS:
        raise HostConfigError([f"unknown transport {requested!r} (expected http, stdio or both)"])
    return [requested]


def load_host(options: ColumnOptions) -> HostConfig:
    """The host configuration named by the options, or the embedded offline default."""
    return load_host_config(options.host_config) if options.host_config else default_host_config()


def turn_groups(manifest: Manifest) -> list[tuple[str, str, list[Row]]]:
    """Rows grouped by (context, run policy): one harness turn each, default group first."""
    groups: dict[tuple[str, str], list[Row]] = {}
    groups[(manifest.default_context, manifest.default_policy)] = []
    for row in manifest.rows:
        groups.setdefault((manifest.context_of(row), manifest.policy_of(row)), []).append(row)
    return [(c, p, rows) for (c, p), rows in groups.items() if rows]


def plan_for(
    rows: Sequence[Row], *, canary_port: int | None = None
) -> tuple[list[ScriptedAttempt], list[str]]:
    """The scripted attempts for these rows (bound to the column), and notes on rows that
    cannot be planned. A harness-local row becomes an attempt with the CLI's own tool;
    a network row needs ``canary_port``, the column's canary."""
    plan: list[ScriptedAttempt] = []
    notes: list[str] = []
    for row in rows:
        if row.local is not None:
            local = row.local
            if local.tool == "network" and canary_port is None:
                notes.append(f"{row.id}: no canary listens in this column; not attempted")
                continue
            fields = {
                k: v for k in ("command", "path", "content") if (v := getattr(local, k)) is not None
            }
            call = LocalCall(kind=local.tool, port=canary_port, **fields)
            plan.append(ScriptedAttempt(row.id, row.tool_name, fields, local=call))
        elif isinstance(row.arguments, dict):
            plan.append(ScriptedAttempt(row.id, row.tool_name, dict(row.arguments)))
        else:
            notes.append(
                f"{row.id}: arguments are not a JSON object; no harness can send them as a tool call"
            )
    return plan, notes


def policy_paths(options: ColumnOptions) -> tuple[Path, ...]:
    """The policy files the column's kernel compiles (the shipped ones unless overridden)."""
    from sharedos.conformance.environment import default_policy_paths

    return (
        tuple(options.policy_paths) if options.policy_paths is not None else default_policy_paths()
    )


def unavailable(kind: ColumnKind, hid: str, transport: str | None, reason: str) -> ColumnRun:
    """A harness column kept in the report as not available, with the reason."""
    cid = f"{kind.value}/{hid}" + (f"/{transport}" if transport else "")
    label = label_for(hid) + (f" ({transport})" if transport else "")
    return ColumnRun.unavailable(cid, kind, label, reason)


def runtime_for(host: HostConfig, hid: str) -> McpHarnessRuntime:
    """A runtime for a configured harness whose CLI answered ``--version`` (else ``HarnessUnavailable``)."""
    runtime = create_mcp_harness_runtime(host.get(hid), host)
    runtime.version()  # raises HarnessUnavailable with the reason when the CLI cannot run
    return runtime


def short(tool: str) -> str:
    """A tool name shortened for a note."""
    return tool if len(tool) <= 24 else tool[:21] + "..."


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
