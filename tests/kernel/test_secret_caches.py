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

import pytest

from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.redaction import Redactor

from .conftest import ALL

pytestmark = pytest.mark.anyio


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
