"""``sharedos-policy check``: diagnostics, exit codes, lints, JSON output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedos.cli.policy import main

DATA = Path(__file__).resolve().parent.parent / "data" / "policy_cli"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_shipped_rules_and_policies_pass(repo_root: Path) -> None:
    code, out = run("check", str(repo_root / "rules"), str(repo_root / "policy"))
    assert code == 0, out
    assert "0 errors" in out


def test_good_policy_exits_zero() -> None:
    code, out = run("check", str(DATA / "good"))
    assert code == 0, out
    assert out.strip().startswith("ok: 1 file checked")


def test_several_syntax_errors_in_one_file_are_all_reported() -> None:
    code, out = run("check", str(DATA / "bad" / "syntax.sos"))
    assert code == 1
    # three independent syntax errors, each with file:line:col, code and a caret excerpt
    assert "syntax.sos:4:33: error[SOS103]" in out
    assert "syntax.sos:5:16: error[SOS102]" in out
    assert "syntax.sos:7:55: error[SOS101]" in out
    assert " 5 | permit read on /unquoted/**" in out
    assert "^^^^^" in out  # the caret line under 'maybe'
    assert "3 errors" in out
    assert "Traceback" not in out


def test_semantic_errors_are_all_reported_with_codes() -> None:
    code, out = run("check", str(DATA / "bad" / "semantic.sos"))
    assert code == 1
    for expected in ("SOS202", "SOS201", "SOS207", "SOS203", "SOS210", "SOS301"):
        assert f"error[{expected}]" in out, expected


def test_json_format_lists_every_diagnostic() -> None:
    code, out = run("check", "--format", "json", str(DATA / "bad"))
    assert code == 1
    payload = json.loads(out)
    assert payload["ok"] is False
    assert payload["errors"] == len(payload["diagnostics"]) >= 9
    first = payload["diagnostics"][0]
    assert {
        "code",
        "severity",
        "message",
        "file",
        "line",
        "col",
        "end_line",
        "end_col",
        "hint",
    } <= set(first)
    files = {d["file"] for d in payload["diagnostics"]}
    assert any(f.endswith("semantic.sos") for f in files)
    assert any(f.endswith("syntax.sos") for f in files)


def test_missing_path_is_a_usage_error() -> None:
    code, out = run("check", str(DATA / "does-not-exist.sos"))
    assert code == 2
    assert "does not exist" in out


def test_directory_without_policy_files_is_a_usage_error(tmp_path: Path) -> None:
    code, out = run("check", str(tmp_path))
    assert code == 2
    assert "no .sos files" in out


def test_unknown_option_is_a_usage_error() -> None:
    code, _ = run("check", "--frobnicate", str(DATA / "good"))
    assert code == 2


def test_not_utf8_file_is_a_diagnostic_not_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.sos"
    bad.write_bytes(b"namespace caf\xe9\n")
    code, out = run("check", str(bad))
    assert code == 1
    assert "SOS001" in out and "UTF-8" in out


def test_binary_garbage_is_reported_not_crashed(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.sos"
    bad.write_text('\x00\x01{{{ permit ]]] ;;; @@@ "unterminated\n}}}', encoding="utf-8")
    code, out = run("check", str(bad))
    assert code == 1
    assert "error[SOS1" in out


def test_lints_are_warnings_and_strict_makes_them_errors() -> None:
    code, out = run("check", str(DATA / "lint.sos"))
    assert code == 0, out
    assert "warning[SOS501]: unknown context attribute context.role" in out
    assert "warning[SOS503]" in out
    assert "warning[SOS504]" in out
    code, out = run("check", "--strict", str(DATA / "lint.sos"))
    assert code == 1
    assert "error[SOS501]" in out
    assert "--strict" in out


def test_catalog_enables_argument_lints() -> None:
    code, out = run("check", "--catalog", str(DATA / "catalog.json"), str(DATA / "lint.sos"))
    assert code == 0
    assert "warning[SOS505]" in out and "args.mode" in out
    assert "warning[SOS506]" in out and "github.get" in out
    # without the catalogue those two lints stay silent
    _, plain = run("check", str(DATA / "lint.sos"))
    assert "SOS505" not in plain and "SOS506" not in plain


def test_context_schema_file_replaces_the_default(tmp_path: Path) -> None:
    policy = tmp_path / "p.sos"
    policy.write_text(
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'permit read on "/t/**" when context.attributes.team == "red"\n'
        'permit read on "/u/**" when context.attributes.department == "x"\n',
        encoding="utf-8",
    )
    _, default = run("check", str(policy))
    assert "SOS501" not in default  # AccessContext.attributes is open
    code, out = run("check", "--context-schema", str(DATA / "context_schema.json"), str(policy))
    assert code == 0
    assert "unknown context attribute context.attributes.department" in out
    assert "context.attributes.team" not in out


def test_bad_option_files_are_usage_errors(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    code, out = run("check", "--catalog", str(broken), str(DATA / "good"))
    assert code == 2 and "not valid JSON" in out
    code, out = run("check", "--context-schema", str(tmp_path / "missing.json"), str(DATA / "good"))
    assert code == 2 and "cannot read" in out
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"not": "a list"}', encoding="utf-8")
    code, out = run("check", "--catalog", str(wrong), str(DATA / "good"))
    assert code == 2 and "JSON list" in out


def test_internal_error_is_a_diagnostic_with_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    import sharedos.cli.policy._check as check_mod

    def explode(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(check_mod, "check_with_suppressions", explode)
    result = CliRunner().invoke(main, ["check", str(DATA / "good")])
    assert result.exit_code == 3
    assert "error[SOS900]: internal error" in result.output
    assert "simulated bug" in result.output
    assert "Traceback" not in result.output


def test_files_in_directories_are_checked_together(tmp_path: Path) -> None:
    # the rule in b.sos uses an action declared in a.sos: fine together
    (tmp_path / "a.sos").write_text(
        "namespace files\nrequirement files.read { action read; resource path(args.path) }\n",
        encoding="utf-8",
    )
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "b.sos").write_text('namespace files\npermit read on "/public/**"\n', encoding="utf-8")
    code, out = run("check", str(tmp_path))
    assert code == 0, out
    assert "2 files checked" in out
    code, out = run("check", str(sub / "b.sos"))
    assert code == 1 and "SOS201" in out


def test_shipped_files_also_pass_from_a_copy(tmp_path: Path, repo_root: Path) -> None:
    shutil.copytree(repo_root / "rules", tmp_path / "rules")
    shutil.copytree(repo_root / "policy", tmp_path / "policy")
    code, out = run("check", str(tmp_path / "rules"), str(tmp_path / "policy"))
    assert code == 0, out
    # --strict: the memory graph's deliberate constant resource (SOS208) is suppressed,
    # with a reason, on each of its requirements, and counted (issue 23)
    code, out = run("check", "--strict", str(tmp_path / "rules"), str(tmp_path / "policy"))
    assert code == 0, out
    assert out.strip().endswith("0 errors, 0 warnings, 9 suppressed"), out
