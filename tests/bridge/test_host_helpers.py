"""Host-side helpers: BridgeHost, the harness command line and MCP config, the CLI's usage errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.bridge import BridgeHost, StdioLaunch, harness_mcp_config
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import DATA, OPEN_POLICY, Runtime, http_client

pytestmark = pytest.mark.anyio


async def test_bridge_host_opens_http_and_stdio_turns(
    runtime: Runtime, alice: AccessContext
) -> None:
    launch = StdioLaunch(
        rules=(DATA / "files.sos", DATA / "slow.sos"),
        evidence_db=runtime.evidence_path,
        sandbox_root=runtime.sandbox,
    )
    host = BridgeHost(runtime.host, stdio=launch, server_name="shared.os")
    async with host.open_turn(alice, OPEN_POLICY) as turn:
        assert turn.url is not None and turn.url.startswith("http://127.0.0.1:")
        async with http_client(turn.url, turn.token) as client:
            await client.call_tool("files.read", {"path": "/public/a.txt"})
    (record,) = runtime.evidence.query(turn_id=alice.turn_id)
    # aliases follow the server name the harness is configured with
    assert (record.diagnostics or {})["aliases"]["claude-code"] == "mcp__shared_os__files_read"

    bob = AccessContext(principal="bob")
    async with host.open_turn(bob, OPEN_POLICY, transport="stdio") as turn:
        assert turn.turn_file is not None and turn.command is not None
        config = harness_mcp_config(turn.turn_file, server_name="shared.os")
        entry = config["mcpServers"]["shared.os"]
        assert [entry["command"], *entry["args"]] == turn.command
        assert turn.command[-3:] == ["--stdio", "--turn", str(turn.turn_file)]
        assert turn.turn_file.exists()
    assert not turn.turn_file.exists()


def test_stdio_launch_needs_policy_and_sandbox(tmp_path: Path) -> None:
    """A standalone stdio bridge builds its own runtime: it needs policy, evidence, sandbox."""
    with pytest.raises(ValueError, match="rules"):
        StdioLaunch(relay=False, evidence_db=tmp_path / "e.db", sandbox_root=tmp_path)
    with pytest.raises(ValueError, match="sandbox_root"):
        StdioLaunch(relay=False, rules=(DATA / "files.sos",), evidence_db=tmp_path / "e.db")
    with pytest.raises(ValueError, match="evidence_db"):
        StdioLaunch(relay=False, rules=(DATA / "files.sos",), sandbox_root=tmp_path)
    # a relayed one (the default) needs none of it: the host's own runtime serves the turn
    assert StdioLaunch().relay is True


def test_cli_serves_only_stdio() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sharedos.cli.main import main; main()",
            "bridge",
            "--turn",
            "x.json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "only --stdio" in proc.stderr and "Traceback" not in proc.stderr
