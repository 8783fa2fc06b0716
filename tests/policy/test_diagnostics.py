"""Every diagnostic code: position (file:line:col), caret excerpt, hint; never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedos.cli.policy import main as policy_main
from sharedos.cli.policy._check import check_with_suppressions
from sharedos.policy import CODES, Diagnostic, PolicyError, compile_paths, compile_source
from sharedos.policy.lints import LintOptions
from sharedos.terminal import unambiguous

HEAD = """namespace files
requirement files.read  { action read;  resource path(args.path) }
requirement files.write { action write; resource path(args.path) }
"""


def _errors(text: str) -> list[Diagnostic]:
    with pytest.raises(PolicyError) as info:
        compile_source(text, "p.sos")
    return info.value.diagnostics


def _caret_text(diag: Diagnostic) -> str:
    """The excerpt text the rendered carets point at."""
    lines = diag.render().splitlines()
    caret_line = lines[2]
    excerpt_line = lines[1]
    start = caret_line.index("^")
    width = caret_line.count("^")
    return excerpt_line[start : start + width]


# (source, code, line, col, text under the carets)
CASES = [
    (HEAD + 'permit read "/x"\n', "SOS101", 4, 13, '"/x"'),
    (HEAD + 'permit read on "/x" $\n', "SOS102", 4, 21, "$"),
    (HEAD + "requirement files.list { action list\n", "SOS103", 4, 37, None),
    (HEAD + 'permit read on "/x\n', "SOS104", 4, 16, '"/x'),
    (HEAD + 'permit read on "/x\\q"\n', "SOS104", 4, 19, "\\q"),
    (HEAD + 'permit read on "/x" when context.n == ' + "9" * 5000 + "\n", "SOS105", 4, 39, None),
    (HEAD + 'permit read on "/x" when context.n < 9223372036854775808\n', "SOS105", 4, 38, None),
    (HEAD + 'permit raed on "/x"\n', "SOS201", 4, 8, "raed"),
    (
        HEAD + "requirement files.read { action read; resource path(args.p) }\n",
        "SOS202",
        4,
        13,
        "files.read",
    ),
    (HEAD + 'permit read on "/x" when foo.bar == "x"\n', "SOS203", 4, 26, "foo.bar"),
    (HEAD + 'permit read on "/x" when "a" in 3\n', "SOS204", 4, 33, "3"),
    (
        HEAD + 'permit read on "/x" when upper(context.x) == "A"\n',
        "SOS205",
        4,
        26,
        "upper(context.x)",
    ),
    (
        'namespace n\nrequirement "bad name" { action a; resource path(args.p) }\n',
        "SOS206",
        2,
        13,
        '"bad name"',
    ),
    (HEAD + 'permit read on "/a/**b"\n', "SOS207", 4, 20, "**"),
    (HEAD + 'permit read on "/home/{args.user}/**"\n', "SOS207", 4, 23, "{args.user}"),
    (
        "namespace n\nrequirement n.t { action a; resource path(context.p) }\n",
        "SOS208",
        2,
        43,
        "context.p",
    ),
    ("namespace n\nrequirement n.t { action a }\n", "SOS209", 2, 13, "n.t"),
    (
        HEAD + '@id("r")\npermit read on "/a"\n@id("r")\npermit read on "/b"\n',
        "SOS210",
        6,
        1,
        '@id("r")',
    ),
    (HEAD + '@owner("me")\npermit read on "/a"\n', "SOS211", 4, 1, '@owner("me")'),
    (
        HEAD
        + "namespace github\nrequirement files.delete { action delete; resource path(args.p) }\n",
        "SOS212",
        5,
        13,
        "files.delete",
    ),
    (HEAD + "condition when_x = true\ncondition x = 1\ncondition x = 2\n", "SOS214", 6, 11, "x"),
    (HEAD + "condition a = b\ncondition b = a\n", "SOS215", 4, 11, "a"),
    (
        HEAD
        + 'condition c0 = "r" in context.roles\n'
        + "".join(f"condition c{i} = c{i - 1} and c{i - 1}\n" for i in range(1, 13)),
        "SOS217",
        16,
        11,
        "c12",
    ),
    (
        HEAD + 'require approval by role "m", role " m" for read on "/x/**"\n',
        "SOS216",
        4,
        31,
        'role " m"',
    ),
    (
        HEAD + 'permit read on "/x" when startswith(resource)\n',
        "SOS213",
        4,
        26,
        "startswith(resource)",
    ),
    (
        'toolpolicy t {\n  mode strict\n  managed files.*\n  harness_local "patch"\n  external_direct "jira"\n}\n',
        "SOS301",
        5,
        3,
        "external_direct",
    ),
    ("toolpolicy t {\n  mode strict\n  managed files.*\n}\n", "SOS302", 1, 12, "t"),
    ("toolpolicy t {\n  mode open\n  managed files..read\n}\n", "SOS303", 3, 11, "files..read"),
    ('toolpolicy t {\n  mode open\n  harness_local "bad name"\n}\n', "SOS304", 3, 17, '"bad name"'),
    ("toolpolicy t { mode open }\ntoolpolicy t { mode open }\n", "SOS305", 2, 12, "t"),
    ("toolpolicy t { mode lenient }\n", "SOS306", 1, 21, "lenient"),
    ("toolpolicy t { managed files.* }\n", "SOS307", 1, 12, "t"),
    (
        HEAD + 'test "x" {\n  call files.nope { path: "/a" }\n  expect allow\n}\n',
        "SOS401",
        5,
        8,
        "files.nope",
    ),
    (HEAD + 'test "x" {\n  call files.read { path: "/a" }\n}\n', "SOS402", 4, 1, None),
    (
        HEAD + 'test "x" {\n  call files.read { path: "/a" }\n  expect deny nope\n}\n',
        "SOS403",
        6,
        15,
        "nope",
    ),
    (
        HEAD + 'test "x" {\n  policy nope\n  call files.read { path: "/a" }\n  expect allow\n}\n',
        "SOS405",
        5,
        10,
        "nope",
    ),
    (
        HEAD + 'test "x" {\n  call files.read { path: "/a" }\n  approver { roles: ["m"] }\n'
        "  expect allow\n}\n",
        "SOS406",
        6,
        3,
        None,
    ),
    (
        HEAD
        + 'test "x" { call files.read { path: "/a" } expect deny }\n'
        + 'test "x" { call files.read { path: "/b" } expect deny }\n',
        "SOS404",
        5,
        1,
        None,
    ),
]


@pytest.mark.parametrize(("text", "code", "line", "col", "under"), CASES, ids=[c[1] for c in CASES])
def test_each_code_is_positioned(
    text: str, code: str, line: int, col: int, under: str | None
) -> None:
    diags = _errors(text)
    matching = [d for d in diags if d.code == code]
    assert matching, f"expected {code}, got {[d.render() for d in diags]}"
    diag = matching[0]
    assert (diag.file, diag.line, diag.col) == ("p.sos", line, col), diag.render()
    assert diag.severity == "error"
    assert diag.hint
    rendered = diag.render()
    assert rendered.startswith(f"p.sos:{line}:{col}: error[{code}]: ")
    assert "hint: " in rendered
    full = text.splitlines()[line - 1]
    if len(full) <= 160:
        assert diag.excerpt == full
    else:  # a long line is cut to a window around the span
        assert diag.excerpt.rstrip(".") in full and len(diag.excerpt) <= 163
        assert diag.col - diag.excerpt_col < len(diag.excerpt)
    if under is not None:
        assert _caret_text(diag) == under


def test_catalogue_covers_every_emitted_code() -> None:
    # parser and checker codes here; the lints' (SOS5xx) in test_lints.py, the
    # tool's own (SOS9xx) in test_cli_commands.py
    emitted = {code for _, code, *_ in CASES} | {"SOS001", "SOS002", "SOS106"}
    core = {c for c in CODES if c[3] not in "59"}
    assert emitted == core, core ^ emitted


def test_a_long_line_is_excerpted_around_the_caret() -> None:
    text = HEAD + 'permit read on "/x" when context.a == "' + "x" * 100_000 + '" $\n'
    (diag,) = _errors(text)
    rendered = diag.render()
    assert diag.code == "SOS102" and len(rendered) < 1000
    excerpt_line, caret_line = rendered.splitlines()[1:3]
    assert excerpt_line[caret_line.index("^")] == "$"


def test_raw_invisible_characters_are_warned_about_where_they_are() -> None:
    # Trojan Source: a right-to-left override makes the line read differently
    text = HEAD + 'permit read on "/x" when context.tenant == "a\u202eb" # \u200b\n'
    policy = compile_source(text, "p.sos")
    found = [(d.code, d.severity, d.line, d.col) for d in policy.diagnostics]
    assert found == [("SOS106", "warning", 4, 46), ("SOS106", "warning", 4, 52)]
    assert "RIGHT-TO-LEFT OVERRIDE" in policy.diagnostics[0].message
    assert "\\u202e" in policy.diagnostics[0].hint


def test_several_syntax_errors_in_one_file_are_all_reported() -> None:
    text = (
        HEAD
        + 'permit read "/a"\n'  # 4: missing 'on'
        + 'permit read on "/ok/**"\n'  # 5: fine
        + "forbid * on when\n"  # 6: missing pattern
        + 'test "t" { call files.read { path: "/a" } expect allow\n'  # 7: unclosed
        + 'permit write on "/w/**" when "x" in\n'  # 8: dangling operator
    )
    diags = _errors(text)
    assert [(d.code, d.line) for d in diags] == [
        ("SOS101", 4),
        ("SOS101", 6),
        ("SOS103", 7),
        ("SOS103", 8),
    ]


def test_syntax_and_meaning_errors_together() -> None:
    text = HEAD + 'permit read "/a"\npermit read on "/x" when nope == 1\n'
    codes = [(d.code, d.line) for d in _errors(text)]
    assert ("SOS101", 4) in codes
    assert ("SOS203", 5) in codes


def test_annotation_line_stays_with_its_rule_during_recovery() -> None:
    text = HEAD + "permit read\n" + '@id("x")\npermit read on "/x" when bogus\n'
    diags = _errors(text)
    assert [(d.code, d.line) for d in diags] == [("SOS103", 4), ("SOS203", 6)]


def test_policy_error_message_is_the_rendered_list() -> None:
    with pytest.raises(PolicyError) as info:
        compile_source(HEAD + 'permit raed on "/x"\npermit wirte on "/y"\n', "p.sos")
    text = str(info.value)
    assert "p.sos:4:8: error[SOS201]" in text
    assert "p.sos:5:8: error[SOS201]" in text
    assert "actions of namespace 'files': read, write" in text


def test_unreadable_and_missing_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sos"
    bad.write_bytes(b"namespace \xff\xfe\n")
    with pytest.raises(PolicyError) as info:
        compile_paths([bad, tmp_path / "missing.sos"])
    codes = sorted(d.code for d in info.value.diagnostics)
    assert codes == ["SOS001", "SOS001"]
    assert any("not valid UTF-8" in d.message for d in info.value.diagnostics)


def test_empty_directory_has_no_policy_files(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as info:
        compile_paths([tmp_path])
    assert [d.code for d in info.value.diagnostics] == ["SOS002"]


def test_errors_across_files_are_all_reported(tmp_path: Path) -> None:
    (tmp_path / "a.sos").write_text(HEAD + '@id("dup")\npermit read on "/a"\n')
    (tmp_path / "b.sos").write_text(
        'namespace files\n@id("dup")\npermit write on "/b"\npermit nope on "/c"\n'
    )
    with pytest.raises(PolicyError) as info:
        compile_paths([tmp_path])
    where = [(Path(d.file).name, d.line, d.code) for d in info.value.diagnostics]
    assert where == [("b.sos", 2, "SOS210"), ("b.sos", 4, "SOS201")]


def test_to_dict_round_trips_the_fields() -> None:
    diag = _errors(HEAD + 'permit raed on "/x"\n')[0]
    data = diag.to_dict()
    assert data["code"] == "SOS201"
    assert (data["line"], data["col"], data["end_col"]) == (4, 8, 12)


def test_warnings_do_not_stop_compilation() -> None:
    policy = compile_source(
        'namespace n\nrequirement n.t { action a; resource "fixed" }\npermit a on "fixed"\n'
    )
    assert [d.code for d in policy.diagnostics] == ["SOS208"]
    assert policy.diagnostics[0].severity == "warning"
    assert policy.decide("n.t", {}, {}).allowed


def test_byte_order_mark_and_crlf_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.sos"
    path.write_bytes(
        b"\xef\xbb\xbf" + HEAD.replace("\n", "\r\n").encode() + b'permit read on "/x" # note\r\n'
    )
    policy = compile_paths([path])
    assert policy.decide("files.read", {"path": "/x"}, {}).allowed
    assert policy.files[0].comments[0].text == " note"


@pytest.mark.parametrize("ch", ["\x0b", "\x0c", "\x1c", "\x1e", "\x85", "\u2028", "\u2029"])
def test_the_excerpt_is_the_diagnostics_own_line_after_a_line_break_lookalike(ch: str) -> None:
    # The lexer ends lines at '\n' only; str.splitlines also at these: every
    # diagnostic after one showed the text of another line under its caret.
    text = (
        f"namespace files  # a{ch}b\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'permit bogus on "/a/**"\n'
    )
    with pytest.raises(PolicyError) as err:
        compile_source(text, "p.sos")
    [diag] = [d for d in err.value.diagnostics if d.code == "SOS201"]
    assert (diag.line, diag.col) == (3, 8)
    assert diag.excerpt == 'permit bogus on "/a/**"'
    assert ' 3 | permit bogus on "/a/**"\n   |        ^^^^^' in diag.render()


def test_carets_stay_under_the_span_after_wide_and_combining_characters() -> None:
    # '中文' takes four terminal cells and 'e\u0301' one: carets counted in
    # characters sat two cells left of 'bogus', under 'd '.
    head = 'permit read on "/中文/**" when context.x == "e\u0301" and '
    text = (
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        f"{head}bogus(1)\n"
    )
    with pytest.raises(PolicyError) as err:
        compile_source(text, "p.sos")
    [diag] = [d for d in err.value.diagnostics if d.code == "SOS205"]
    assert diag.col == len(head) + 1
    excerpt, carets = diag.render().split("\n")[1:3]
    assert excerpt == f" 3 | {head}bogus(1)"
    assert carets == "   | " + " " * (len(head) + 2 - 1) + "^" * len("bogus(1)")


def test_two_rules_never_share_an_id(tmp_path: Path) -> None:
    # A rule without @id is named FILE:LINE. Two on one line, or an @id spelt as
    # another rule's automatic id, gave a forbid and a permit one id: an allow
    # was recorded as decided by "sub/p.sos:6", the forbid's id.
    (tmp_path / "sub").mkdir()
    policy = tmp_path / "sub" / "p.sos"
    policy.write_text(
        HEAD
        + 'permit read on "/a/**" forbid read on "/a/x/**"\n'
        + '@id("sub/p.sos:7")\nforbid read on "/b/**"\npermit read on "/c/**"\n'
    )
    (tmp_path / "q.sos").write_text("namespace other\n")
    with pytest.raises(PolicyError) as info:
        compile_paths([tmp_path])
    found = [(d.code, d.line, d.col, _caret_text(d)) for d in info.value.diagnostics]
    assert found == [
        ("SOS210", 4, 24, 'forbid read on "/a/x/**"'),
        ("SOS210", 5, 1, '@id("sub/p.sos:7")'),
    ]
    assert "'sub/p.sos:4'" in info.value.diagnostics[0].message
    assert "automatic id of the permit at" in info.value.diagnostics[1].message
    # check names files as a compile of the same paths does
    checked, _ = check_with_suppressions([policy, tmp_path / "q.sos"], LintOptions())
    assert [(d.code, d.line) for d in checked if d.code == "SOS210"] == [
        ("SOS210", 4),
        ("SOS210", 5),
    ]
    fixed = (
        HEAD + 'permit read on "/a/**"\nforbid read on "/a/x/**"\n'
        '@id("c-reads")\nforbid read on "/b/**"\npermit read on "/c/**"\n'
    )
    policy.write_text(fixed)
    ids = {r.id for r in compile_paths([tmp_path]).rules}
    assert ids == {"sub/p.sos:4", "sub/p.sos:5", "c-reads", "sub/p.sos:8"}


def test_an_excerpt_shows_hidden_characters_spelled_with_the_carets_under_them() -> None:
    # the excerpt is the file's own line: a raw escape (OSC 52 writes the clipboard, CSI 1A
    # 2K erases the line above), a bidi override or a zero-width space in it reached the
    # terminal raw, in the very warning (SOS106) that says it is there
    head = (
        'permit read on "/x" when context.a == "\x1b]52;c;aGk=\x07\x1b[1A\x1b[2K\u202e\u200b" and '
    )
    text = (
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        f"{head}bogus(1)\n"
    )
    with pytest.raises(PolicyError) as err:
        compile_source(text, "p.sos")
    rendered = [d.render() for d in err.value.diagnostics]
    assert rendered and all(
        unambiguous(r.replace("\n", "")) == r.replace("\n", "") for r in rendered
    )
    [diag] = [d for d in err.value.diagnostics if d.code == "SOS205"]
    excerpt, carets = diag.render().split("\n")[1:3]
    assert excerpt == f" 3 | {unambiguous(head)}bogus(1)"
    assert excerpt[carets.index("^") :].startswith("bogus(1)")
    assert carets.count("^") == len("bogus(1)")
    [rlo] = [d for d in err.value.diagnostics if "RIGHT-TO-LEFT" in d.message]
    excerpt, carets = rlo.render().split("\n")[1:3]
    assert excerpt[carets.index("^") :].startswith("\\u202e")
    assert carets.count("^") == len("\\u202e")


@pytest.mark.parametrize("command", [["check"], ["fmt", "--check"], ["test"]])
def test_the_policy_commands_print_no_raw_escape_from_a_policy_file(
    tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "p.sos"
    path.write_text(
        HEAD + 'permit read on "/y" $ # \x1b]0;owned\x07\x1b[1A\x1b[2K\u202e\n',
        encoding="utf-8",
    )
    result = CliRunner().invoke(policy_main, [*command, str(path)])
    assert result.exit_code != 0
    assert "SOS102" in result.output, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "\u202e" not in result.output


def test_a_tab_a_diagnostic_is_about_is_spelled_and_indentation_is_not() -> None:
    # a tab is shown as one space (its column stays the carets' column), so SOS207 "pattern
    # contains a control character" put its caret under what read as a plain space
    text = (
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        '\tpermit read on "/山田\tx"\n'
    )
    with pytest.raises(PolicyError) as err:
        compile_source(text, "p.sos")
    [diag] = [d for d in err.value.diagnostics if d.code == "SOS207"]
    excerpt, carets = diag.render().split("\n")[1:3]
    assert excerpt == ' 3 |  permit read on "/山田\\x09x"'  # the indentation: one space
    # under the spelled tab, two cells further right for each of the wide 山田
    assert excerpt.index("\\x09") + 2 == carets.index("^")
    assert carets.count("^") == len("\\x09")
