"""The client columns: MCP clients that are not agent CLIs, making every row's call themselves.

Agent CLIs decide which calls to make and refuse names they were not offered;
a programmatic client makes exactly the call it is given. Two such clients
people use, pinned in ``tools/package.json``:

- ``client/ts-sdk/<transport>``: a plain client on the official TypeScript
  SDK (``ts_sdk_client.mjs`` beside this module), one process per turn, which
  lists the tools and so validates every result's ``structuredContent``
  against the tool's ``outputSchema`` (even on ``isError``);
- ``client/inspector/<transport>``: the MCP Inspector CLI, one process per
  call (``--cli --format json``), which does the same validation.

Each row's call goes through the real bridge (HTTP with the bearer token, or
stdio through a relayed bridge process the client launches) to the column's
kernel, brokered rows included. A result the client rejected (a thrown
``McpError``, an Inspector validation failure) is recorded on the attempt as
``wire.delivered = False``, which fails the cell: a refusal must be a result
every conforming client accepts. A call the client refused to send leaves no
attempt: the row is not exercised, and the note says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from sharedos.conformance.columns.base import (
    ColumnJob,
    ColumnOptions,
    ColumnRun,
    attempt_from_record,
    run_at_most,
)
from sharedos.conformance.columns.harnesses import TRANSPORTS, clip, turn_groups
from sharedos.conformance.environment import column_environment, merge_wire
from sharedos.conformance.manifest import Row
from sharedos.harness.paths import node22, tools_dir
from sharedos.identity import ColumnKind, McpSupport, SystemIdentity

#: client id -> report label
CLIENTS: dict[str, str] = {"ts-sdk": "TypeScript SDK", "inspector": "MCP Inspector"}
TS_CLIENT = Path(__file__).with_name("ts_sdk_client.mjs")


def _package_version(name: str) -> str | None:
    with contextlib.suppress(OSError, ValueError, KeyError):
        data = json.loads((tools_dir() / name / "package.json").read_text(encoding="utf-8"))
        return str(data["version"])
    return None


def _entry(client: str) -> Path:
    if client == "ts-sdk":
        return tools_dir() / "@modelcontextprotocol" / "sdk" / "package.json"
    return (
        tools_dir() / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build"
    ) / "index.js"


def _unavailable(client: str, transport: str, reason: str) -> ColumnRun:
    return ColumnRun.unavailable(
        f"client/{client}/{transport}",
        ColumnKind.CLIENT,
        f"{CLIENTS[client]} ({transport})",
        reason,
    )


async def run(options: ColumnOptions) -> list[ColumnRun]:
    """One ``ColumnRun`` per client × transport (default: both transports)."""
    transports = (
        list(TRANSPORTS)
        if options.transport in (None, "", "both", "all")
        else [str(options.transport)]
    )
    runs: list[ColumnJob] = []
    for client in CLIENTS:
        package = (
            "@modelcontextprotocol/sdk" if client == "ts-sdk" else "@modelcontextprotocol/inspector"
        )
        version = _package_version(package)
        if version is None or not _entry(client).exists() or not node22().exists():
            reason = (
                f"{package} is not installed in {tools_dir()} (run `make tools` / "
                "scripts/install-tools.sh)"
            )
            runs.extend(_unavailable(client, t, reason) for t in transports)
            continue
        runs.extend(partial(run_client_column, client, version, t, options) for t in transports)
    return await run_at_most(options.jobs, runs)


async def run_client_column(
    client: str, version: str, transport: str, options: ColumnOptions
) -> ColumnRun:
    """Every manifest row's call, made by ``client`` over ``transport``, against a fresh kernel."""
    from sharedos.bridge.turn import open_turn
    from sharedos.bridge.turnfile import StdioLaunch

    name = f"client-{client}-{transport}-{uuid.uuid4().hex[:6]}"
    env = column_environment(options, name)
    unavailable_rows = env.unavailable_rows()
    column = ColumnRun(
        column_id=f"client/{client}/{transport}",
        kind=ColumnKind.CLIENT,
        label=f"{CLIENTS[client]} {version} ({transport})",
        match_by="tool_resource",
        evidence_path=str(env.evidence_path),
        bindings=env.bindings,
        unavailable_rows=unavailable_rows,
    )
    t0 = time.perf_counter()
    try:
        async with env.serving_upstreams():
            for ctx_name, pol_name, rows in turn_groups(options.manifest):
                served = [r.bind(env.bindings) for r in rows if r.id not in unavailable_rows]
                if not served:
                    continue
                tool_policy = env.tool_policy(pol_name)
                context = env.context(
                    ctx_name, f"{name}-{ctx_name}-{pol_name}-{uuid.uuid4().hex[:8]}"
                )
                catalog = env.catalog(context, tool_policy)
                identity = SystemIdentity(
                    harness=client,
                    harness_version=version,
                    column=ColumnKind.CLIENT,
                    declared_model="none (the client makes each call itself)",
                    mcp_support=McpSupport.NATIVE,
                    catalog_hash=str(catalog.catalog_hash),
                    policy_bundle_hash=env.policy_bundle_hash,
                )
                if column.identity is None:
                    column.identity = identity
                    column.tool_policy = tool_policy
                group = f"turn {ctx_name}/{pol_name}"
                scratch = env.workdir / f"{client}-{uuid.uuid4().hex[:6]}"
                scratch.mkdir(mode=0o700)
                async with (
                    env.turn(context) as brokered,
                    open_turn(
                        env.host,
                        context,
                        tool_policy,
                        transport=transport,  # type: ignore[arg-type]
                        identity=identity.as_record(),
                        stdio=StdioLaunch(directory=scratch),
                    ) as turn,
                ):
                    calls = _calls(served)
                    # one client process (a turn's calls, or one Inspector call), and each
                    # request the TS SDK makes, may take as long as the column's deadline,
                    # as a harness's turn may in the mcp column. A limit of their own (120 s
                    # a process, the SDK's 60 s a request) was shorter than a stdio bridge's
                    # start on a saturated machine: rows the kernel answered were graded not
                    # exercised, and a larger --timeout changed nothing.
                    deadline = options.timeout_s
                    if client == "ts-sdk":
                        answers = await _ts_sdk(turn, calls, scratch, deadline)
                    else:
                        answers = [
                            await _inspector(turn, call, scratch, deadline) for call in calls
                        ]
                    records = list(env.evidence.query(turn_id=context.turn_id))
                    upstream = brokered.wires(records)
                    seen = brokered.note(group)
                _collect(column, (ctx_name, pol_name), calls, answers, records, upstream, client)
                if seen is not None:
                    column.notes.append(seen)
            column.notes.extend(env.upstream_notes())
    finally:
        env.close()
    column.duration_s = round(time.perf_counter() - t0, 3)
    return column


def _calls(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The calls to make: every row's tool and arguments exactly as written."""
    return [{"row": r.id, "name": r.tool_name, "arguments": r.arguments} for r in rows]


def _node_env(scratch: Path) -> dict[str, str]:
    """A minimal environment: a private HOME (the Inspector keeps its state under it)."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(scratch),
        "SHAREDOS_NODE_MODULES": str(tools_dir()),
    }


async def _ts_sdk(
    turn: Any, calls: list[dict[str, Any]], scratch: Path, deadline_s: float
) -> list[dict[str, Any]]:
    """All of a turn's calls in one TS SDK client process; per call ``{ok, result | error}``."""
    spec: dict[str, Any] = {
        "calls": [{"name": c["name"], "arguments": c["arguments"]} for c in calls],
        "timeoutMs": int(deadline_s * 1000),
    }
    if turn.transport == "http":
        spec.update(transport="http", url=turn.url, headers=turn.headers())
    else:
        spec.update(transport="stdio", command=turn.command[0], args=turn.command[1:])
    with anyio.move_on_after(deadline_s):
        proc = await anyio.run_process(
            [str(node22()), str(TS_CLIENT)],
            input=json.dumps(spec).encode(),
            check=False,
            env=_node_env(scratch),
        )
        lines = proc.stdout.decode("utf-8", "replace").strip().splitlines()
        with contextlib.suppress(ValueError, IndexError):
            out = json.loads(lines[-1])
            results: list[dict[str, Any]] = list(out.get("results") or [])
            if out.get("fatal"):
                why = f"the client failed: {clip(str(out['fatal']), 300)}"
                results += [{"ok": False, "error": {"message": why}}] * (len(calls) - len(results))
            return results
    return [{"ok": False, "error": {"message": "the TS SDK client gave no answer"}}] * len(calls)


async def _inspector(
    turn: Any, call: dict[str, Any], scratch: Path, deadline_s: float
) -> dict[str, Any]:
    """One call through ``inspector --cli``; ``{ok, result | error}`` like the TS SDK's."""
    base = [str(node22()), str(_entry("inspector")), "--cli", "--format", "json", "--quiet"]
    # the Inspector's own 15 s connect timeout is shorter than a stdio bridge's start on a
    # busy machine: it would grade a call "no answer" that the kernel answered
    base += ["--connect-timeout", str(int(deadline_s * 1000))]
    tool = ["--method", "tools/call", "--tool-name", str(call["name"])]
    tool += ["--tool-args-json", json.dumps(call["arguments"])]
    if turn.transport == "http":
        # the token goes in a private config file, never on a command line
        config = scratch / "inspector-servers.json"
        entry = {"type": "http", "url": turn.url, "headers": turn.headers()}
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"mcpServers": {"sharedos": entry}}, fh)
        argv = [*base, "--config", str(config), "--server", "sharedos", *tool]
    else:
        argv = [*base, *tool, "--", *turn.command]
    with anyio.move_on_after(deadline_s):
        proc = await anyio.run_process(argv, check=False, env=_node_env(scratch))
        text = proc.stdout.decode("utf-8", "replace")
        if proc.returncode in (0, 5):  # 5: the tool answered isError (a result)
            with contextlib.suppress(ValueError):
                return {"ok": True, "result": json.loads(text[text.index("{") :])["result"]}
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return {
            "ok": False,
            "error": {"exit": proc.returncode, "message": _inspector_error(err) or clip(text, 300)},
        }
    return {"ok": False, "error": {"message": "the Inspector gave no answer in time"}}


def _inspector_error(lines: list[str]) -> str:
    """The message of the Inspector's JSON error envelope on stderr (else its last lines)."""
    for line in reversed(lines):
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            envelope = json.loads(line)
            return clip(str(envelope["error"]["message"]), 300)
    return clip(" ".join(lines[-3:]), 300)


def _collect(
    column: ColumnRun,
    turn: tuple[str, str],
    calls: list[dict[str, Any]],
    answers: list[dict[str, Any]],
    records: list[Any],
    upstream: list[dict[str, Any] | None],
    client: str,
) -> None:
    """Tie each evidence record to the call that made it (calls are sequential: in order,
    by tool) and keep what the client got back as the attempt's wire; ``turn`` is the
    (context, run policy) group of the turn."""
    group = f"turn {turn[0]}/{turn[1]}"
    pending = list(zip(calls, answers, strict=False))
    for record, up in zip(records, upstream, strict=True):
        index = next((i for i, (c, _) in enumerate(pending) if c["name"] == record.tool), None)
        wire: dict[str, Any] = {"client": client}
        if index is not None:
            call, answer = pending.pop(index)
            wire["alias"] = call["name"]  # a programmatic client calls the raw name
            wire["delivered"] = bool(answer.get("ok"))
            if answer.get("ok"):
                result = answer.get("result") or {}
                wire["isError"] = bool(result.get("isError"))
                wire["structuredContent"] = "structuredContent" in result
            else:
                wire["error"] = (answer.get("error") or {}).get("message")
        column.attempts.append(attempt_from_record(record, wire=merge_wire(wire, up), group=turn))
    for call, answer in pending:
        why = (answer.get("error") or {}).get("message") if not answer.get("ok") else None
        column.notes.append(
            f"{group}: {call['row']}: the client never sent {clip(str(call['name']), 60)} with "
            f"{clip(json.dumps(call['arguments']), 80)}"
            + (f" ({why})" if why else "")
            + "; the evidence store holds no attempt for it, so the row is not exercised"
        )
