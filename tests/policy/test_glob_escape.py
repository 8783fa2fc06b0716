"""A pattern cannot hide a glob or a hole behind an escape: "/data/\\u002a\\u002a" is refused."""

from __future__ import annotations

import pytest

from sharedos.policy import PolicyError, compile_source

FILES = "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"


@pytest.mark.parametrize(
    "pattern",
    [
        r"/data/\u002a\u002a",  # reads as a literal '**', grants the whole /data tree
        r"/data/\u002A",
        r"/data/x\U0000002a",
        r"/home/\u007bcontext.principal\u007d/**",
        r"/home/{context.principal\u007d/**",
    ],
)
@pytest.mark.parametrize("effect", ["permit", "forbid"])
def test_an_escaped_glob_or_hole_character_in_a_pattern_is_an_error(
    pattern: str, effect: str
) -> None:
    with pytest.raises(PolicyError) as info:
        compile_source(FILES + f'{effect} read on "{pattern}"\n', "p.sos")
    codes = [(d.code, d.line) for d in info.value.diagnostics]
    assert codes == [("SOS207", 3)]


@pytest.mark.parametrize(
    "pattern", [r"/a\/b", r"/a\u002fb", r"/caf\u00e9/**", r"/a\u0062c", r"/a\\u002a"]
)
def test_other_escapes_in_a_pattern_stay_allowed(pattern: str) -> None:
    policy = compile_source(FILES + f'permit read on "{pattern}"\n', "p.sos")
    assert not policy.diagnostics


def test_an_escaped_star_in_a_condition_string_is_just_a_string() -> None:
    policy = compile_source(
        FILES + 'permit read on "/d/**" when endswith(resource, "\\u002a")\n', "p.sos"
    )
    assert policy.decide("files.read", {"path": "/d/*"}, {"principal": "a"}).allowed
    assert not policy.decide("files.read", {"path": "/d/x"}, {"principal": "a"}).allowed
