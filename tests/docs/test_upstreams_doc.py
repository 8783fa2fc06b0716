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


def test_an_upstream_naming_per_person_credentials_is_per_person_when_identity_is_unset() -> None:
    """The page said `"shared" (default)`; an upstream with `groups` and no `identity` is
    served per person (and `identity = "shared"` beside them is refused)."""
    from sharedos.harness.hostconfig import HostConfigError, parse_host_config

    doc = " ".join((REPO / "docs" / "upstreams.md").read_text(encoding="utf-8").split())
    assert '`"per-person"` for one with any of them' in doc
    table = '[upstream.t]\ncommand = "t"\n[upstream.t.groups.ops]\nT_TOKEN = { store = "ops" }\n'
    assert parse_host_config(table, "h.toml").upstream["t"].identity == "per-person"
    shared = table.replace('command = "t"\n', 'command = "t"\nidentity = "shared"\n')
    try:
        parse_host_config(shared, "h.toml")
    except HostConfigError as exc:
        assert "identity" in " ".join(exc.problems)
    else:
        raise AssertionError('identity = "shared" beside groups was accepted')
