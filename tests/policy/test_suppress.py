"""``# sos:ignore CODE: reason``: per-statement, per-code suppression, counted, audited;
the shipped policy is strict-clean; ``compile`` counts warnings instead of reprinting them."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sharedos.cli.policy import main
from sharedos.policy import compile_source

REPO = Path(__file__).resolve().parents[2]

CONSTANT = (
    "namespace memory\n"
    'requirement memory.read  { action read;  resource "graph" }  # sos:ignore SOS208: one graph\n'
    'requirement memory.write { action write; resource "graph" }\n'
    "# sos:ignore SOS208, SOS504: the upstream holds one graph\n"
    'requirement memory.drop { action drop; resource "graph" }\n'
    'permit read on "graph"\n'
)


def _check(tmp_path: Path, text: str, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    (tmp_path / "p.sos").write_text(text)
    result = CliRunner().invoke(main, ["check", str(tmp_path / "p.sos"), "--format", "json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_the_shipped_policy_is_strict_clean() -> None:
    result = CliRunner().invoke(
        main, ["check", "--strict", str(REPO / "rules"), str(REPO / "policy")]
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("0 errors, 0 warnings, 9 suppressed")


def test_a_suppression_silences_its_code_on_its_statement_only_and_is_counted(
    tmp_path: Path,
) -> None:
    code, doc = _check(tmp_path, CONSTANT, "--strict")
    # memory.write has no suppression: its SOS208 stays; SOS504 is unused on memory.drop
    found = [(d["code"], d["line"]) for d in doc["diagnostics"]]
    assert found == [("SOS208", 3), ("SOS515", 4)], found
    assert doc["suppressed"] == 2 and code == 1
    text = CliRunner().invoke(main, ["check", str(tmp_path / "p.sos")]).output
    assert text.strip().endswith("0 errors, 2 warnings, 2 suppressed")


def test_a_suppression_without_a_reason_or_for_an_unknown_code_is_reported(
    tmp_path: Path,
) -> None:
    for comment, message in (
        ("# sos:ignore SOS208", "gives no reason"),
        ("# sos:ignore SOS208:   ", "gives no reason"),
        ("# sos:ignore SOS999: x", "unknown diagnostic code SOS999"),
        ("# sos:ignore: x", "names warning codes"),
        ("# sos:ignore SOS208 because", "names warning codes"),
    ):
        text = (
            "namespace memory\n"
            f'requirement memory.read {{ action read; resource "graph" }}  {comment}\n'
        )
        _code, doc = _check(tmp_path, text)
        codes = [d["code"] for d in doc["diagnostics"]]
        assert sorted(codes) == ["SOS208", "SOS514"], (comment, codes)
        assert any(message in d["message"] for d in doc["diagnostics"]), comment
        assert doc["suppressed"] == 0


def test_an_error_cannot_be_suppressed(tmp_path: Path) -> None:
    text = (
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'permit delete on "/a/**"  # sos:ignore SOS201: later\n'
    )
    code, doc = _check(tmp_path, text)
    assert code == 1
    assert sorted(d["code"] for d in doc["diagnostics"]) == ["SOS201", "SOS514"]
    assert any("errors cannot be suppressed" in d["message"] for d in doc["diagnostics"])


def test_a_suppression_covers_a_multi_line_rule_and_its_annotations(tmp_path: Path) -> None:
    text = (
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        "# sos:ignore SOS512: the handler canonicalizes again and we want the raw spelling\n"
        '@id("raw")\n'
        'permit read on "/**"\n'
        '  when segment(args.path, 1) == "public"\n'
    )
    code, doc = _check(tmp_path, text, "--strict")
    assert code == 0 and doc["suppressed"] == 1 and doc["diagnostics"] == []


def test_compiled_diagnostics_leave_suppressed_warnings_out() -> None:
    policy = compile_source(CONSTANT, "m.sos")
    assert [(d.code, d.line) for d in policy.diagnostics] == [("SOS208", 3)]


def test_compile_counts_warnings_and_prints_them_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "p.sos").write_text(CONSTANT)
    out = tmp_path / "b.json"
    quiet = CliRunner().invoke(main, ["compile", str(tmp_path / "p.sos"), "-o", str(out)])
    assert quiet.exit_code == 0
    assert "warning[" not in quiet.stderr
    assert "2 warnings (`sharedos-policy check" in quiet.stderr
    loud = CliRunner().invoke(
        main, ["compile", str(tmp_path / "p.sos"), "-o", str(out), "--warnings"]
    )
    assert loud.stderr.count("warning[SOS208]") == 1 and "warning[SOS515]" in loud.stderr
    clean = CliRunner().invoke(
        main, ["compile", str(REPO / "rules"), str(REPO / "policy"), "-o", str(out)]
    )
    assert clean.exit_code == 0 and clean.stderr == ""
