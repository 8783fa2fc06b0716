"""Refusals every conforming client accepts, whatever outputSchema the tool declares.

The TypeScript SDK (1.32) and MCP Inspector (2.12) check a result's
``structuredContent`` against the tool's ``outputSchema`` even when
``isError`` is true; a refusal payload there turned every refusal of such a
tool into a protocol error (Inspector: ``data must have required property
'content'``; TS SDK: ``McpError -32602``). A refusal of such a tool now carries
no ``structuredContent``; its payload is a JSON text block after the sentence.
Measured here with the real clients against built-in and brokered tools
(server-filesystem) over HTTP in both protocol eras and over stdio.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sharedos.bridge import open_turn
from tests.bridge.conftest import http_client
from tests.clients.conftest import Clients
from tests.clients.world import StrictWorld, strict_world

pytestmark = pytest.mark.anyio


def texts(result: dict[str, Any]) -> list[str]:
    """The text blocks of a wire result."""
    return [b.get("text", "") for b in result.get("content", []) if b.get("type") == "text"]


def check(call: dict[str, Any], result: dict[str, Any], where: str) -> None:
    """One wire result against what its call must get (denied/failed told apart)."""
    expected = call["outcome"]
    said = "\n".join(texts(result))
    if expected == "succeeded":
        assert not result.get("isError"), (where, call, result)
        assert isinstance(result.get("structuredContent"), dict), (where, call, result)
        return
    assert result.get("isError") is True, (where, call, result)
    # the refusal carries no payload a schema-validating client would reject ...
    assert "structuredContent" not in result, (where, call, result)
    # ... and stays model-visible: the sentence, then the payload as JSON text
    if (
        call["arguments"].get("path", "").__class__ is str
        and "missing" in call["arguments"]["path"]
    ):
        assert "missing.txt" in said, (where, result)  # the upstream's own error, passed through
        return
    payload = json.loads(texts(result)[-1])
    assert payload["outcome"] == expected, (where, payload)
    marker = "SharedOS policy denial" if expected == "denied" else "SharedOS tool failure"
    assert marker in texts(result)[0], (where, result)


async def _python_sdk(world: StrictWorld, url: str, token: str, mode: str) -> list[Any]:
    out = []
    async with http_client(url, token, mode=mode) as client:
        await client.list_tools()
        for call in world.calls():
            result = await client.call_tool(call["name"], call["arguments"])
            out.append(result.model_dump(by_alias=True, mode="json", exclude_none=True))
    return out


async def test_refusals_reach_every_client_over_http(clients: Clients, tmp_path: Path) -> None:
    async with strict_world(tmp_path) as world:
        env = world.env
        ctx = env.context("alice")
        tool_policy = env.policy.tool_policies["run"]
        async with env.broker.turn(ctx), open_turn(env.host, ctx, tool_policy) as turn:
            assert turn.url is not None and turn.token is not None
            header = f"Authorization: Bearer {turn.token}"
            calls = world.calls()
            ts = await clients.ts_sdk(
                {
                    "transport": "http",
                    "url": turn.url,
                    "headers": {"Authorization": f"Bearer {turn.token}"},
                    "calls": calls,
                },
                tmp_path,
            )
            inspected: dict[str, list[Any]] = {}
            for era in ("legacy", "modern"):
                inspected[era] = []
                for call in calls:
                    inspected[era].append(
                        await clients.inspector(
                            tmp_path,
                            turn.url,
                            "--header",
                            header,
                            "--protocol-era",
                            era,
                            "--format",
                            "json",
                            "--method",
                            "tools/call",
                            "--tool-name",
                            call["name"],
                            "--tool-args-json",
                            json.dumps(call["arguments"]),
                        )
                    )
            python = {
                mode: await _python_sdk(world, turn.url, turn.token, mode)
                for mode in ("auto", "legacy")
            }
        records = env.records(ctx.turn_id)

    # every client listed the strict schemas (so it validates against them)
    listed = {t["name"]: t["hasOutputSchema"] for t in ts["tools"]}
    assert listed["strict.stat"] and listed["fs.read_text_file"] and listed["fs.get_file_info"]
    # the TypeScript SDK accepted every answer as a result: no McpError
    assert "fatal" not in ts, ts
    for call, got in zip(calls, ts["results"], strict=True):
        assert got["ok"], ("TS SDK threw", call, got)
        check(call, got["result"], "ts-sdk/http")
    # Inspector: exit 0 for a success, 5 for an isError result; never a validation failure
    for era, procs in inspected.items():
        for call, proc in zip(calls, procs, strict=True):
            want = 0 if call["outcome"] == "succeeded" else 5
            assert proc.returncode == want, (era, call, proc.returncode, proc.stdout, proc.stderr)
            check(call, json.loads(proc.stdout)["result"], f"inspector/{era}")
    for mode, results in python.items():
        for call, got in zip(calls, results, strict=True):
            check(call, got, f"python-sdk/{mode}")
    # every call, by every client, was recorded with the right outcome
    per_client = [c["outcome"] for c in calls]
    assert [str(r.outcome) for r in records] == per_client * 5


async def test_refusals_reach_every_client_over_stdio(clients: Clients, tmp_path: Path) -> None:
    """Over stdio the bridge process relays to this host: brokered tools are served too."""
    async with strict_world(tmp_path) as world:
        env = world.env
        ctx = env.context("alice")
        tool_policy = env.policy.tool_policies["run"]
        async with (
            env.broker.turn(ctx),
            open_turn(env.host, ctx, tool_policy, transport="stdio") as turn,
        ):
            assert turn.command is not None
            calls = world.calls()
            ts = await clients.ts_sdk(
                {
                    "transport": "stdio",
                    "command": turn.command[0],
                    "args": turn.command[1:],
                    "calls": calls,
                },
                tmp_path,
            )
            inspected = [
                await clients.inspector(
                    tmp_path,
                    "--format",
                    "json",
                    "--method",
                    "tools/call",
                    "--tool-name",
                    call["name"],
                    "--tool-args-json",
                    json.dumps(call["arguments"]),
                    "--",
                    *turn.command,
                )
                for call in calls
            ]
        records = env.records(ctx.turn_id)

    assert "fatal" not in ts, ts
    listed = {t["name"] for t in ts["tools"]}
    assert {"strict.stat", "fs.read_text_file", "fs.get_file_info"} <= listed
    for call, got in zip(calls, ts["results"], strict=True):
        assert got["ok"], ("TS SDK threw", call, got)
        check(call, got["result"], "ts-sdk/stdio")
    for call, proc in zip(calls, inspected, strict=True):
        want = 0 if call["outcome"] == "succeeded" else 5
        assert proc.returncode == want, (call, proc.returncode, proc.stdout, proc.stderr)
        check(call, json.loads(proc.stdout)["result"], "inspector/stdio")
    assert [str(r.outcome) for r in records] == [c["outcome"] for c in calls] * 2
    # the brokered calls were run by this host (the relay), with the host's trusted context
    assert {r.principal for r in records} == {"alice"}
