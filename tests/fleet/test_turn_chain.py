# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)
"""A turn opened through the real bridge leaves a whole chain: its opening record, its calls, its seal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sharedos.bridge import open_turn
from sharedos.catalog.registry import ToolRegistry
from sharedos.evidence.chain import Signer, load_public_key
from sharedos.evidence.verify import verify_store
from sharedos.kernel.context import AccessContext
from sharedos.kernel.kernel import Kernel
from sharedos.kernel.runtime import RuntimeHost
from sharedos.tools.files import register_files_tools
from tests.bridge.conftest import OPEN_POLICY, compile_rules, http_client, make_sandbox
from tests.evidence.stores import Opener, backend, opener  # noqa: F401  (fixtures)

pytestmark = pytest.mark.anyio


async def test_a_bridged_turn_is_opened_chained_and_sealed(tmp_path: Path, opener: Opener) -> None:
    signer = Signer.generate()
    store = opener(signer=signer)
    registry = ToolRegistry()
    register_files_tools(registry, make_sandbox(tmp_path / "sandbox", ["alice"]))
    host = RuntimeHost(Kernel(compile_rules("files.sos"), registry), store)
    ctx = AccessContext(principal="alice", roles=("user",))
    identity: dict[str, Any] = {"harness": "test", "policyBundleRevision": "r9"}
    async with (
        open_turn(host, ctx, OPEN_POLICY, identity=identity) as turn,
        http_client(turn.url, turn.token) as client,
    ):
        ok = await client.call_tool("files.read", {"path": "/home/alice/notes.txt"})
        denied = await client.call_tool("files.read", {"path": "/private/secret.txt"})
    assert not ok.is_error and denied.is_error
    links = list(store.iter_links(ctx.turn_id))
    kinds = [lk.kind for lk in links]
    assert kinds[0] == "open" and kinds[-1] == "seal"
    assert kinds.count("attempt") == 2 and kinds.count("outcome") == 2
    _, _, catalog_hash, policy_hash, revision, _ = links[0].values
    assert catalog_hash == turn.catalog_hash and policy_hash == host.kernel.policy_hash
    assert revision == "r9"
    key, key_id = load_public_key(signer.public_pem())
    report = verify_store(store, ctx.turn_id, public_keys={key_id: key}, require_seal=True)
    assert report.clean and report.signed == 1, [p.line() for p in report.problems]
