"""The HTTP bridge with the real SDK client, in both protocol eras, against the real kernel."""

from __future__ import annotations

from typing import Any

import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.wire import CATALOG_HASH_META_KEY
from sharedos.kernel.context import AccessContext
from sharedos.toolpolicy import ToolPolicy
from tests.bridge.conftest import DATA, OPEN_POLICY, Runtime, http_client

pytestmark = pytest.mark.anyio

MODES = [("auto", "2026-07-28"), ("legacy", "2025-11-25")]


@pytest.mark.parametrize(("mode", "version"), MODES)
async def test_lists_exactly_the_turn_catalogue(
    runtime: Runtime, alice: AccessContext, mode: str, version: str
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        expected = sorted(turn.catalog.names)
        async with http_client(turn.url, turn.token, mode=mode) as client:
            assert client.protocol_version == version
            listed = await client.list_tools()
    names = sorted(t.name for t in listed.tools)
    assert names == expected
    assert "files.read" in names and "slow.wait" in names
    # the list carries the turn's catalogHash, fixed when the turn opened
    assert (listed.meta or {}).get(CATALOG_HASH_META_KEY) == turn.catalog_hash
    assert len(turn.catalog_hash) == 64


@pytest.mark.parametrize(("mode", "version"), MODES)
async def test_allowed_denied_unknown_and_invalid_calls(
    runtime: Runtime, alice: AccessContext, mode: str, version: str
) -> None:
    async with (
        open_turn(runtime.host, alice, OPEN_POLICY) as turn,
        http_client(turn.url, turn.token, mode=mode) as client,
    ):
        ok = await client.call_tool("files.read", {"path": "/home/alice/notes.txt"})
        denied = await client.call_tool("files.read", {"path": "/private/secret.txt"})
        unknown = await client.call_tool("files.exfiltrate", {"path": "/private/secret.txt"})
        malformed = await client.call_tool("has space/ü", {})
        invalid = await client.call_tool("files.read", {"path": 42})

    assert not ok.is_error
    assert "notes of alice" in str(ok.content)

    assert denied.is_error
    payload: dict[str, Any] = denied.structured_content or {}
    assert payload["outcome"] == "denied"
    assert payload["reason"] in ("forbidden", "no_matching_permit")
    assert payload["tool"] == "files.read"
    assert payload["resource"] == "/private/secret.txt"
    assert isinstance(payload["ruleIds"], list)
    text = denied.content[0].text  # type: ignore[union-attr]
    assert "policy denial" in text and "files.read" in text and "/private/secret.txt" in text
    assert "retrying the same call will not help" in text

    assert unknown.is_error and (unknown.structured_content or {})["reason"] == "tool_unavailable"
    assert malformed.is_error and (malformed.structured_content or {})["outcome"] == "denied"

    assert invalid.is_error
    assert (invalid.structured_content or {})["outcome"] == "failed"
    assert (invalid.structured_content or {})["reason"] == "invalid_arguments"
    assert "not a policy denial" in invalid.content[0].text  # type: ignore[union-attr]

    # every attempt is in the evidence, with the raw name received
    records = runtime.evidence.query(turn_id=alice.turn_id)
    assert [r.tool for r in records] == [
        "files.read",
        "files.read",
        "files.exfiltrate",
        "has space/ü",
        "files.read",
    ]
    assert [str(r.outcome) for r in records] == [
        "succeeded",
        "denied",
        "denied",
        "denied",
        "failed",
    ]
    assert all(r.catalog_hash == turn.catalog_hash for r in records)


@pytest.mark.parametrize(("mode", "version"), MODES)
async def test_diagnostics_are_recorded_not_decided_on(
    runtime: Runtime, alice: AccessContext, mode: str, version: str
) -> None:
    async with (
        open_turn(runtime.host, alice, OPEN_POLICY) as turn,
        http_client(turn.url, turn.token, mode=mode) as client,
    ):
        await client.call_tool(
            "files.read",
            {"path": "/public/a.txt"},
            meta={
                "claudecode/toolUseId": "toolu_123",
                "callId": "call_9",
                "x-codex-turn-metadata": {"turn_id": "t-1", "model": "m"},
            },
        )
    (record,) = runtime.evidence.query(turn_id=alice.turn_id)
    diag = dict(record.diagnostics or {})
    assert diag["protocolVersion"] == version
    assert diag["clientName"]
    assert diag["aliases"]["claude-code"] == "mcp__sharedos__files_read"
    assert diag["aliases"]["codex"] == {"namespace": "mcp__sharedos", "name": "files_read"}
    assert "sharedos_files_read" in diag["aliases"]["pi"]
    # dsh shows a hashed name when sanitizing changed it; the record predicts it
    assert diag["aliases"]["dsh"] == "mcp__sharedos__files_read_369b5d85e292"
    assert diag["correlation"]["claudecode/toolUseId"] == "toolu_123"
    assert diag["correlation"]["callId"] == "call_9"
    assert diag["correlation"]["x-codex-turn-metadata"]["turn_id"] == "t-1"
    # the call itself carries the canonical name only
    assert record.tool == "files.read"
    # the turn's secret never reaches the record
    assert turn.token is not None and turn.token not in repr(record.to_dict())


async def test_catalogue_follows_the_context(runtime: Runtime) -> None:
    readonly = ToolPolicy(name="readonly", mode="open", managed=("files.read", "files.list"))
    ctx = AccessContext(principal="bob")
    async with (
        open_turn(runtime.host, ctx, readonly) as turn,
        http_client(turn.url, turn.token) as client,
    ):
        names = sorted(t.name for t in (await client.list_tools()).tools)
        # a tool outside the run policy is refused even though it exists in the registry
        write = await client.call_tool("files.write", {"path": "/home/bob/x.txt", "content": "x"})
    assert names == ["files.list", "files.read"]
    assert write.is_error and (write.structured_content or {})["reason"] == "not_in_run_policy"
    assert not (runtime.sandbox / "home" / "bob" / "x.txt").exists()


async def test_portable_names_are_mapped_back_before_the_call(
    runtime: Runtime, alice: AccessContext
) -> None:
    async with (
        open_turn(runtime.host, alice, OPEN_POLICY, portable_names=True) as turn,
        http_client(turn.url, turn.token) as client,
    ):
        names = sorted(t.name for t in (await client.list_tools()).tools)
        ok = await client.call_tool("files_dread", {"path": "/public/a.txt"})
    assert "files_dread" in names and "files.read" not in names
    assert not ok.is_error
    (record,) = runtime.evidence.query(turn_id=alice.turn_id)
    assert record.tool == "files.read"
    assert (record.diagnostics or {})["portableName"] == "files_dread"


async def test_an_unlisted_tool_called_by_its_portable_name_is_that_tool_refused_not_listed(
    runtime: Runtime,
) -> None:
    """bob's catalogue lists no files.delete (no permit): called as ``files_ddelete``, the
    portable name it would be published under, it is the call of files.delete refused
    ``not_in_turn_catalog`` (its namespace recorded, as by its canonical name), not a
    call of a tool the host has not: a replay under a policy that lists it (and lets it
    run) finds the change. A canonical name decoding to no tool is passed as is."""
    from sharedos.evidence.replay import replay
    from sharedos.policy import compile_sources

    bob = AccessContext(principal="bob")
    async with (
        open_turn(runtime.host, bob, OPEN_POLICY, portable_names=True) as turn,
        http_client(turn.url, turn.token) as client,
    ):
        names = {t.name for t in (await client.list_tools()).tools}
        gone = await client.call_tool("files_ddelete", {"path": "/public/a.txt"})
        odd = await client.call_tool("no_dsuch", {})
    assert "files_ddelete" not in names
    assert (gone.structured_content or {})["reason"] == "not_in_turn_catalog"
    assert (odd.structured_content or {})["reason"] == "tool_unavailable"
    deleted, unknown = runtime.evidence.query(turn_id=bob.turn_id)
    assert (deleted.tool, deleted.namespace) == ("files.delete", "files")
    assert (deleted.diagnostics or {})["portableName"] == "files_ddelete"
    assert (unknown.tool, unknown.namespace) == ("no_dsuch", None)
    text = (DATA / "files.sos").read_text() + '\npermit delete on "/public/**"\n'
    new = compile_sources([("files.sos", text)])
    report = replay([deleted, unknown], new)
    assert report.changed and [g.kind for g in report.groups] == ["widened"]
