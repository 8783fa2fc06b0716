"""Tool names: the schema, the injective portable mapping, and collision detection."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from sharedos.names import (
    InvalidToolName,
    PortableNameMap,
    ToolNameSchema,
    canonical_from_portable,
    find_sanitization_collisions,
    harness_sanitized,
    is_valid_tool_name,
    portable_tool_name,
    unlisted_portable,
    validate_tool_name,
)

TOOL_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"
legal_names = st.text(alphabet=TOOL_CHARS, min_size=1, max_size=128)


@pytest.mark.parametrize("name", ["files.read", "github.search", "a", "x" * 128, "A-b_c.d"])
def test_legal_names_pass(name: str) -> None:
    assert validate_tool_name(name) == name
    assert is_valid_tool_name(name)


@pytest.mark.parametrize(
    "name", ["", "has space", "x" * 129, "ünïcode", "a/b", "ns:tool", "tab\there", "nul\x00"]
)
def test_illegal_names_are_rejected_with_a_clear_error(name: str) -> None:
    assert not is_valid_tool_name(name)
    with pytest.raises(InvalidToolName, match=r"1-128 characters of \[A-Za-z0-9_.-\]"):
        validate_tool_name(name)


def test_non_string_name_is_rejected() -> None:
    assert not is_valid_tool_name(42)
    with pytest.raises(InvalidToolName, match="must be a string"):
        validate_tool_name(42)


def test_schema_is_usable_in_pydantic_models() -> None:
    class Tool(BaseModel):
        name: ToolNameSchema

    assert Tool(name="files.read").name == "files.read"
    with pytest.raises(ValidationError):
        Tool(name="files read")


@given(legal_names)
def test_portable_name_round_trips_and_is_wire_safe(name: str) -> None:
    portable = portable_tool_name(name)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", portable)
    assert canonical_from_portable(portable) == name


@given(legal_names, legal_names)
def test_portable_mapping_is_injective(a: str, b: str) -> None:
    if a != b:
        assert portable_tool_name(a) != portable_tool_name(b)


def test_dot_and_underscore_names_stay_distinct_in_portable_form() -> None:
    mapping = PortableNameMap(["files.read", "files_read"])
    assert mapping.to_portable("files.read") != mapping.to_portable("files_read")
    assert mapping.to_canonical(mapping.to_portable("files_read")) == "files_read"
    assert mapping.to_canonical("nothing_here") is None


def test_portable_decoder_rejects_strings_it_cannot_have_produced() -> None:
    with pytest.raises(ValueError, match="not a portable tool name"):
        canonical_from_portable("files_xread")


def test_portable_map_accepts_a_repeated_name() -> None:
    mapping = PortableNameMap(["files.read", "files.read"])
    assert mapping.as_dict() == {"files.read": "files_dread"}


def test_harness_sanitization_collisions_are_found() -> None:
    assert harness_sanitized("files.read") == "files_read"
    collisions = find_sanitization_collisions(["files.read", "files_read", "github.search"])
    assert collisions == {"files_read": ["files.read", "files_read"]}
    assert find_sanitization_collisions(["github.search", "notion.search"]) == {}


def test_pi_public_names_match_pi_mcp() -> None:
    """Pi 1.6 (pi-mcp createMcpToolName): over 64 characters, cut and 8 hex of a hash."""
    from sharedos.names import pi_public_names

    long = "strict.s" + "t" * 52
    # measured: the name Pi offered the scripted model for this tool
    assert pi_public_names("sharedos", long) == (
        "mcp__sharedos__strict_stttttttttttttttttttttttttttttttt_4537be9e",
    )
    assert pi_public_names("sharedos", "files.read-x")[0] == "mcp__sharedos__files_read_x"
    assert all(len(n) <= 64 for n in pi_public_names("sharedos", "a" * 128))


def test_an_unlisted_portable_name_is_the_tool_it_spells_only_when_the_host_has_it() -> None:
    have = {"files.delete", "files.read_dir", "a_b"}.__contains__
    assert unlisted_portable("files_ddelete", have) == "files.delete"
    # a canonical name the host has is never reread as a portable spelling
    assert unlisted_portable("files.read_dir", have) == "files.read_dir"
    assert unlisted_portable("a_b", {"a_b", "a.b"}.__contains__) == "a_b"
    # nothing the host has: as received (no decodable spelling, or decoded to no tool)
    assert unlisted_portable("no_dsuch", have) == "no_dsuch"
    assert unlisted_portable("x_q", have) == "x_q"
