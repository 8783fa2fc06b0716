"""The one TOML locator: every config error's file:line:col comes from ``sharedos.tomlpos``."""

from __future__ import annotations

import tomllib

import pytest

from sharedos.tomlpos import decode_error_position, key_positions, locate, locate_in

DOC = """\
title = "x"
[upstream.git]
command = "uvx"
limits = { max_tools = 5, "max bytes" = 7 }

[[rows]]
id = "a"

[[rows]]
id = "b"
expect.outcome = "denied"

[rows.extra]
note = "belongs to the second row"

[[rows.steps]]
n = 1
"""


def test_tables_keys_dotted_keys_and_inline_keys() -> None:
    pos = key_positions(DOC)
    assert pos[("title",)] == (1, 1)
    assert pos[("upstream", "git")] == (2, 1)
    assert pos[("upstream", "git", "command")] == (3, 1)
    assert pos[("upstream", "git", "limits", "max_tools")] == (4, 12)
    assert pos[("upstream", "git", "limits", "max bytes")] == (4, 27)


def test_arrays_of_tables_are_numbered_as_the_parser_numbers_them() -> None:
    data = tomllib.loads(DOC)
    assert data["rows"][1]["id"] == "b" and data["rows"][1]["extra"]["note"]
    pos = key_positions(DOC)
    assert locate(pos, ("rows", 0, "id")) == (7, 1)
    assert locate(pos, ("rows", 1, "id")) == (10, 1)
    assert locate(pos, ("rows", 1, "expect", "outcome")) == (11, 1)
    assert locate(pos, ("rows", 1, "extra", "note")) == (14, 1)
    assert locate(pos, ("rows", 1, "steps", 0, "n")) == (17, 1)


def test_an_unplaceable_key_falls_back_to_its_nearest_placed_prefix() -> None:
    assert locate_in(DOC, ("upstream", "git", "env", "TOKEN")) == (2, 1)
    assert locate_in(DOC, ("rows", 1, "missing")) == (9, 1)
    assert locate_in(DOC, ("nowhere",)) == (1, 1)
    assert locate_in("", ()) == (1, 1)


def test_the_position_a_decode_error_states() -> None:
    with pytest.raises(tomllib.TOMLDecodeError) as exc:
        tomllib.loads('a = 1\nb = "unterminated\n')
    position = decode_error_position(str(exc.value))
    assert position is not None and position[0] == 2
    assert decode_error_position("no position here") is None
