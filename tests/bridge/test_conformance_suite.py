"""The official MCP conformance suite (``@modelcontextprotocol/conformance``) against real bridges.

The suite cannot send headers, so it talks to the bridge through a loopback
proxy that injects the turn's token (``authproxy.py``); the bridge itself
always requires its token. Generic scenarios run against a bridge publishing
the files tools; the whole active suite runs against a bridge whose catalogue
is the conformance test namespace (ordinary managed tools, authorized by
``tests/data/bridge/conformance.sos``), with a baseline of expected failures
that lists only out-of-scope scenarios (resources, prompts, completion).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import anyio
import pytest

from sharedos.bridge import open_turn
from sharedos.catalog.registry import ToolRegistry
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.kernel.context import AccessContext
from sharedos.kernel.kernel import Kernel
from sharedos.kernel.runtime import RuntimeHost
from sharedos.testing.conformance_tools import conformance_tools
from tests.bridge.authproxy import AuthInjectingProxy
from tests.bridge.conftest import DATA, OPEN_POLICY, NodeTools, Runtime, compile_rules

pytestmark = pytest.mark.anyio

GENERIC = [
    "server-initialize",
    "ping",
    "tools-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
]
BASELINE = DATA / "conformance-baseline.yml"


#: Scenarios of the active suite that must pass against the conformance-namespace bridge.
ACTIVE_MUST_PASS = {
    "server-initialize", "logging-set-level", "ping", "tools-list", "tools-call-simple-text",
    "tools-call-image", "tools-call-audio", "tools-call-embedded-resource", "tools-call-mixed-content",
    "tools-call-with-logging", "tools-call-error", "tools-call-with-progress", "tools-call-sampling",
    "tools-call-elicitation", "elicitation-sep1034-defaults", "server-sse-multiple-streams",
    "elicitation-sep1330-enums", "dns-rebinding-protection",
}  # fmt: skip


def _summary(stdout: str) -> tuple[set[str], set[str]]:
    """(passed, failed) scenario names from the suite's SUMMARY block."""
    passed = set(re.findall(r"^✓ ([a-z0-9-]+):", stdout, re.M))
    failed = set(re.findall(r"^✗ ([a-z0-9-]+):", stdout, re.M))
    return passed, failed


async def _run_suite(
    node: NodeTools, url: str, out_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    cmd = [node.node, str(node.conformance), "server", "--url", url, "-o", str(out_dir), *args]
    return await anyio.to_thread.run_sync(
        lambda: subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    )


async def test_generic_scenarios_pass_against_a_files_bridge(
    node_tools: NodeTools, runtime: Runtime, alice: AccessContext, tmp_path: Path
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.port is not None and turn.token is not None
        async with AuthInjectingProxy(turn.port, turn.token) as url:
            for scenario in GENERIC:
                proc = await _run_suite(
                    node_tools, url, tmp_path / scenario, "--scenario", scenario
                )
                assert proc.returncode == 0, (
                    f"{scenario} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
                )


async def test_active_suite_against_the_conformance_namespace(
    node_tools: NodeTools, tmp_path: Path
) -> None:
    registry = ToolRegistry(conformance_tools())
    policy = compile_rules("conformance.sos")
    evidence = SqliteEvidenceStore(tmp_path / "evidence.db")
    host = RuntimeHost(Kernel(policy, registry), evidence)
    tool_policy = policy.tool_policies["conformance"]
    ctx = AccessContext(principal="conformance-suite", roles=("conformance",))
    async with open_turn(host, ctx, tool_policy) as turn:
        assert turn.port is not None and turn.token is not None
        assert len(turn.catalog.names) == 14
        async with AuthInjectingProxy(turn.port, turn.token) as url:
            proc = await _run_suite(
                node_tools, url, tmp_path / "out", "--expected-failures", str(BASELINE)
            )
            schema = await _run_suite(
                node_tools, url, tmp_path / "schema", "--scenario", "json-schema-2020-12"
            )
    assert proc.returncode == 0, (
        f"conformance suite failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    )
    passed, failed = _summary(proc.stdout)
    assert passed >= ACTIVE_MUST_PASS, f"not passing: {sorted(ACTIVE_MUST_PASS - passed)}"
    baseline = set(re.findall(r"^  - ([a-z0-9-]+)$", BASELINE.read_text(), re.M))
    assert failed <= baseline, f"unexpected failures: {sorted(failed - baseline)}"
    # json-schema-2020-12 sits in the suite's pending set; it must pass too
    assert schema.returncode == 0, schema.stdout[-3000:]
    # every tools/call the suite made went through the kernel and is in the evidence
    records = evidence.query(turn_id=ctx.turn_id)
    called = {r.tool for r in records}
    assert {
        "test_simple_text",
        "test_error_handling",
        "test_sampling",
        "test_elicitation",
    } <= called
    assert all(r.principal == "conformance-suite" for r in records)


async def test_the_namespace_is_authorized_like_any_other(tmp_path: Path) -> None:
    """Without the role the rules require, the conformance tools are neither listed nor callable."""
    from tests.bridge.conftest import http_client

    registry = ToolRegistry(conformance_tools())
    policy = compile_rules("conformance.sos")
    evidence = SqliteEvidenceStore(tmp_path / "evidence.db")
    host = RuntimeHost(Kernel(policy, registry), evidence)
    ctx = AccessContext(principal="mallory")
    async with open_turn(host, ctx, policy.tool_policies["conformance"]) as turn:
        assert turn.url is not None
        async with http_client(turn.url, turn.token) as client:
            listed = (await client.list_tools()).tools
            refused = await client.call_tool("test_simple_text", {})
    assert listed == []
    assert refused.is_error and (refused.structured_content or {})["outcome"] == "denied"
    assert [str(r.outcome) for r in evidence.query(turn_id=ctx.turn_id)] == ["denied"]
