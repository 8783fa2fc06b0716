"""docs/approvals.md's policy example is accepted by ``sharedos-policy check`` and its tests pass."""

from __future__ import annotations

import re
from pathlib import Path

import click
from click.testing import CliRunner

from sharedos.cli.policy import main as policy_cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "approvals.md"


def _example() -> str:
    blocks = re.findall(r"^```sos\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.M | re.S)
    assert blocks, "docs/approvals.md has no sos example"
    return str(blocks[0])


def test_the_example_checks_and_its_tests_pass(tmp_path: Path) -> None:
    policy = tmp_path / "approvals.sos"
    policy.write_text(_example(), encoding="utf-8")
    checked = CliRunner().invoke(policy_cli, ["check", str(policy)])
    assert checked.exit_code == 0, checked.output
    assert "0 errors" in checked.output
    tested = CliRunner().invoke(policy_cli, ["test", str(policy)])
    assert tested.exit_code == 0, tested.output
    assert "2 passed, 0 failed" in tested.output


def test_the_host_file_option_says_what_of_the_host_file_is_used() -> None:
    """``--host-file`` of ``approvals list|show|approve|deny`` judges an approval's status
    by the host's ``approval_ttl_s`` (docs/approvals.md); its ``--help`` named only the
    url, approvers and groups, so ``list`` showing an approval ``expired`` with the host
    file and ``approved`` without it had no explanation there."""
    from sharedos.cli.approvals import approvals

    assert "approval_ttl_s" in DOC.read_text(encoding="utf-8")
    for name in ("list", "show", "approve", "deny"):
        command = approvals.commands[name]
        (option,) = [p for p in command.params if p.name == "host_file"]
        assert isinstance(option, click.Option) and "approval_ttl_s" in (option.help or ""), name
