"""``sharedos-policy fmt`` and the formatter: canonical, idempotent, comments kept, meaning kept."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedos.cli.policy import main
from sharedos.policy import compile_source
from sharedos.policy.formatter import format_source, quote
from sharedos.policy.parser import parse_source

DATA = Path(__file__).resolve().parent.parent / "data" / "policy_cli"


def invoke(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), input=stdin)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def fmt(text: str) -> str:
    result = format_source(text, "t.sos")
    assert result.text is not None, [d.render() for d in result.diagnostics]
    return result.text


def test_messy_file_formats_to_the_golden_output() -> None:
    messy = (DATA / "messy.sos").read_text(encoding="utf-8")
    golden = (DATA / "messy.formatted.sos").read_text(encoding="utf-8")
    assert fmt(messy) == golden
    assert fmt(golden) == golden


def test_comments_in_every_position_keep_their_order() -> None:
    src = (DATA / "comments.sos").read_text(encoding="utf-8")
    golden = (DATA / "comments.formatted.sos").read_text(encoding="utf-8")
    assert fmt(src) == golden
    assert fmt(golden) == golden
    before = [c.text.strip() for c in parse_source(src).file.comments]
    assert [c.text.strip() for c in parse_source(golden).file.comments] == before


def test_every_comment_survives_in_order() -> None:
    messy = (DATA / "messy.sos").read_text(encoding="utf-8")
    before = [c.text.strip() for c in parse_source(messy).file.comments]
    after = [c.text.strip() for c in parse_source(fmt(messy)).file.comments]
    assert before == after and len(before) == 6


def test_shipped_files_are_already_canonical(repo_root: Path) -> None:
    for path in sorted((repo_root / "rules").glob("*.sos")) + sorted(
        (repo_root / "policy").glob("*.sos")
    ):
        text = path.read_text(encoding="utf-8")
        assert fmt(text) == text, path


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            'permit  read  on "/a"  when  (context.x == 1)',
            'permit read on "/a" when context.x == 1\n',
        ),
        # precedence: parentheses only where they change the tree
        (
            'permit r on "/a" when (a.b == 1 or a.c == 2) and a.d == 3',
            'permit r on "/a" when (a.b == 1 or a.c == 2) and a.d == 3\n',
        ),
        (
            'permit r on "/a" when a.b == 1 or (a.c == 2 and a.d == 3)',
            'permit r on "/a" when a.b == 1 or a.c == 2 and a.d == 3\n',
        ),
        ('permit r on "/a" when not (a.b or a.c)', 'permit r on "/a" when not (a.b or a.c)\n'),
        (
            'permit r on "/a" when a.b or (a.c or a.d)',
            'permit r on "/a" when a.b or (a.c or a.d)\n',
        ),
        (
            'permit r on "/a" when "x" not in [ "a","b" ]',
            'permit r on "/a" when "x" not in ["a", "b"]\n',
        ),
        (
            'permit r on "/a" when startswith( resource , "/a" )',
            'permit r on "/a" when startswith(resource, "/a")\n',
        ),
        ('@id("x") permit * on "/a"', '@id("x")\npermit * on "/a"\n'),
        ('permit r on "/a\\"b\\\\c\\u0001"', 'permit r on "/a\\"b\\\\c\\u0001"\n'),
    ],
)
def test_canonical_layout(source: str, expected: str) -> None:
    assert fmt(source) == expected


def test_blocks_one_clause_per_line_and_keyword_names_are_quoted() -> None:
    src = 'toolpolicy "mode" { mode open; managed "managed", files.*; harness_local "patch" }'
    assert fmt(src) == (
        'toolpolicy "mode" {\n  mode open\n  managed "managed", files.*\n  harness_local "patch"\n}\n'
    )
    src = 'test "t" { call x.y { "a b": 1, true: [1, 2.5, null, false] } expect deny forbidden }'
    assert (
        fmt(src)
        == 'test "t" {\n  call x.y { "a b": 1, "true": [1, 2.5, null, false] }\n  expect deny forbidden\n}\n'
    )


def test_test_block_run_policy_clause_is_kept() -> None:
    src = 'test "t" { call x.y  policy "ci-strict" ; expect deny not_in_run_policy }'
    assert (
        fmt(src)
        == 'test "t" {\n  policy ci-strict\n  call x.y\n  expect deny not_in_run_policy\n}\n'
    )


def test_requirements_are_aligned_in_runs_broken_by_blank_lines() -> None:
    src = (
        "requirement a.b { action read; resource path(args.p) }\n"
        "requirement a.longer { action write; resource path(args.p) }\n"
        "\n"
        "requirement c { action x; resource path(args.p) }\n"
    )
    assert fmt(src) == (
        "requirement a.b      { action read;  resource path(args.p) }\n"
        "requirement a.longer { action write; resource path(args.p) }\n"
        "\n"
        "requirement c { action x; resource path(args.p) }\n"
    )


def test_quote_round_trips_through_the_parser() -> None:
    for value in [
        "plain",
        'with "quotes"',
        "back\\slash",
        "tab\tnew\nline\r",
        "\x00\x1f\x7f",
        "ünï ☃ 𝄞",
    ]:
        parsed = parse_source(f"permit r on {quote(value)}").file.statements[0]
        assert parsed.pattern.raw == value  # type: ignore[union-attr]


def test_a_file_with_syntax_errors_is_not_formatted() -> None:
    result = format_source("permit read on /nope\n", "bad.sos")
    assert result.text is None
    assert result.diagnostics and result.diagnostics[0].code.startswith("SOS1")


def test_duplicate_clause_is_refused_rather_than_silently_merged() -> None:
    src = "toolpolicy t { mode open\n managed a.b\n managed c.d }\n"
    result = format_source(src, "dup.sos")
    assert result.text is None
    assert result.diagnostics[0].code == "SOS901"


def test_formatting_keeps_decisions(repo_root: Path) -> None:
    text = (DATA / "messy.sos").read_text(encoding="utf-8")
    before, after = compile_source(text, "m.sos"), compile_source(fmt(text), "m.sos")
    for ctx in ({"principal": "bob", "roles": ["a"]}, {"principal": "root", "roles": []}):
        for path in ("/public/x", "/private/y", "/other"):
            d1 = before.decide("files.read", {"path": path}, ctx)
            d2 = after.decide("files.read", {"path": path}, ctx)
            assert (d1.effect, d1.reason, [r.id for r in d1.rule_ids]) == (
                d2.effect,
                d2.reason,
                [r.id for r in d2.rule_ids],
            )


# ------------------------------------------------------------------- CLI


def test_cli_check_mode_reports_and_exits_1(tmp_path: Path) -> None:
    target = tmp_path / "messy.sos"
    shutil.copy(DATA / "messy.sos", target)
    original = target.read_text(encoding="utf-8")
    code, stdout, _ = invoke("fmt", "--check", str(target))
    assert code == 1
    assert f"would reformat {target}" in stdout
    assert target.read_text(encoding="utf-8") == original
    code, _, _ = invoke("fmt", "--check", str(DATA / "messy.formatted.sos"))
    assert code == 0


def test_cli_diff_shows_changes_and_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "messy.sos"
    shutil.copy(DATA / "messy.sos", target)
    code, stdout, _ = invoke("fmt", "--diff", str(target))
    assert code == 0
    assert (
        stdout.startswith("---")
        and "+requirement files.read  { action read;  resource path(args.path) }" in stdout
    )
    assert target.read_text(encoding="utf-8") == (DATA / "messy.sos").read_text(encoding="utf-8")
    code, stdout, _ = invoke("fmt", "--diff", "--check", str(target))
    assert code == 1 and stdout.startswith("---")


def test_cli_write_rewrites_in_place_and_is_then_stable(tmp_path: Path) -> None:
    target = tmp_path / "messy.sos"
    shutil.copy(DATA / "messy.sos", target)
    code, _, stderr = invoke("fmt", "--write", str(target))
    assert code == 0 and "reformatted" in stderr
    assert target.read_text(encoding="utf-8") == (DATA / "messy.formatted.sos").read_text(
        encoding="utf-8"
    )
    code, _, stderr = invoke("fmt", "--write", str(target))
    assert code == 0 and "0 files reformatted" in stderr
    assert not list(tmp_path.glob(".*.fmt"))  # no temporary file left behind


def test_cli_leaves_unparseable_files_untouched(tmp_path: Path) -> None:
    target = tmp_path / "bad.sos"
    shutil.copy(DATA / "bad" / "syntax.sos", target)
    before = target.read_bytes()
    code, _, stderr = invoke("fmt", "--write", str(target))
    assert code == 1
    assert "error[SOS1" in stderr and "not formatted" in stderr
    assert target.read_bytes() == before


def test_cli_stdout_and_stdin_modes() -> None:
    code, stdout, _ = invoke("fmt", str(DATA / "messy.sos"))
    assert code == 0 and stdout == (DATA / "messy.formatted.sos").read_text(encoding="utf-8")
    code, stdout, _ = invoke("fmt", "-", stdin='permit   read on "/x"')
    assert code == 0 and stdout == 'permit read on "/x"\n'
    code, _, stderr = invoke("fmt", "-", stdin="permit ??")
    assert code == 1 and "SOS10" in stderr


def test_cli_check_and_diff_read_stdin_as_they_read_a_file() -> None:
    """`fmt --check -` printed stdin formatted and exited 0 whatever it held, so a CI step
    piping a policy through it passed unformatted text; --diff printed no diff."""
    messy = (DATA / "messy.sos").read_text(encoding="utf-8")
    tidy = (DATA / "messy.formatted.sos").read_text(encoding="utf-8")
    code, stdout, stderr = invoke("fmt", "--check", "-", stdin=messy)
    assert (code, stdout) == (1, "would reformat <stdin>\n")
    assert "1 file would be reformatted, 0 unchanged" in stderr
    code, stdout, _ = invoke("fmt", "--check", "-", stdin=tidy)
    assert (code, stdout) == (0, "")
    code, stdout, _ = invoke("fmt", "--diff", "-", stdin=messy)
    assert code == 0 and stdout.startswith("--- <stdin> (original)\n+++ <stdin> (formatted)\n")
    code, _, _ = invoke("fmt", "--write", "-", stdin=messy)  # stdin is no file to rewrite
    assert code == 2


def test_cli_flag_conflicts_are_usage_errors() -> None:
    code, _, _ = invoke("fmt", "--write", "--check", str(DATA / "messy.sos"))
    assert code == 2
    code, _, _ = invoke("fmt", "-", str(DATA / "messy.sos"))
    assert code == 2


def test_cli_write_failure_is_reported_not_crashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sharedos.cli.policy._fmt as fmt_mod

    target = tmp_path / "messy.sos"
    shutil.copy(DATA / "messy.sos", target)

    def refuse(path: Path, text: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(fmt_mod, "_write_atomically", refuse)
    code, _, stderr = invoke("fmt", "--write", str(target))
    assert code == 1
    assert "cannot write: Permission denied" in stderr
    assert target.read_text(encoding="utf-8") == (DATA / "messy.sos").read_text(encoding="utf-8")


# ----------------------------------------- what check accepts, fmt accepts (issue 13)

_SIMPLE = (
    "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
    'permit read on "/a/**" when "x" in context.roles and context.tenant == "t"\n'
)


def test_a_bom_and_crlf_file_is_already_formatted() -> None:
    src = "\ufeff" + _SIMPLE.replace("\n", "\r\n")
    result = format_source(src, "x.sos")
    assert result.text == src  # not "every line changed"


def test_fmt_ends_a_line_at_a_carriage_return_alone_as_check_does(tmp_path: Path) -> None:
    # check, eval and the kernel read a CR alone as a line end (sharedos.textfile): here
    # a comment and a condition, '... when false or true'. fmt parsed the text raw, took
    # '# c<CR>false or' for one comment, moved it after the pattern, and wrote a file
    # that no longer compiled; and '# note<CR>forbid ...' stayed a comment to it alone
    head = "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
    broken = head + 'permit read on "/**" when # c\rfalse or\n  true\n'
    hidden = head + 'permit read on "/**"  # note\rforbid read on "/secret/**"\n'
    for src in (broken, hidden, hidden.replace("\n", "\r\n")):
        path = tmp_path / "p.sos"
        path.write_bytes(src.encode())
        code, _, err = invoke("check", str(path))
        assert code == 0, err
        read = compile_source(src.replace("\r\n", "\n").replace("\r", "\n"), "p.sos")
        code, _, err = invoke("fmt", "--write", str(path))
        assert code == 0, err
        out = path.read_bytes().decode()
        assert "\r" not in out.replace("\r\n", "\n"), out  # no CR alone is left
        code, _, err = invoke("check", str(path))
        assert code == 0, err
        again = compile_source(out.replace("\r\n", "\n"), "p.sos")
        for p in ("/secret/k", "/a"):
            args, ctx = {"path": p}, {"principal": "a"}
            assert (
                again.decide("files.read", args, ctx).allowed
                == read.decide("files.read", args, ctx).allowed
            ), (src, p)
        assert fmt(out) == out


def test_line_width_breaks_long_rules_one_operand_per_line() -> None:
    result = format_source(_SIMPLE, "x.sos", width=50)
    assert result.text is not None
    assert result.text.splitlines()[2:] == [
        'permit read on "/a/**"',
        '  when "x" in context.roles',
        '    and context.tenant == "t"',
    ]
    assert format_source(result.text, "x.sos", width=50).text == result.text
    assert format_source(result.text, "x.sos").text == _SIMPLE  # without a width: one line


def test_comments_inside_a_rule_stay_beside_their_operand() -> None:
    src = _SIMPLE.replace(" and ", "  # first\n  and ") + "# end\n"
    out = format_source(src, "x.sos").text
    assert out is not None
    assert '  when "x" in context.roles  # first' in out
    assert format_source(out, "x.sos").text == out


def test_fmt_reads_at_most_what_check_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # check stops at textfile.DEFAULT_LIMIT; fmt read a file or stdin whole, so
    # 'fmt <(yes)' grew until memory ran out (SOS900 MemoryError under a ulimit).
    from sharedos import textfile

    monkeypatch.setattr(textfile, "DEFAULT_LIMIT", 1024)
    text = "namespace files\n" + "# filler\n" * 200
    big = tmp_path / "big.sos"
    big.write_text(text)
    code, stdout, stderr = invoke("fmt", str(big))
    assert code == 1 and stdout == ""
    assert "error[SOS001]" in stderr and "larger than 1,024 bytes" in stderr
    code, stdout, stderr = invoke("fmt", "-", stdin=text)
    assert code == 1 and stdout == ""
    assert "error[SOS001]" in stderr and "larger than 1,024 bytes" in stderr


def test_a_whole_float_past_its_shortest_spelling_is_written_exactly() -> None:
    # repr() spells 1234567890123456768.0 as 1.2345678901234568e+18, a number that float
    # is not (SOS105): the formatted file must still load, as the same number.
    text = (
        "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
        'permit read on "/a/**" when args.n == 1234567890123456768.0 or args.n == 1e20\n'
    )
    out = fmt(text)
    assert "1234567890123456768.0" in out and "1e+20" in out
    policy = compile_source(out, "t.sos")
    for n, allowed in [(1234567890123456768, True), (10**20, True), (1234567890123456769, False)]:
        assert policy.decide("files.read", {"path": "/a/x", "n": n}, {}).allowed is allowed
