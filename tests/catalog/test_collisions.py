"""Name collisions are detected and reported, never resolved silently."""

from __future__ import annotations

import pytest

from sharedos.catalog import (
    ToolDefinition,
    ToolNameCollisionError,
    ToolRegistry,
    check_name_collisions,
    find_name_collisions,
)
from sharedos.context import AccessContext
from sharedos.names import PortableNameMap, portable_tool_name


def make(name: str) -> ToolDefinition:
    return ToolDefinition(name=name, description="d", inputSchema={"type": "object"})


def test_files_read_and_files_read_underscore_collide_under_harness_sanitization() -> None:
    found = find_name_collisions(["files.read", "files_read", "github.search"])
    assert [(c.scheme, c.mapped, c.names) for c in found] == [
        ("harness_sanitized", "files_read", ("files.read", "files_read"))
    ]
    assert "Claude Code silently drops" in found[0].describe()


def test_three_way_collision_is_one_report() -> None:
    found = find_name_collisions(["a.b", "a_b", "a.b.c", "a_b_c", "a.b_c"])
    groups = {c.mapped: c.names for c in found}
    assert groups == {"a_b": ("a.b", "a_b"), "a_b_c": ("a.b.c", "a.b_c", "a_b_c")}


def test_portable_names_stay_distinct_where_sanitization_collides() -> None:
    names = ["files.read", "files_read"]
    assert portable_tool_name(names[0]) != portable_tool_name(names[1])
    assert not [c for c in find_name_collisions(names) if c.scheme == "portable"]
    mapping = PortableNameMap(names)
    for name in names:
        assert mapping.to_canonical(mapping.to_portable(name)) == name


def test_check_raises_with_every_collision() -> None:
    with pytest.raises(ToolNameCollisionError) as err:
        check_name_collisions(["files.read", "files_read", "x.y", "x_y"])
    assert len(err.value.collisions) == 2
    check_name_collisions(["files.read", "files.write"])


def test_registry_refuses_a_colliding_registration_and_keeps_the_first() -> None:
    registry = ToolRegistry([make("files.read")])
    with pytest.raises(ToolNameCollisionError, match="files_read"):
        registry.register(make("files_read"))
    assert [t.name for t in registry.tools()] == ["files.read"]


def test_registry_refuses_a_colliding_batch_atomically() -> None:
    registry = ToolRegistry()
    with pytest.raises(ToolNameCollisionError):
        registry.register_many([make("ok.one"), make("a.b"), make("a_b")])
    assert len(registry) == 0


class _Provider:
    """Contributes a per-context tool list (what a brokered upstream's turn snapshot is)."""

    def __init__(self, by_principal: dict[str, list[ToolDefinition]]) -> None:
        self.by_principal = by_principal

    def tools_for(self, context: AccessContext) -> list[ToolDefinition]:
        return self.by_principal.get(context.principal, [])


def test_a_provider_tool_that_collides_is_refused_on_every_view_not_only_the_first() -> None:
    registry = ToolRegistry([make("files.read")])
    registry.add_provider(
        _Provider({"mallory": [make("files_read")], "alice": [make("git.status")]})
    )
    mallory, alice = AccessContext(principal="mallory"), AccessContext(principal="alice")
    for _ in range(3):  # the second and third views reuse what the first learnt of these names
        with pytest.raises(ToolNameCollisionError, match="files_read"):
            registry.view(mallory)
        assert [t.name for t in registry.view(alice).tools()] == ["files.read", "git.status"]


def test_a_dash_and_an_underscore_collide_as_codex_and_pi_write_them() -> None:
    """Codex 0.171 and Pi 1.6 turn '-' into '_': ``a.b-c`` and ``a.b_c`` both reach the
    model as ``a_b_c`` + a hash suffix (tests/harness/test_long_tool_names.py measures it)."""
    found = find_name_collisions(["strict.a-b", "strict.a_b", "strict.c-d"])
    assert [(c.scheme, c.mapped, c.names) for c in found] == [
        ("harness_sanitized", "strict_a_b", ("strict.a-b", "strict.a_b"))
    ]
    registry = ToolRegistry([make("strict.a-b")])
    with pytest.raises(ToolNameCollisionError, match="strict_a_b"):
        registry.register(make("strict.a_b"))
    assert [t.name for t in registry.tools()] == ["strict.a-b"]
