"""The HTML report is one self-contained file and renders in headless Debian chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sharedos.conformance.columns.base import ColumnOptions, ColumnRun
from sharedos.conformance.html import render_html
from sharedos.conformance.manifest import Manifest
from sharedos.conformance.report import build_report, write_reports
from sharedos.conformance.runner import run_report
from sharedos.identity import ColumnKind

from .png import colour_counts, read_png
from .test_scripted import _broken_rules

CHROMIUM = "/usr/bin/chromium"
PASS_BG = (0xE6, 0xF4, 0xEA)
FAIL_BG = (0xFC, 0xE8, 0xE6)


async def _mixed_report(manifest: Manifest, tmp_path: Path) -> object:
    _, good = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(
            manifest=manifest, workdir=tmp_path / "a", shapes=("responses", "pi")
        ),
    )
    rules = _broken_rules(tmp_path)
    _, bad = await run_report(
        manifest,
        ["scripted"],
        options=ColumnOptions(
            manifest=manifest, workdir=tmp_path / "b", shapes=("anthropic",), policy_paths=(rules,)
        ),
    )
    dsh = ColumnRun.unavailable("mcp/dsh", ColumnKind.MCP, "dsh", "dsh cannot be installed here")
    return build_report(manifest, [*good, *bad, dsh])


@pytest.mark.anyio
async def test_html_is_self_contained(manifest: Manifest, tmp_path: Path) -> None:
    report = await _mixed_report(manifest, tmp_path)
    html = render_html(report)  # type: ignore[arg-type]
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "url(" not in html
    assert "dsh cannot be installed here" in html  # the unavailable column and why
    assert "CATALOGUE MISMATCH" not in html
    assert html.count('class="cell failed"') == 2  # broken forbid: two rows in one shape


@pytest.mark.anyio
async def test_html_renders_in_headless_chromium(manifest: Manifest, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: run scripts/ensure-system-deps.sh (Debian package chromium)"
        )
    report = await _mixed_report(manifest, tmp_path)
    paths = write_reports(report, tmp_path / "out")  # type: ignore[arg-type]
    png = tmp_path / "report.png"
    profile = tmp_path / "profile"
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--screenshot={png}",
            "--window-size=1400,1000",
            paths["html"].resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert png.is_file() and png.stat().st_size > 20_000
    width, height, _ = read_png(png)
    assert (width, height) == (1400, 1000)
    colours = colour_counts(png)
    # the matrix is visible at a glance: green passed cells and red failed cells on screen
    assert colours[PASS_BG] > 2_000
    assert colours[FAIL_BG] > 100
    shutil.rmtree(profile, ignore_errors=True)


def test_a_secret_holding_a_control_character_is_scrubbed_before_it_is_spelled_out(
    manifest: Manifest, tmp_path: Path
) -> None:
    """The text and HTML reports spell a control character ``\\xNN``; a host secret with a
    newline or a tab in it (a PEM key) must be gone before that, in every report."""
    from sharedos.redaction import Redactor

    secret = "-----BEGIN KEY-----\nc2VjcmV0LWtleS1ib2R5\t-----END KEY-----"
    column = ColumnRun.unavailable("mcp/x", ColumnKind.MCP, "x", "cannot run")
    column.notes.append(f"the harness said: {secret}")
    column.unavailable_reason = f"it printed {secret}"
    paths = write_reports(
        build_report(manifest, [column]), tmp_path, stem="r", secrets=Redactor([secret])
    )
    for path in paths.values():
        text = path.read_text(encoding="utf-8")
        assert "[redacted]" in text
        assert "c2VjcmV0LWtleS1ib2R5" not in text and "BEGIN KEY" not in text
