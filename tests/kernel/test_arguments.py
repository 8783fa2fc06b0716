"""Check 4 of a call, the arguments: shapes the policy and an upstream would read apart."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import Kernel, RuntimeHost, ToolCall
from sharedos.kernel.arguments import shape_problem
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.outcomes import Outcome, ReasonCode
from tests.timing import cpu_bound

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


@pytest.mark.anyio
async def test_the_argument_walks_of_a_call_with_a_million_values_cost_little(
    host: RuntimeHost,
) -> None:
    """A 4 MiB body holds some two million JSON values, and the kernel walks a call's
    arguments on the event loop every turn of the host process shares: the shape check
    and the count of values the schema check budgets by spent about 1 us per value
    (a tuple and two ``isinstance`` calls, one of them an ABC check, each), so one such
    call over HTTP froze every turn's loop for 5-6 s. Now a container's scalars are
    judged where it is read (measured: 0.87 s -> 0.16 s of CPU for a million)."""
    args = {"path": "/public/a.txt", "junk": [1] * 1_000_000}  # refused: no 'junk' in the schema
    started = time.process_time()
    result = await host.invoke_tool(ToolCall(tool="files.read", arguments=args), ALICE, ALL)
    spent = time.process_time() - started
    assert result.reason is ReasonCode.INVALID_ARGUMENTS
    assert spent < cpu_bound(0.5), f"{spent:.2f} s of CPU for one call"


def test_the_shape_walk_still_finds_what_it_looks_for_beside_many_scalars() -> None:
    many: list[Any] = ["x", 1, True, None, 2.5] * 1000
    assert shape_problem({"a": many}) is None
    assert "non-finite" in (shape_problem({"a": [*many, float("nan")]}) or "")
    assert "non-finite" in (shape_problem(float("-inf")) or "")
    assert "nest deeper than 3" in (shape_problem({"a": [[[1]]]}, 3) or "")
    assert shape_problem({"a": [[1]]}, 3) is None  # scalars past the limit are no nesting
    assert "differ only by case" in (shape_problem({"a": [*many, {"k": 1, "K": 2}]}) or "")
