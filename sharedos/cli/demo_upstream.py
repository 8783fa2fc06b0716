"""The brokered-upstream step of ``sharedos demo``: a real git upstream next to the files tools.

Creates two git repositories in a temp dir, brokers ``mcp-server-git`` (the
PyPI server, over stdio) under the ``git`` namespace with the shipped
``rules/git.sos`` plus one demo permit for the first repository, opens one
turn over the HTTP bridge, and makes one allowed and one denied brokered call
with the official SDK client, beside a built-in ``files.read``.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

GIT_SERVER = Path(sys.executable).parent / "mcp-server-git"


def git_server_command() -> str | None:
    """The mcp-server-git console script, when installed (the dev extra brings it)."""
    if GIT_SERVER.exists():
        return str(GIT_SERVER)
    return shutil.which("mcp-server-git")


def _repo(path: Path, message: str) -> Path:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "demo",
        "GIT_AUTHOR_EMAIL": "demo@example.invalid",
        "GIT_COMMITTER_NAME": "demo",
        "GIT_COMMITTER_EMAIL": "demo@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    path.mkdir(parents=True)
    (path / "README.md").write_text(f"{message}\n", encoding="utf-8")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", message]):
        subprocess.run(["git", "-C", str(path), *args], check=True, env=env)
    return path


async def brokered_git_demo(tmp: Path, say: Callable[[str], None]) -> bool:
    """Run the step; False when something that should have worked did not."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from sharedos.bridge import open_turn
    from sharedos.catalog import ToolRegistry
    from sharedos.context import AccessContext
    from sharedos.evidence import SqliteEvidenceStore
    from sharedos.harness.hostconfig import parse_host_config
    from sharedos.kernel import Kernel, RuntimeHost
    from sharedos.policy import compile_paths
    from sharedos.resources import shipped_dir
    from sharedos.tools import register_files_tools

    command = git_server_command()
    if command is None or shutil.which("git") is None:
        say("  not available: mcp-server-git (or git) is not installed (`make venv` installs it)")
        return True
    base = tmp / "brokered"
    open_repo = _repo(base / "repos" / "team", "the team's repository")
    other = _repo(base / "repos" / "other", "someone else's repository")
    (base / "sandbox" / "public").mkdir(parents=True)
    (base / "sandbox" / "public" / "a.txt").write_text("public file a\n", encoding="utf-8")
    overlay = base / "demo-git.sos"
    overlay.write_text(
        "# The demo's repository lives in a temp dir, not under /srv/git: one permit for it.\n"
        f'namespace git\n@id("demo-team-repo")\npermit read on "{open_repo}/**"\n',
        encoding="utf-8",
    )
    policy = compile_paths([shipped_dir("rules"), shipped_dir("policy"), overlay])
    # the upstream's own sandbox shows the repositories (read-only) and nothing else of the
    # host (docs/confinement.md); brokered-dev is strict, so it must be confinable
    repos = (base / "repos").resolve()
    host_toml = (
        f'[upstream.git]\ncommand = "{command}"\npinning = "off"\n'
        f'roots = [{{ path = "{repos}", mode = "ro" }}]\n'
    )
    config = parse_host_config(host_toml, "<demo host config>")
    registry = ToolRegistry()
    register_files_tools(registry, base / "sandbox")
    store = SqliteEvidenceStore(base / "evidence.sqlite")
    host = RuntimeHost(Kernel(policy, registry), store)
    tool_policy = policy.tool_policies["brokered-dev"]
    context = AccessContext(principal="alice")
    ok = True
    from sharedos.upstream.broker import UpstreamBroker
    from sharedos.upstream.sandbox import UpstreamConfinementPolicy

    try:
        state = str((base / "evidence.sqlite").resolve())
        confinement = UpstreamConfinementPolicy(
            required=True, managed=(state, state + "-wal", state + "-shm", str(overlay))
        )
        async with UpstreamBroker(
            config.upstream, environ={}, stderr=io.StringIO(), confinement=confinement
        ) as broker:
            broker.attach(registry, policy)
            async with broker.turn(context) as upstreams:
                for line in upstreams.report():
                    say(f"  {line}")
                async with (
                    open_turn(host, context, tool_policy) as turn,
                    httpx2.AsyncClient(headers=turn.headers()) as http,
                    Client(streamable_http_client(str(turn.url), http_client=http)) as client,
                ):
                    names = sorted(t.name for t in (await client.list_tools()).tools)
                    say(f"  alice's catalogue ({tool_policy.name}): {', '.join(names)}")
                    calls: list[tuple[str, dict[str, Any], bool]] = [
                        ("files.read", {"path": "/public/a.txt"}, False),
                        ("git.git_log", {"repo_path": str(open_repo)}, False),
                        ("git.git_log", {"repo_path": str(other)}, True),
                    ]
                    for tool, args, want_error in calls:
                        result = await client.call_tool(tool, args)
                        sc = result.structured_content or {}
                        if result.is_error:
                            shown = f"{sc.get('outcome')} [{sc.get('reason')}]"
                        else:
                            text = " ".join(getattr(b, "text", "") for b in result.content)
                            shown = "succeeded: " + text.strip().splitlines()[-1][:60]
                        where = args.get("repo_path") or args.get("path")
                        say(f"  {tool}({where}) -> {shown}")
                        ok = ok and result.is_error == want_error
    finally:
        store.close()
    records = SqliteEvidenceStore(base / "evidence.sqlite")
    try:
        rows = records.query(turn_id=context.turn_id)
        say(
            f"  evidence: {len(rows)} attempts recorded; the denied call never reached "
            "the upstream (rules/git.sos has no permit for that repository)"
        )
    finally:
        records.close()
    return ok
