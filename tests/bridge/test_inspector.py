"""The MCP Inspector CLI (``@modelcontextprotocol/inspector --cli``) against a bridge, with the token header."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import anyio
import pytest

from sharedos.bridge import open_turn
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, NodeTools, Runtime

pytestmark = pytest.mark.anyio


async def _inspector(
    node: NodeTools, tmp: Path, url: str, *args: str
) -> subprocess.CompletedProcess[str]:
    cmd = [node.node, str(node.inspector), "--cli", "--connect-timeout", "90000", url, *args]
    env = {**os.environ, "MCP_CATALOG_PATH": str(tmp / "catalog.json"), "HOME": str(tmp)}
    return await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            cmd, capture_output=True, text=True, timeout=120, check=False, env=env
        )
    )


def _json(text: str) -> dict[str, object]:
    start = text.index("{")
    parsed: dict[str, object] = json.loads(text[start:])
    return parsed


async def test_inspector_lists_and_calls(
    node_tools: NodeTools, runtime: Runtime, alice: AccessContext, tmp_path: Path
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        header = ["--header", f"Authorization: Bearer {turn.token}"]
        listed = await _inspector(node_tools, tmp_path, turn.url, *header, "--method", "tools/list")
        ok = await _inspector(
            node_tools,
            tmp_path,
            turn.url,
            *header,
            "--method",
            "tools/call",
            "--tool-name",
            "files.read",
            "--tool-arg",
            "path=/public/a.txt",
        )
        denied = await _inspector(
            node_tools,
            tmp_path,
            turn.url,
            *header,
            "--method",
            "tools/call",
            "--tool-name",
            "files.read",
            "--tool-arg",
            "path=/private/secret.txt",
        )
        unauthenticated = await _inspector(
            node_tools, tmp_path, turn.url, "--stored-auth-only", "--method", "tools/list"
        )

    assert listed.returncode == 0, listed.stderr
    names = sorted(t["name"] for t in _json(listed.stdout)["tools"])  # type: ignore[attr-defined,index]
    assert names == sorted(turn.catalog.names)

    assert ok.returncode == 0, ok.stderr
    assert "public text" in ok.stdout

    # a refusal is a result (isError), not a transport error: Inspector exit code 5
    assert denied.returncode == 5, denied.stdout + denied.stderr
    assert "policy denial" in denied.stdout and "/private/secret.txt" in denied.stdout

    assert unauthenticated.returncode != 0
    assert [str(r.outcome) for r in runtime.evidence.query(turn_id=alice.turn_id)] == [
        "succeeded",
        "denied",
    ]


async def test_inspector_follows_next_cursor(
    node_tools: NodeTools, runtime: Runtime, alice: AccessContext, tmp_path: Path
) -> None:
    """Two tools a page: the Inspector walks every page, and calls a tool of the last one."""
    from sharedos.bridge.limits import TransportLimits

    limits = TransportLimits(list_page_size=2)
    async with open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn:
        assert turn.url is not None and turn.diagnostics["pages"] >= 3
        header = ["--header", f"Authorization: Bearer {turn.token}"]
        listed = await _inspector(node_tools, tmp_path, turn.url, *header, "--method", "tools/list")
        last = sorted(turn.catalog.names)[-1]
        called = await _inspector(
            node_tools,
            tmp_path,
            turn.url,
            *header,
            "--method",
            "tools/call",
            "--tool-name",
            last,
            "--tool-arg",
            "seconds=0",
        )
    assert listed.returncode == 0, listed.stderr
    names = sorted(t["name"] for t in _json(listed.stdout)["tools"])  # type: ignore[attr-defined,index]
    assert names == sorted(turn.catalog.names)
    assert last == "slow.wait"
    assert called.returncode == 0, called.stderr
    assert "done" in called.stdout
