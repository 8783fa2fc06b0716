"""Language traps that could silently grant access (issue 13). Each test failed before its fix.

Written against the public API only (``compile_source``, ``decide``, the
formatter, the CLI), so they read as what an operator would see.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedos.cli.policy import main
from sharedos.policy import PolicyError, compile_source
from sharedos.policy.formatter import format_source

FILES = "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
GITHUB = 'namespace github\nrequirement github.get { action read; resource "{args.owner}/{args.repo}" }\n'


def _codes(text: str) -> list[str]:
    with pytest.raises(PolicyError) as info:
        compile_source(text, "t.sos")
    return [d.code for d in info.value.diagnostics]


# ------------------------------------------------- keywords glue to what follows


@pytest.mark.parametrize(
    "text",
    [
        "namespace docs\nrequirementdocs.read{actionread;resourcepath(args.path)}\n",
        FILES + 'permit read on "/a/**" when"admin" incontext.roles andtrue\n',
        FILES + 'permitread on "/a/**"\n',
        FILES + 'permit read on "/a/**" when "admin" in context.roles andtrue\n',
    ],
)
def test_a_keyword_glued_to_the_next_word_is_an_error_not_a_repair(text: str) -> None:
    assert "SOS101" in _codes(text)
    assert format_source(text, "t.sos").text is None  # fmt does not "repair" it either
    # the one-line fast path (a large file) agrees
    big = text + "".join(f'permit read on "/p{i}/**"\n' for i in range(100))
    assert "SOS101" in _codes(big)


def test_a_misspelt_keyword_gets_a_did_you_mean() -> None:
    with pytest.raises(PolicyError) as info:
        compile_source(FILES + 'permitt read on "/a/**"\n', "t.sos")
    (diag,) = info.value.diagnostics
    assert diag.message == "unknown keyword 'permitt'; did you mean 'permit'?"
    assert (diag.line, diag.col, diag.end_col) == (3, 1, 8)


# ------------------------------------------------- 'in' on a string


ORGS = {"principal": "p", "roles": [], "attributes": {"orgs": "acme-prod"}}


def test_in_is_list_membership_never_a_substring_test() -> None:
    policy = compile_source(
        GITHUB + 'permit read on "*/*" when args.owner in context.attributes.orgs\n', "t.sos"
    )
    # "a" is a substring of "acme-prod": it must not be a member of it
    decision = policy.decide("github.get", {"owner": "a", "repo": "r"}, ORGS)
    assert not decision.allowed
    listed = {**ORGS, "attributes": {"orgs": ["acme", "acme-prod"]}}
    assert not policy.decide("github.get", {"owner": "a", "repo": "r"}, listed).allowed
    assert policy.decide("github.get", {"owner": "acme", "repo": "r"}, listed).allowed


def test_in_on_a_string_makes_a_forbid_apply() -> None:
    policy = compile_source(
        GITHUB
        + 'permit read on "*/*"\n'
        + 'forbid read on "*/*" unless args.owner in context.attributes.orgs\n',
        "t.sos",
    )
    # fail closed: the condition errors, so the forbid applies
    assert not policy.decide("github.get", {"owner": "acme-prod", "repo": "r"}, ORGS).allowed


@pytest.mark.parametrize("right", ['"acme-prod"', "resource", "action", 'lower("X")'])
def test_in_on_a_known_string_is_a_type_error_at_check_time(right: str) -> None:
    assert _codes(GITHUB + f'permit read on "*/*" when args.owner in {right}\n') == ["SOS204"]


def test_contains_is_the_explicit_substring_test() -> None:
    policy = compile_source(
        GITHUB + 'permit read on "*/*" when contains(context.attributes.orgs, args.owner)\n',
        "t.sos",
    )
    assert policy.decide("github.get", {"owner": "acme", "repo": "r"}, ORGS).allowed


# ------------------------------------------------- forbids are namespace-local


def test_a_requirement_outside_its_namespace_is_an_error() -> None:
    text = (
        FILES
        + 'forbid * on "/**"\n'
        + "namespace github\n"
        + "requirement files.delete { action delete; resource path(args.path) }\n"
        + 'permit delete on "/**"\n'
    )
    assert _codes(text) == ["SOS212"]


def test_a_tool_name_without_a_dot_claims_no_namespace() -> None:
    # external contracts fix some names (the MCP conformance suite's test_wait)
    compile_source(
        'namespace conformance\nrequirement test_wait { action call; resource "/c/{args.x}" }\n'
    )


def test_a_requirement_before_any_namespace_is_an_error() -> None:
    assert _codes("requirement files.read { action read; resource path(args.path) }\n") == [
        "SOS212"
    ]


# ------------------------------------------------- invisible characters


def test_raw_bidi_characters_are_warned_about() -> None:
    policy = compile_source(FILES + 'permit read on "/a/\u202e/**"\n', "t.sos")
    assert [d.code for d in policy.diagnostics] == ["SOS106"]


@pytest.mark.parametrize("escape", ["\\u202e", "\\u200b", "\\u2066", "\\U000e0041"])
def test_fmt_keeps_invisible_characters_escaped(escape: str) -> None:
    text = FILES + f'permit read on "/a/x{escape}y/**"\n'
    formatted = format_source(text, "t.sos").text
    assert formatted is not None and escape in formatted
    assert formatted.isascii()


def test_fmt_escapes_raw_invisible_characters() -> None:
    formatted = format_source(FILES + 'permit read on "/a/\u202e/**"\n', "t.sos").text
    assert formatted is not None and "\\u202e" in formatted and "\u202e" not in formatted


# ------------------------------------------------- numbers are bounded


@pytest.mark.parametrize(
    "number", ["9" * 5000, "9223372036854775808", "-9223372036854775809", "1e999"]
)
def test_an_out_of_range_number_is_a_positioned_diagnostic(number: str) -> None:
    assert _codes(FILES + f'permit read on "/a/**" when context.n == {number}\n') == ["SOS105"]
    test = (
        FILES
        + f'test "t" {{ context {{ n: {number} }} call files.read {{ path: "/a" }} expect deny }}\n'
    )
    assert _codes(test) == ["SOS105"]


@pytest.mark.parametrize(
    "number",
    ["9007199254740993.0", "9007199254740993e0", "-9007199254740995.0", "1234567890123456789.0"],
)
@pytest.mark.parametrize("fast", [True, False])
def test_a_number_that_reads_as_another_integer_is_an_error(
    number: str, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 9007199254740993.0 is the float 9007199254740992.0: a forbid "== 9007199254740993.0"
    # never met the integer argument 9007199254740993, which was granted.
    from sharedos.policy import parser

    monkeypatch.setattr(parser, "_FAST_ENABLED", fast)
    text = FILES + f'permit read on "/**"\nforbid read on "/a/**" when args.n == {number}\n'
    assert _codes(text) == ["SOS105"]
    with pytest.raises(PolicyError, match="not exactly a 64-bit float"):
        compile_source(text, "t.sos")


@pytest.mark.parametrize(
    "number", ["0.1", "1.0", "1e20", "1e23", "-0.0", "2.5e-3", "9007199254740992.0", "9.5e18"]
)
def test_a_number_a_float_holds_exactly_or_not_whole_is_read_as_before(number: str) -> None:
    policy = compile_source(FILES + f'permit read on "/a/**" when args.n == {number}\n', "t.sos")
    assert policy.decide("files.read", {"path": "/a/x", "n": float(number)}, {}).allowed


@pytest.mark.parametrize("command", ["check", "test", "fmt", "explain", "eval"])
def test_an_out_of_range_number_is_never_an_internal_error(command: str, tmp_path: Path) -> None:
    policy = tmp_path / "p.sos"
    policy.write_text(FILES + 'permit read on "/a/**" when context.n == ' + "9" * 5000 + "\n")
    args = {
        "explain": ["explain", str(policy), "--tool", "files.read"],
        "eval": ["eval", str(policy)],
    }.get(command, [command, str(policy)])
    result = CliRunner().invoke(main, args, input="")
    assert result.exit_code == (4 if command == "test" else 1), result.output
    assert "SOS105" in result.output + (result.stderr if result.stderr_bytes else "")


def test_an_out_of_range_number_in_eval_input_fails_that_line_only(tmp_path: Path) -> None:
    policy = tmp_path / "p.sos"
    policy.write_text(FILES + 'permit read on "/a/**"\n')
    lines = (
        '{"tool": "files.read", "args": {"path": "/a/x", "n": ' + "9" * 5000 + "}}\n"
        '{"tool": "files.read", "args": {"path": "/a/x"}}\n'
    )
    result = CliRunner().invoke(main, ["eval", str(policy)], input=lines)
    out = result.stdout.splitlines()
    assert result.exit_code == 1 and len(out) == 2
    assert '"invalid_json"' in out[0] and '"allow"' in out[1]


def test_did_you_mean_for_a_misspelt_tool_in_a_test() -> None:
    with pytest.raises(PolicyError, match=r"calls 'files.raed'.*did you mean 'files.read'"):
        compile_source(FILES + 'test "t" { call files.raed { path: "/a" } expect allow }\n')
