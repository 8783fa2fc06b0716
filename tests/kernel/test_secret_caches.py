"""What the authorizer keeps of the redactors it builds, across turns and tools of one host.

A redactor holds every encoding of its secrets and their cuts (some 150 KB for a
turn's bearer token) and takes milliseconds to build: a host must neither keep one
per closed turn nor build and keep one per tool that shares a credential set.
"""

from __future__ import annotations

import gc
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.redaction import Redactor

from .conftest import ALL, echo_handler

pytestmark = pytest.mark.anyio

CREDENTIAL = "cred-shared-by-every-tool-0123456789"


def _redactors() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is Redactor)


@pytest.mark.parametrize("host_secrets", [(), ("host-secret-abcdef",)])
async def test_a_closed_turns_secrets_are_not_kept_by_the_host(
    kernel: Kernel, tmp_path: Path, host_secrets: tuple[str, ...]
) -> None:
    host = RuntimeHost(kernel, SqliteEvidenceStore(tmp_path / "e.db"), host_secrets=host_secrets)
    before = _redactors()
    for i in range(20):
        token = secrets.token_urlsafe(32)
        turn_secrets = Redactor((token,))  # what a bridge turn holds while it is open
        context = AccessContext(principal="alice", turn_id=f"turn-{i}")
        for _ in range(2):  # the turn's second call reuses the union
            result = await host.invoke_tool(
                ToolCall(tool="misc.echo", arguments={"path": f"/p/{token}"}),
                context,
                ALL,
                turn_secrets=turn_secrets,
            )
            assert token not in json.dumps(result.to_mcp())
        del turn_secrets  # the turn closes
    kept = _redactors() - before
    assert kept <= 1, f"{kept} redactors kept after 20 turns closed"


async def test_tools_sharing_a_credential_share_one_redactor(tmp_path: Path, policy: Any) -> None:
    n = 60
    registry = ToolRegistry(
        [
            ToolDefinition(
                name=f"misc.t{i}",
                description="A tool of a large upstream catalogue.",
                input_schema={"type": "object"},
                handler=echo_handler,
                credentials={"api": SecretStr(CREDENTIAL)},
            )
            for i in range(n)
        ]
    )
    db = tmp_path / "e.db"
    host = RuntimeHost(
        Kernel(policy, registry), SqliteEvidenceStore(db), host_secrets=["hostkey-1"]
    )
    context = AccessContext(principal="alice", turn_id="turn-many")
    await host.invoke_tool(ToolCall(tool="misc.t0", arguments={"path": "/a"}), context, ALL)
    before = _redactors()
    for i in range(n):
        await host.invoke_tool(
            ToolCall(tool=f"misc.t{i}", arguments={"path": f"/a/{CREDENTIAL}"}), context, ALL
        )
    built = _redactors() - before
    assert built <= 2, f"{built} redactors kept for {n} tools sharing one credential"
    records = SqliteEvidenceStore(db, read_only=True).query()
    assert len(records) == n + 1
    assert CREDENTIAL not in json.dumps([r.to_dict() for r in records])
