"""The offline harness scenario: every harness × transport, the live column, and the closed door.

``python -m sharedos.conformance.scenario --out result.json`` runs, with the
scripted model and the pinned CLIs:

1. the mcp column for each requested harness over each transport (unless
   ``--no-mcp``: ``sharedos conformance run --columns-out`` writes the same
   column runs and grades, as ``make test``'s full matrix does);
2. the live column (same CLIs, no catalogue; ``--live``);
3. "left running": a harness whose turn closes while it is still mid-turn
   (the scripted model holds its tool call until the bridge has closed) must
   find the door shut: a refused connection over HTTP, a refusing bridge over
   stdio. No call may succeed after the turn.

and writes one JSON document (column runs, grades, diagnostics) for the tests
and for people. With ``--netns`` and root, it re-executes itself inside a
loopback-only network namespace (``unshare -n`` + ``ip link set lo up``), so
nothing it starts can reach beyond 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

NETNS_ENV = "SHAREDOS_IN_NETNS"


def in_netns() -> bool:
    """True when this process runs inside the scenario's loopback-only namespace."""
    return os.environ.get(NETNS_ENV) == "1"


def reexec_in_netns(argv: list[str]) -> int | None:
    """Re-run this module under ``unshare -n`` (root only); ``None`` when that is impossible."""
    if in_netns() or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None or ip is None:
        return None
    inner = " ".join(
        _quote(a) for a in [sys.executable, "-m", "sharedos.conformance.scenario", *argv]
    )
    env = dict(os.environ, **{NETNS_ENV: "1"})
    proc = subprocess.run(
        [unshare, "-n", "sh", "-c", f"{ip} link set lo up && exec {inner}"], env=env, check=False
    )
    return proc.returncode


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def outside_unreachable() -> dict[str, Any]:
    """Try a non-loopback connect; inside the namespace it must fail at once (no route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(("192.0.2.1", 443))  # TEST-NET-1: never a real host
        except OSError as exc:
            return {"reachable": False, "errno": errno.errorcode.get(exc.errno or 0, str(exc))}
    return {"reachable": True}


async def left_running(
    harness_id: str, transport: str, workdir: Path, manifest: Any
) -> dict[str, Any]:
    """Close a turn while the harness is mid-turn; report what its late call met."""
    from sharedos.bridge.turn import open_turn
    from sharedos.bridge.turnfile import StdioLaunch
    from sharedos.conformance.environment import build_environment
    from sharedos.harness import recipes
    from sharedos.harness.adapters import get_adapter
    from sharedos.harness.hostconfig import default_host_config
    from sharedos.harness.process import run_process
    from sharedos.testing.scripted_model import ScriptedAttempt, ScriptedModelServer

    cfg = default_host_config().get(harness_id)
    env = build_environment(manifest, workdir, name=f"left-{harness_id}-{transport}")
    ctx = env.context(manifest.default_context, f"left-{harness_id}-{transport}-{os.getpid()}")
    tool_policy = env.tool_policy(manifest.default_policy)
    plan = [ScriptedAttempt("late-read", "files.read", {"path": "/public/a.txt"})]
    hold = threading.Event()
    turn_dir = Path(tempfile.mkdtemp(prefix="turn-", dir=env.workdir))
    model = ScriptedModelServer(plan, hold=hold, log_path=turn_dir / "model.jsonl").start()
    # stdio: a relayed bridge, so the host records what reaches it after the close
    stdio = StdioLaunch(directory=env.workdir) if transport == "stdio" else None
    url = None
    t0 = time.perf_counter()
    try:
        async with open_turn(env.host, ctx, tool_policy, transport=transport, stdio=stdio) as turn:  # type: ignore[arg-type]
            url = turn.url
            launch = recipes.prepare(
                cfg,
                bridge=recipes.BridgeEndpoint(turn.transport, turn.url, turn.token, turn.command),
                turn_dir=turn_dir,
                prompt="Read /public/a.txt with files.read.",
                model_url=model.url,
                host_env=os.environ,
            )
            task = asyncio.ensure_future(
                run_process(
                    launch.argv,
                    env=launch.env,
                    cwd=launch.cwd,
                    timeout_s=90,
                    secrets=launch.secret_values,
                )
            )
            # The harness has connected, listed the tools and asked the model for
            # its first step: it is mid-turn. Now the turn ends under it, and the
            # model lets the harness make its late call just after the close began
            # (a relayed stdio bridge still attached is lingering then; an HTTP
            # port is already closed).
            while not model.holding.is_set() and not task.done():
                await asyncio.sleep(0.05)
            asyncio.get_running_loop().call_later(0.1, hold.set)
        closed_at = time.perf_counter() - t0
        port_refused = None
        if url:
            from sharedos.harness.runtime import port_refuses

            port_refused = port_refuses(url)
        hold.set()
        proc = await task
    finally:
        hold.set()
        model.stop()
    output = get_adapter(cfg.kind).parse_output(proc.stdout)
    records = [r.to_dict() for r in env.evidence.query(turn_id=ctx.turn_id)]
    env.close()
    return {
        "harness": harness_id,
        "transport": transport,
        "heldUntilClose": model.holding.is_set(),
        "turnClosedAfterS": round(closed_at, 3),
        "portRefusedAfterClose": port_refused,
        "returncode": proc.returncode,
        "timedOut": proc.timed_out,
        "toolEvents": [e.as_dict() for e in output.tool_events],
        "evidence": [
            {"tool": r["tool"], "outcome": r["outcome"], "reason": r["reason"]} for r in records
        ],
        "durationS": round(proc.duration_s, 3),
    }


async def deadline_check(harness_id: str, workdir: Path, manifest: Any) -> dict[str, Any]:
    """A turn whose deadline expires mid-run: the group is killed and the bridge closed."""
    from sharedos.conformance.environment import build_environment
    from sharedos.harness.runtime import create_mcp_harness_runtime
    from sharedos.testing.scripted_model import ScriptedAttempt

    env = build_environment(manifest, workdir, name=f"deadline-{harness_id}")
    ctx = env.context(manifest.default_context, f"deadline-{harness_id}-{os.getpid()}")
    runtime = create_mcp_harness_runtime(harness_id)
    t0 = time.perf_counter()
    result = await runtime.run_turn(
        env.host,
        ctx,
        env.tool_policy(manifest.default_policy),
        plan=[ScriptedAttempt("read", "files.read", {"path": "/public/a.txt"})],
        workdir=env.workdir,
        transport="http",
        timeout_s=0.3,
    )
    env.close()
    return {
        "harness": harness_id,
        "timedOut": result.process.timed_out,
        "wallS": round(time.perf_counter() - t0, 3),
        "portClosedAfterTurn": result.port_closed_after_turn,
        "notes": result.notes,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the whole scenario and return the JSON document."""
    from sharedos.conformance.columns import live, mcp
    from sharedos.conformance.columns.base import ColumnOptions
    from sharedos.conformance.grading import columns_as_run
    from sharedos.conformance.manifest import load_manifest
    from sharedos.harness.hostconfig import default_host_config, load_host_config
    from sharedos.redaction import Redactor

    manifest = load_manifest()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="sharedos-harness-"))
    host = load_host_config(args.host_config) if args.host_config else default_host_config()
    secrets = Redactor(host.secret_values(os.environ))
    options = ColumnOptions(
        manifest=manifest,
        workdir=workdir,
        harnesses=tuple(args.harness),
        transport=args.transport,
        host_config=Path(args.host_config) if args.host_config else None,
        timeout_s=args.timeout,
        secrets=secrets,
        evidence_synchronous=host.evidence.synchronous,
        jobs=max(1, args.jobs),
    )
    doc: dict[str, Any] = {
        "netns": in_netns(),
        "outside": outside_unreachable() if in_netns() else None,
        "workdir": str(workdir),
        "leftRunning": [],
    }
    t0 = time.perf_counter()
    runs = [] if args.no_mcp else await mcp.run(options)
    if args.live:
        runs += await live.run(options)
    doc.update(columns_as_run(manifest, [run.scrubbed(secrets) for run in runs]))
    for harness_id in args.left_running:
        for transport in (
            ("http", "stdio") if args.transport in ("both", "all") else (args.transport or "http",)
        ):
            doc["leftRunning"].append(await left_running(harness_id, transport, workdir, manifest))
    doc["deadline"] = [await deadline_check(h, workdir, manifest) for h in args.deadline]
    doc["totalS"] = round(time.perf_counter() - t0, 3)
    return doc


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (see module doc)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m sharedos.conformance.scenario")
    parser.add_argument(
        "--harness", action="append", default=[], help="harness id (repeat); default all"
    )
    parser.add_argument("--transport", default="both", help="http, stdio or both")
    parser.add_argument("--host-config")
    parser.add_argument("--live", action="store_true", help="also run the live column")
    parser.add_argument(
        "--no-mcp",
        action="store_true",
        help="skip the mcp columns (run them with `sharedos conformance run --columns-out`); "
        "the closed-door and deadline checks still run",
    )
    parser.add_argument(
        "--left-running", action="append", default=[], help="harness id for the closed-door check"
    )
    parser.add_argument(
        "--deadline", action="append", default=[], help="harness id for the deadline check"
    )
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument(
        "--jobs", type=int, default=1, help="mcp/live columns run at once (each self-contained)"
    )
    parser.add_argument("--workdir", help="where turns, sandboxes and evidence go (kept)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary workdir")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--netns", action="store_true", help="re-exec in a loopback-only network namespace (root)"
    )
    args = parser.parse_args(argv)
    if args.netns and not in_netns():
        rc = reexec_in_netns([a for a in argv if a != "--netns"])
        if rc is not None:
            return rc
    owned = args.workdir is None
    if owned:
        args.workdir = tempfile.mkdtemp(prefix="sharedos-harness-")
    try:
        doc = asyncio.run(run(args))
    finally:
        if owned and not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    from sharedos.conformance.report import write_private_text

    write_private_text(Path(args.out), json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
