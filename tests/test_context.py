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


def test_a_copy_with_other_fields_is_decided_as_itself() -> None:
    """``model_copy(update=...)`` kept the original's cached ``policy_input`` and
    ``cache_key``: a copy without the admin role was still decided as an admin (and its
    decisions cached under the admin's key), a copy for another turn read the old turn."""
    from sharedos.policy import compile_source

    policy = compile_source(
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'permit read on "/data/**" when "admin" in context.roles\n',
        "p.sos",
    )
    admin = AccessContext(principal="alice", roles=("admin",), turn_id="t1")

    def allowed(ctx: AccessContext) -> bool:
        d = policy.decide(
            "files.read", {"path": "/data/x"}, ctx.policy_input, context_key=ctx.cache_key
        )
        return d.allowed

    assert allowed(admin) and allowed(admin)
    guest = admin.model_copy(update={"roles": ()})
    assert guest.roles == () and guest.policy_input["roles"] == []
    assert guest.cache_key == AccessContext(principal="alice").cache_key
    assert not allowed(guest)
    later = admin.model_copy(update={"turn_id": "t2"})
    assert later.policy_input["turn_id"] == "t2" and later.cache_key == admin.cache_key
    # validated like any context: no unchecked principal or non-finite attribute
    with pytest.raises(ValidationError):
        admin.model_copy(update={"principal": "a\x00b"})
    with pytest.raises(ValidationError):
        admin.model_copy(update={"attributes": {"n": float("nan")}})
    assert admin.model_copy(deep=True).policy_input == admin.policy_input


def test_an_integer_python_will_not_spell_is_refused_at_construction() -> None:
    """An attribute of more than 4,300 digits made a context whose ``cache_key`` (and
    evidence record) could not be written: every call of it failed at its decision
    with an internal error and no evidence row. It is refused here, like NaN."""
    with pytest.raises(ValidationError, match="more digits"):
        AccessContext(principal="alice", attributes={"n": [10**5000]})
    fine = AccessContext(principal="alice", attributes={"n": 10**4000})
    assert str(10**4000) in fine.cache_key
