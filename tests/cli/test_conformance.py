"""``sharedos conformance run`` and ``sharedos demo`` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sharedos.cli.main import main
from tests.mounts import MountFn, fill

SHAPES = ("responses", "anthropic", "pi", "dsh")


def test_conformance_run_scripted_writes_three_reports(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    result = CliRunner().invoke(
        main, ["conformance", "run", "--column", "scripted", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "92 passed, 0 failed, 0 not exercised" in result.output  # 23 rows x 4 shapes
    for name in (
        "conformance-scripted.json",
        "conformance-scripted.txt",
        "conformance-scripted.html",
    ):
        assert (out / name).is_file()
    data = json.loads((out / "conformance-scripted.json").read_text(encoding="utf-8"))
    assert [c["column_id"] for c in data["columns"]] == [f"scripted/{s}" for s in SHAPES]
    ident = data["columns"][0]["identity"]
    assert set(ident) >= {
        "harness",
        "harnessVersion",
        "column",
        "declaredModel",
        "mcpSupport",
        "catalogHash",
        "policyBundleHash",
        "sharedosVersion",
    }
    assert data["catalog_check"]["equal"] is True


def test_columns_out_keeps_every_attempt_and_grade_privately(tmp_path: Path) -> None:
    """``--columns-out``: every column as it ran (attempts, notes) and each cell's grade, 0600."""
    out, columns = tmp_path / "reports", tmp_path / "columns.json"
    argv = ["conformance", "run", "--column", "scripted", "--shape", "pi", "--out", str(out)]
    result = CliRunner().invoke(main, [*argv, "--columns-out", str(columns), "--jobs", "2"])
    assert result.exit_code == 0, result.output
    assert f"columns report: {columns}" in result.output
    assert columns.stat().st_mode & 0o777 == 0o600
    doc = json.loads(columns.read_text(encoding="utf-8"))
    (run,) = doc["columns"]
    assert run["column_id"] == "scripted/pi" and run["attempts"]
    grades = doc["grades"]["scripted/pi"]
    assert grades["public-read-allowed"]["grade"] == "passed"
    denied = [a for a in run["attempts"] if a["outcome"] == "denied"]
    assert denied and all(a["record"]["call_id"] == a["call_id"] for a in denied)


def test_conformance_run_one_shape(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["conformance", "run", "--column", "scripted", "--shape", "pi", "--out", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    assert "scripted/pi" in result.output and "scripted/dsh" not in result.output


def test_broken_rules_exit_non_zero_with_the_failed_cells(tmp_path: Path, repo_root: Path) -> None:
    src = (repo_root / "rules" / "files.sos").read_text(encoding="utf-8")
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "files.sos").write_text(
        src.replace('forbid * on "/private/**"', 'forbid * on "/nowhere/**"')
    )
    result = CliRunner().invoke(
        main,
        [
            "conformance",
            "run",
            "--column",
            "scripted",
            "--rules",
            str(rules),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 1
    assert "8 failed" in result.output
    text = (tmp_path / "o" / "conformance-scripted.txt").read_text(encoding="utf-8")
    assert (
        "traversal-denied in scripted/dsh: expected denied/forbidden, got denied/no_matching_permit"
        in text
    )


def test_rules_that_do_not_compile_are_a_message_not_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sos"
    bad.write_text("namespace files\npermit read on\n", encoding="utf-8")
    result = CliRunner().invoke(
        main,
        ["conformance", "run", "--column", "scripted", "--rules", str(bad), "--out", str(tmp_path)],
    )
    assert result.exit_code == 1
    assert "the rules do not compile" in result.output
    assert "bad.sos:2" in result.output
    assert "Traceback" not in result.output


def test_bad_manifest_is_a_positioned_message(tmp_path: Path, test_data: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "conformance",
            "run",
            "--column",
            "scripted",
            "--manifest",
            str(test_data / "conformance" / "bad-reason.toml"),
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 1
    assert "bad-reason.toml:29:1" in result.output
    assert "Traceback" not in result.output


def test_an_unknown_harness_is_a_usage_error_before_anything_runs(tmp_path: Path) -> None:
    host = tmp_path / "host.toml"
    host.write_text("[harness.codex]\n")
    res = CliRunner().invoke(
        main,
        ["conformance", "run", "--column", "mcp", "--harness", "codx", "--host-config", str(host),
         "--out", str(tmp_path / "out")],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "unknown harness 'codx'" in res.output and "names: codex" in res.output
    assert not (tmp_path / "out").exists()


def test_a_run_that_exercised_nothing_exits_non_zero(tmp_path: Path) -> None:
    """Every cell not available (the CLI cannot start): reports are written, exit 3."""
    host = tmp_path / "host.toml"
    host.write_text("[harness.codex]\ncommand = ['/nonexistent/codex']\n")
    res = CliRunner().invoke(
        main,
        ["conformance", "run", "--column", "mcp", "--harness", "codex", "--host-config", str(host),
         "--out", str(tmp_path / "out")],
    )  # fmt: skip
    assert res.exit_code == 3, res.output
    assert "nothing was exercised" in res.output
    assert (tmp_path / "out" / "conformance-mcp.json").is_file()


def test_a_broken_host_configuration_is_positioned_not_a_traceback(tmp_path: Path) -> None:
    host = tmp_path / "host.toml"
    host.write_text("[harness.codex]\ntransport = 'pigeon'\n")
    res = CliRunner().invoke(
        main, ["conformance", "run", "--column", "live", "--host-config", str(host)]
    )
    assert res.exit_code == 1 and f"{host}:2:1: harness.codex.transport" in res.output
    assert "Traceback" not in res.output


def test_a_full_disk_leaves_the_earlier_reports_whole_and_says_so_in_one_line(
    tmpfs: MountFn,
) -> None:
    """Before, the reports were truncated in place and written: a full disk was a Python
    traceback, and the reports of the run before (the same paths) were left cut to what
    fitted. Now each report replaces the one before whole or not at all, and the run
    says which one it could not write."""
    out = tmpfs("2m") / "reports"
    argv = ["conformance", "run", "--column", "scripted", "--out", str(out)]
    first = CliRunner().invoke(main, [*argv, "--shape", "pi"])
    assert first.exit_code == 0, first.output
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    fill(out.parent)
    again = CliRunner().invoke(main, argv)  # every shape: larger reports than the first
    assert again.exit_code == 1 and not isinstance(again.exception, OSError), again.output
    (line,) = [ln for ln in again.output.splitlines() if "No space left" in ln]
    assert line.startswith("Error: cannot write ") and str(out) in line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing cut, no stray file


_CONTROL_MANIFEST = """
version = 1
title = "t"
default_context = "alice"
default_policy = "p"
[contexts.alice]
principal = "alice"
[policies.p]
name = "p"
mode = "strict"
managed = ["files.read"]
harness_local = ["shell.bounded"]
[sandbox]
[sandbox.files]
"/public/a.txt" = "public file a\\n"
[[rows]]
id = "control-name"
title = "A tool string with control characters"
tool = "files\\u001b[2J\\u001b]0;owned\\u0007\\n* forged line\\u202eread"
arguments = { path = "/public/a.txt" }
expect = { outcome = "denied", reason = "tool_unavailable" }
"""


def test_a_tool_string_with_control_characters_is_spelled_out_in_every_report(
    tmp_path: Path,
) -> None:
    """A malformed tool string reaches the kernel raw, but no report or terminal line carries
    its ANSI escapes, its newline (a forged report line) or its bidi override."""
    manifest, out = tmp_path / "m.toml", tmp_path / "reports"
    manifest.write_text(_CONTROL_MANIFEST, encoding="utf-8")
    argv = ["conformance", "run", "--column", "scripted", "--shape", "pi"]
    res = CliRunner().invoke(main, [*argv, "--manifest", str(manifest), "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = (out / "conformance-scripted.txt").read_text(encoding="utf-8")
    html = (out / "conformance-scripted.html").read_text(encoding="utf-8")
    for shown in (res.output, text, html):
        assert not [c for c in shown if (ord(c) < 0x20 and c != "\n") or c == "\u202e"]
        assert not any(line.startswith("* forged line") for line in shown.splitlines())
    assert "files\\x1b[2J" in text and "files\\x1b[2J" in html
    data = json.loads((out / "conformance-scripted.json").read_text(encoding="utf-8"))
    assert data["cells"][0][0]["grade"] == "passed"


def test_columns_out_naming_a_report_is_a_usage_error_before_anything_runs(
    tmp_path: Path,
) -> None:
    """``--columns-out`` on the JSON report's path silently replaced that report with the
    columns document, while the summary still listed it as the json report."""
    out = tmp_path / "reports"
    argv = ["conformance", "run", "--column", "scripted", "--shape", "pi", "--out", str(out)]
    for name in ("conformance-scripted.json", "conformance-scripted.html"):
        clash = tmp_path / "reports" / ".." / "reports" / name
        res = CliRunner().invoke(main, [*argv, "--columns-out", str(clash)])
        assert res.exit_code == 2, res.output
        assert "is where the" in res.output and "name another file" in res.output
        assert not out.exists()  # nothing ran, nothing was written
