"""``to_wire_result``: the dict fast path says on the wire exactly what the model says."""

from __future__ import annotations

from typing import Any

import pytest

from sharedos.bridge.results import to_call_tool_result, to_wire_result
from sharedos.kernel.runtime import ToolResult
from sharedos.outcomes import Outcome, ReasonCode


def _result(content: list[Any], structured: Any = None, **kw: Any) -> ToolResult:
    fields: dict[str, Any] = {
        "call_id": "call-1",
        "tool": "files.read",
        "outcome": Outcome.SUCCEEDED,
        "reason": None,
        "decision": None,
        "content": content,
        "structured": structured,
        "error": None,
        "evidence_seq": 1,
    }
    fields.update(kw)
    return ToolResult(**fields)


def _model_wire(result: ToolResult) -> dict[str, Any]:
    return to_call_tool_result(result).model_dump(by_alias=True, mode="json", exclude_none=True)


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "text", "text": "hello"}],
        [{"type": "text", "text": "a"}, {"type": "text", "text": "ünïcode ✓"}],
    ],
)
def test_text_only_success_is_the_models_wire_dict(content: list[Any]) -> None:
    result = _result(content)
    wire = to_wire_result(result)
    assert isinstance(wire, dict)
    assert wire == _model_wire(result)
    wire["content"][0]["text"] = "changed"  # the answer shares nothing with the kernel's result
    assert result.content == content


@pytest.mark.parametrize(
    "result",
    [
        _result([{"type": "text", "text": "x"}], structured={"a": 1}),
        _result([{"type": "image", "data": "aGk=", "mimeType": "image/png"}]),
        _result([{"type": "text", "text": "x", "annotations": {"priority": 1}}]),
        _result([]),
        _result(
            [{"type": "text", "text": "no"}],
            outcome=Outcome.DENIED,
            reason=ReasonCode.NO_MATCHING_PERMIT,
        ),
    ],
)
def test_everything_else_takes_the_model_path(result: ToolResult) -> None:
    assert not isinstance(to_wire_result(result), dict)


def test_a_lone_surrogate_is_still_refused_not_put_on_the_wire() -> None:
    with pytest.raises(ValueError, match="lone surrogate"):
        to_wire_result(_result([{"type": "text", "text": "bad \ud800"}]))
