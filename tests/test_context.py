"""AccessContext and ToolCall."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sharedos.kernel.context import AccessContext, ToolCall


def test_policy_input_exposes_the_trusted_fields() -> None:
    ctx = AccessContext(principal="alice", roles=("editor",), attributes={"team": "core"})
    assert ctx.policy_input["principal"] == "alice"
    assert ctx.policy_input["roles"] == ["editor"]
    assert ctx.policy_input["attributes"] == {"team": "core"}


def test_cache_key_ignores_the_turn_but_keeps_role_order() -> None:
    a = AccessContext(principal="alice", roles=("a", "b"), turn_id="t1")
    same = AccessContext(principal="alice", roles=("a", "b"), turn_id="t2")
    b = AccessContext(principal="alice", roles=("b", "a"), turn_id="t2")
    c = AccessContext(principal="bob", roles=("a", "b"))
    assert a.cache_key == same.cache_key
    # a condition can read the order (lists compare element-wise)
    assert a.cache_key != b.cache_key
    assert a.cache_key != c.cache_key


def test_context_is_immutable() -> None:
    ctx = AccessContext(principal="alice")
    with pytest.raises(ValidationError):
        ctx.principal = "mallory"  # type: ignore[misc]


def test_principal_rejects_control_characters() -> None:
    with pytest.raises(ValidationError):
        AccessContext(principal="ali\x00ce")


@pytest.mark.parametrize("raw", ["files read", "x" * 200, "ünïcode", "", "a/b"])
def test_tool_call_keeps_any_raw_name(raw: str) -> None:
    # ToolCall.tool is deliberately not narrowed: the kernel must see it to refuse and record it.
    assert ToolCall(tool=raw, arguments={"path": 1}).tool == raw
