"""Check 4 of a call, the arguments: shapes the policy and an upstream would read apart."""

from __future__ import annotations

from typing import Any

import pytest

from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import Kernel, RuntimeHost, ToolCall
from sharedos.kernel.arguments import shape_problem
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.outcomes import Outcome, ReasonCode

from .conftest import ALICE, ALL, misc_tool


@pytest.mark.parametrize(
    "args",
    [
        {"path": "/public/a.txt", "PATH": "/private/a.txt"},
        {"path": "/x", "options": {"mode": "r", "Mode": "w"}},
        {"path": "/x", "list": [{"id": 1}, {"key": "a", "\u212aey": "b"}]},  # Kelvin sign
        {"path": "/x", "flags": {"strict": True, "\u017ftrict": False}},  # long s
    ],
    ids=["top-level", "nested", "kelvin-sign", "long-s"],
)
def test_keys_that_differ_only_by_case_are_a_shape_problem(args: dict[str, Any]) -> None:
    assert shape_problem(args) == "arguments hold an object with two keys that differ only by case"


def test_distinct_keys_are_no_shape_problem() -> None:
    assert shape_problem({"path": "/x", "paths": ["/y"], "opts": {"a": 1, "b": {"a": 2}}}) is None


@pytest.mark.anyio
async def test_a_call_whose_keys_differ_only_by_case_is_refused_before_the_decision(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    """``path`` and ``PATH``: the policy decides on ``args.path``, while an upstream filling
    a Go struct would read the last of the two. The call is refused as invalid and
    recorded; the handler never runs. A call with only distinct keys still runs."""
    ran: list[dict[str, Any]] = []

    def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        ran.append(args)
        return HandlerResult.text("ran")

    registry = ToolRegistry([misc_tool(handler)])  # its schema admits other keys
    host = RuntimeHost(Kernel(kernel.policy, registry), store, handler_timeout_s=2.0)
    args = {"path": "/public/a.txt", "PATH": "/private/a.txt"}
    result = await host.invoke_tool(ToolCall(tool="misc.echo", arguments=args), ALICE, ALL)
    assert result.is_error and result.reason is ReasonCode.INVALID_ARGUMENTS
    assert "differ only by case" in (result.error or "")
    assert ran == []
    (record,) = store.query(call_id=result.call_id)
    assert record.outcome is Outcome.FAILED and record.reason is ReasonCode.INVALID_ARGUMENTS
    fine = await host.invoke_tool(
        ToolCall(tool="misc.echo", arguments={"path": "/public/a.txt", "mode": "r"}), ALICE, ALL
    )
    assert not fine.is_error and len(ran) == 1
