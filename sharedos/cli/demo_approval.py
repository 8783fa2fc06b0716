"""The approval step of ``sharedos demo``: one call waits, an operator approves it, it runs.

The shipped ``rules/files.sos`` says that writing in one's home ``release/``
folder needs a maintainer's approval. Alice's turn is opened over the HTTP
bridge; the official SDK client (the 2026-07-28 era, which cannot carry a
question back to the client) calls ``files.write`` there and gets the
out-of-band refusal naming an approval id. The real ``sharedos approvals
list`` and ``approve`` commands (as maintainer ``maya``) run as an operator
would run them, in a separate process, while the turn stays open; the same
call, retried, runs; the chain (approval events included) verifies.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio

ARGS = {"path": "/home/alice/release/notes.txt", "content": "release notes v1\n"}


def sharedos_argv(*args: str) -> list[str]:
    """The ``sharedos`` command of this interpreter (its console script, else ``-c``)."""
    script = Path(sys.executable).parent / "sharedos"
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-c", "import sys; from sharedos.cli.main import main; main()", *args]


def _operator(say: Callable[[str], None], *args: str) -> subprocess.CompletedProcess[str]:
    """Run one ``sharedos approvals`` command as the operator, echoing it and its output."""
    say("  $ sharedos " + " ".join(args))
    proc = subprocess.run(
        sharedos_argv(*args),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    for line in (proc.stdout + proc.stderr).strip().splitlines():
        say(f"    {line}")
    return proc


async def approval_demo(tmp: Path, say: Callable[[str], None]) -> bool:
    """Run the step; False when something that should have worked did not."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from sharedos.bridge import open_turn
    from sharedos.catalog import ToolRegistry
    from sharedos.context import AccessContext
    from sharedos.evidence import SqliteEvidenceStore
    from sharedos.evidence.verify import verify_store
    from sharedos.kernel import Kernel, RuntimeHost
    from sharedos.policy import compile_paths
    from sharedos.resources import shipped_dir
    from sharedos.tools import register_files_tools

    sandbox = tmp / "sandbox"
    (sandbox / "home" / "alice" / "release").mkdir(parents=True)
    db = tmp / "evidence.sqlite"
    policy = compile_paths([shipped_dir("rules"), shipped_dir("policy")])
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    store = SqliteEvidenceStore(db)
    host = RuntimeHost(Kernel(policy, registry), store)
    context = AccessContext(principal="alice", roles=("member",))
    tool_policy = policy.tool_policies["dev-open"]
    written = sandbox / "home" / "alice" / "release" / "notes.txt"
    ok = True
    try:
        async with (
            open_turn(host, context, tool_policy) as turn,
            httpx2.AsyncClient(headers=turn.headers()) as http,
            Client(streamable_http_client(str(turn.url), http_client=http)) as client,
        ):
            say(f"  alice calls files.write({ARGS['path']}) in turn {context.turn_id}")
            first = await client.call_tool("files.write", ARGS)
            sc = first.structured_content or {}
            approval_id = str(sc.get("approvalId", ""))
            text = " ".join(getattr(b, "text", "") for b in first.content)
            say(f"  -> {sc.get('outcome')} [{sc.get('reason')}]; the model is told:")
            say(f"     {text}")
            ok = ok and first.is_error and approval_id.startswith("apr-")
            ok = ok and not written.exists()
            said = await anyio.to_thread.run_sync(
                lambda: _operator(say, "approvals", "list", "--db", str(db))
            )
            yes = await anyio.to_thread.run_sync(
                lambda: _operator(
                    say,
                    "approvals",
                    "approve",
                    approval_id,
                    "--db",
                    str(db),
                    "--as",
                    "maya",
                    "--role",
                    "maintainer",
                )
            )
            ok = ok and said.returncode == 0 and yes.returncode == 0
            say("  alice's model retries the same call, in the same turn")
            second = await client.call_tool("files.write", ARGS)
            text = " ".join(getattr(b, "text", "") for b in second.content).strip()
            outcome = "succeeded" if not second.is_error else "refused"
            say(f"  -> {outcome}: {text[:100]}")
            ok = ok and not second.is_error
            ok = ok and written.exists() and written.read_text() == ARGS["content"]
            third = await client.call_tool("files.write", ARGS)
            sc = third.structured_content or {}
            say(
                f"  and once more -> {sc.get('outcome')} [{sc.get('reason')}]: an approval "
                f"is used once (new request {sc.get('approvalId')})"
            )
            ok = ok and third.is_error
    finally:
        store.close()
    with SqliteEvidenceStore(db, read_only=True) as records:
        rows = records.query(turn_id=context.turn_id)
        report = verify_store(records)
        kinds = [link.kind for link in records.iter_links(context.turn_id)]
    say(
        f"  evidence: {len(rows)} attempts ({', '.join(str(r.reason or r.outcome) for r in rows)}), "
        f"{kinds.count('approval')} approval events in the turn's chain; "
        f"verify: {'clean' if report.clean else 'PROBLEMS'}"
    )
    return ok and report.clean
