"""``sharedos host check``: every problem at once, positioned; secrets never printed."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sharedos.cli.main import main


def test_host_check_cli(tmp_path: Path) -> None:
    good = tmp_path / "host.toml"
    good.write_text(
        "[harness.claude-code]\nprovider = 'host'\ndeclared_model = 'm'\n"
        "[harness.claude-code.env]\nANTHROPIC_API_KEY = 'sk-very-secret'\n"
    )
    res = CliRunner().invoke(main, ["host", "check", str(good)])
    assert res.exit_code == 0, res.output
    assert "ANTHROPIC_API_KEY" in res.output and "sk-very-secret" not in res.output
    bad = tmp_path / "bad.toml"
    bad.write_text("[harness.codex]\n\ntransport = 'carrier-pigeon'\n")
    res = CliRunner().invoke(main, ["host", "check", str(bad)])
    assert res.exit_code == 1
    assert f"error: {bad}:3:1: harness.codex.transport" in res.output
    assert "Traceback" not in res.output
    res = CliRunner().invoke(main, ["host", "check", str(tmp_path / "missing.toml")])
    assert res.exit_code == 1 and "cannot read host configuration" in res.output


def test_host_check_reports_every_problem_at_its_own_key(test_data: Path) -> None:
    """One run shows them all, in file order, each at the key it is about (issue 13)."""
    path = test_data / "harness" / "host.many-problems.toml"
    res = CliRunner().invoke(main, ["host", "check", str(path)])
    assert res.exit_code == 1
    lines = [ln.removeprefix(f"error: {path}:") for ln in res.output.splitlines()]
    expected = [
        "4:1: harness.codex.transport",
        "5:1: harness.codex.timeout_s",
        "7:1: harness.weird: 'kind' is required",
        "8:1: harness.weird.command",  # the entry without a kind is still checked
        "11:1: harness.pi.kind: unknown harness kind 'nope'",
        "12:9: harness.pi.env: 'BAD NAME' is not a valid environment variable name",
        "12:27: harness.pi.env.GOOD: must be a string",  # a second bad key of the same table
        "13:1: harness.pi.vendor",
        "17:1: harness.claude-code: provider 'scripted'",  # at declared_model
        "19:1: harness.claude-code.env.K: must be a string",
        "22:1: evidence.synchronous: Input should be 'NORMAL' or 'FULL'",
        "24:1: bogus: Extra inputs are not permitted",
    ]
    assert len(lines) == len(expected), res.output
    for line, want in zip(lines, expected, strict=True):
        assert line.startswith(want), (line, want)
