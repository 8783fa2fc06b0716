"""One refusal writer (issue 15 move 1): the words a scripted-shape driver delivers to a model
and the words an MCP client receives through the turn bridge are the same bytes.

Both columns are driven through their public APIs against one real runtime:
``HarnessDriver`` with a ``ScriptedModel`` in each vendor shape (everything
crosses as wire JSON), and the official SDK ``Client`` against a
``TurnEndpoint``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from sharedos.bridge.server import TurnEndpoint
from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.harness.driver import HarnessDriver, PlannedCall, ScriptedModel
from sharedos.harness.shapes import SHAPE_NAMES, get_shape
from sharedos.kernel import Kernel, RuntimeHost
from sharedos.tools import register_files_tools

from .conftest import ALICE, ALL

pytestmark = pytest.mark.anyio

ROWS = {
    "forbidden": ("files.read", {"path": "/private/a.txt"}),
    "no_matching_permit": ("files.read", {"path": "/etc/passwd"}),
    "unresolvable_resource": ("files.read", {"path": "/../etc/passwd"}),
    "invalid_arguments": ("files.read", {"path": 7}),
    "handler_error": ("files.read", {"path": "/public/missing.txt"}),
    "tool_unavailable": ("files.nope", {"path": "/public/a.txt"}),
}


def _text(blocks: Any) -> str:
    (block,) = blocks
    return str(block["text"] if isinstance(block, dict) else block.text)


@pytest.fixture
def runtime(policy: Any, sandbox: Path, tmp_path: Path) -> RuntimeHost:
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    return RuntimeHost(Kernel(policy, registry), SqliteEvidenceStore(tmp_path / "one.db"))


@pytest.mark.parametrize("shape_name", SHAPE_NAMES)
async def test_scripted_and_mcp_columns_deliver_byte_identical_refusals(
    runtime: RuntimeHost, shape_name: str
) -> None:
    catalog = runtime.kernel.list_tools(ALICE, ALL)
    shape = get_shape(shape_name)
    plan = [
        PlannedCall(key=row, call_id=f"call_{row}", tool=tool, arguments=args)
        for row, (tool, args) in ROWS.items()
    ]
    model = ScriptedModel(shape=shape, plan=plan, model_name="scripted", batch=2)
    driver = HarnessDriver(shape, runtime, declared_model="scripted")
    await driver.run_turn(model, ALICE, ALL, catalog, "exercise the refusals")
    scripted = {row: _text(model.seen[f"call_{row}"].content) for row in ROWS}

    endpoint = TurnEndpoint(runtime_host=runtime, context=ALICE, tool_policy=ALL, catalog=catalog)
    mcp: dict[str, str] = {}
    payloads: dict[str, dict[str, Any]] = {}
    async with Client(endpoint.build_server()) as client:
        for row, (tool, args) in ROWS.items():
            result = await client.call_tool(tool, args)
            assert result.is_error, row
            mcp[row] = _text(result.content)
            payloads[row] = dict(result.structured_content or {})

    for row in ROWS:
        assert scripted[row].encode() == mcp[row].encode(), row
        assert payloads[row]["message"] == mcp[row]
        assert payloads[row]["reason"] == row
    # and what the kernel returned to the driver is what the model decoded from the wire
    for exchange in driver.last_exchanges:
        assert _text(exchange.result.content) == _text(model.seen[exchange.call.call_id].content)
