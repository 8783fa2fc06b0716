"""A raw control character that displays as a line break must not hide a rule in a comment unflagged."""

from __future__ import annotations

import pytest

from sharedos.policy import compile_source

FILES = (
    "namespace files\n"
    "requirement files.read { action read; resource path(args.path) }\n"
    'permit read on "/**"\n'
)


@pytest.mark.parametrize("ch", ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\r"])
def test_a_line_break_lookalike_in_a_comment_is_warned_about(ch: str) -> None:
    # Editors, viewers and str.splitlines() show the forbid on a line of its
    # own; the '#' comment runs to '\n' and swallows it: the forbid is not there.
    text = FILES + "# keep secrets out" + ch + 'forbid read on "/secret/**"\n'
    assert text.splitlines()[-1] == 'forbid read on "/secret/**"'
    policy = compile_source(text, "p.sos")
    assert policy.decide("files.read", {"path": "/secret/x"}, {"principal": "a"}).allowed
    assert [(d.code, d.line) for d in policy.diagnostics] == [("SOS106", 4)]


@pytest.mark.parametrize("ch", ["\x1b", "\x01", "\x7f", "\x0b"])
def test_a_raw_control_character_in_a_condition_string_is_warned_about(ch: str) -> None:
    text = FILES + f'permit read on "/a/**" when context.principal == "x{ch}y"\n'
    policy = compile_source(text, "p.sos")
    assert [d.code for d in policy.diagnostics] == ["SOS106"]


def test_a_crlf_file_is_not_warned_about() -> None:
    text = (FILES + "# a comment\n" + 'forbid read on "/secret/**" # why\n').replace("\n", "\r\n")
    policy = compile_source(text, "p.sos")
    assert not policy.decide("files.read", {"path": "/secret/x"}, {"principal": "a"}).allowed
    assert policy.diagnostics == ()


@pytest.mark.parametrize("ch", ["\u034f", "\ufe0f", "\u3164", "\u115f", "\u17b4", "\U000e0100"])
def test_a_default_ignorable_character_in_a_pattern_is_warned_about_and_escaped_by_fmt(
    ch: str,
) -> None:
    # Shown as nothing (a combining grapheme joiner, a variation selector, a Hangul
    # filler): the forbid reads as "/secret/**" and protects only a name no one has.
    from sharedos.policy.formatter import format_source

    text = FILES + f'forbid read on "/secret{ch}/**"\n'
    policy = compile_source(text, "p.sos")
    assert policy.decide("files.read", {"path": "/secret/x"}, {"principal": "a"}).allowed
    assert ("SOS106", 4, 24) in [(d.code, d.line, d.col) for d in policy.diagnostics]
    formatted = format_source(text, "p.sos").text
    assert formatted is not None and ch not in formatted
    escape = f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}"
    assert f'"/secret{escape}/**"' in formatted
    again = compile_source(formatted, "p.sos")  # the same forbid, now visible
    hidden = {"path": f"/secret{ch}/x"}
    assert not again.decide("files.read", hidden, {"principal": "a"}).allowed
    assert not policy.decide("files.read", hidden, {"principal": "a"}).allowed
    assert not [d for d in again.diagnostics if d.code == "SOS106"]


@pytest.mark.parametrize("ch", ["\ufe0f", "\u034f", "\u3164", "\U000e0100"])
def test_a_default_ignorable_character_in_a_comment_is_not_warned_about(ch: str) -> None:
    # '# \u26a0\ufe0f keep this first': an emoji's variation selector, in a comment,
    # neither moves nor ends any text, so it hides nothing; it was an SOS106 warning
    # (and a failed check --strict) all the same. A bidi control there still is one,
    # and so is anything past a line-break look-alike in the comment.
    text = FILES + f"# \u26a0{ch} keep this first\n" + f'forbid read on "/b/**"  # ok {ch}\n'
    policy = compile_source(text, "p.sos")
    assert not [d for d in policy.diagnostics if d.code == "SOS106"]
    bidi = FILES + f"# keep{ch} \u202e\n"
    assert [(d.code, d.col) for d in compile_source(bidi, "p.sos").diagnostics] == [("SOS106", 9)]
    hidden = FILES + f'# keep out\x0bforbid read on "/secret{ch}/**"\n'
    found = [(d.code, d.line) for d in compile_source(hidden, "p.sos").diagnostics]
    assert found == [("SOS106", 4), ("SOS106", 4)]
    # in a string it reads as nothing: still warned about
    text = FILES + f'forbid read on "/secret{ch}/**"  # {ch}\n'
    found = [(d.code, d.col) for d in compile_source(text, "p.sos").diagnostics]
    assert ("SOS106", 24) in found and len([c for c, _ in found if c == "SOS106"]) == 1
