"""docs/upstreams.md's account of the shipped rules is what ``sharedos-policy`` says of them."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sharedos.cli.policy import main as policy_cli

REPO = Path(__file__).resolve().parents[2]


def test_the_memory_rules_constant_resource_is_suppressed_as_the_doc_says() -> None:
    doc = " ".join((REPO / "docs" / "upstreams.md").read_text(encoding="utf-8").split())
    assert "so `sharedos-policy check --strict` passes and counts them suppressed" in doc
    got = CliRunner().invoke(policy_cli, ["check", "--strict", str(REPO / "rules" / "memory.sos")])
    assert got.exit_code == 0, got.output
    assert "0 errors, 0 warnings, 9 suppressed" in got.output
