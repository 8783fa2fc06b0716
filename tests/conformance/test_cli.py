"""``sharedos conformance run`` and ``sharedos demo`` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from sharedos.cli.main import main

SHAPES = ("responses", "anthropic", "pi", "dsh")


def test_conformance_run_scripted_writes_three_reports(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    result = CliRunner().invoke(
        main, ["conformance", "run", "--column", "scripted", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "56 passed, 0 failed, 0 not exercised" in result.output
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


def test_demo_runs_offline_in_under_a_minute(tmp_path: Path) -> None:
    """What `make demo` runs, as a subprocess from a clean working directory."""
    env = {
        k: v for k, v in os.environ.items() if not k.endswith("_PROXY") and not k.endswith("_proxy")
    }
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "sharedos"), "demo", "--out", str(tmp_path / "reports")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert elapsed < 60
    out = proc.stdout
    for needle in (
        "Check the shipped rules",
        "files.read(/public/../private/a.txt) -> deny [forbidden]",
        "catalogHash:",
        "56 passed, 0 failed, 0 not exercised",
        "html report:",
    ):
        assert needle in out, needle
    for shape in SHAPES:
        assert f"scripted/{shape}" in out
    assert (tmp_path / "reports" / "demo.html").is_file()
