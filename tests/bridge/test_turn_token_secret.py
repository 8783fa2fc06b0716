"""The turn's own bearer token, passed back by the model in a tool argument.

docs/bridge.md: ``turn.token`` is the "per-turn secret ...; never log it"; the
harness output is scrubbed of it (docs/harnesses.md). A harness that can read
it (Pi and dsh take it from ``SHAREDOS_BRIDGE_TOKEN`` in their environment,
which their own shell sees) can pass it into a call. The turn's endpoint hands
the token to the kernel as the call's secret (``turn_secrets``): neither the
evidence record nor the answer may keep it.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sharedos.bridge import open_turn
from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost
from sharedos.policy import compile_paths
from sharedos.resources import shipped_dir
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools
from tests.adversarial.planted import SecretScan

pytestmark = pytest.mark.anyio
RUN = ToolPolicy(name="files", mode=RunMode.OPEN, managed=("files.*",))


async def test_the_turn_token_in_an_argument_is_not_recorded_or_echoed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "home" / "bob").mkdir(parents=True)
    registry = ToolRegistry()
    register_files_tools(registry, root)
    kernel = Kernel(compile_paths([shipped_dir("rules") / "files.sos"]), registry)
    db = tmp_path / "evidence.db"
    store = SqliteEvidenceStore(db)
    host = RuntimeHost(kernel, store)
    async with open_turn(host, AccessContext(principal="bob"), RUN) as turn:
        token = turn.token
        async with (
            httpx2.AsyncClient(headers=turn.headers(), timeout=10) as http,
            Client(streamable_http_client(str(turn.url), http_client=http)) as client,
        ):
            result = await client.call_tool(
                "files.write", {"path": "/home/bob/notes.txt", "content": f"token {token}"}
            )
            missing = await client.call_tool("files.read", {"path": f"/home/bob/{token}"})
    store.close()
    scan = SecretScan(token)
    scan.text("the write's answer", json.dumps(result.model_dump(mode="json")))
    scan.text("the read's answer", json.dumps(missing.model_dump(mode="json")))
    scan.evidence(db)
    scan.assert_clean()


async def test_the_relay_secret_in_an_argument_is_not_recorded_or_echoed(tmp_path: Path) -> None:
    """A stdio turn's equivalent of the token: the relay secret in its turn file, which the
    harness that launches the bridge can read (its own file, 0600 to its own user). The
    host ran relayed calls without it as a turn secret: kept in evidence, echoed."""
    from mcp import StdioServerParameters

    root = tmp_path / "root"
    (root / "home" / "bob").mkdir(parents=True)
    registry = ToolRegistry()
    register_files_tools(registry, root)
    kernel = Kernel(compile_paths([shipped_dir("rules") / "files.sos"]), registry)
    db = tmp_path / "evidence.db"
    store = SqliteEvidenceStore(db)
    host = RuntimeHost(kernel, store)
    async with open_turn(host, AccessContext(principal="bob"), RUN, transport="stdio") as turn:
        assert turn.command is not None
        turn_file = Path(turn.command[turn.command.index("--turn") + 1])
        secret = json.loads(turn_file.read_text(encoding="utf-8"))["relay"]["secret"]
        params = StdioServerParameters(command=turn.command[0], args=list(turn.command[1:]))
        async with Client(params) as client:
            result = await client.call_tool(
                "files.write", {"path": "/home/bob/notes.txt", "content": f"secret {secret}"}
            )
            missing = await client.call_tool("files.read", {"path": f"/home/bob/{secret}"})
    store.close()
    scan = SecretScan(secret)
    scan.text("the write's answer", json.dumps(result.model_dump(mode="json")))
    scan.text("the read's answer", json.dumps(missing.model_dump(mode="json")))
    scan.evidence(db)
    scan.assert_clean()
