"""``[approvals]`` in the host file: what the kernel and ``sharedos approvals`` take from it."""

from __future__ import annotations

import pytest

from sharedos.harness.hostconfig import HostConfigError, parse_host_config

HOST = """
version = 1

[harness.claude-code]
provider = "scripted"

[approvals]
request_ttl_s = 120
approval_ttl_s = 60
elicitation = false
elicitation_timeout_s = 30

[approvals.groups]
release = ["rita", "maya"]

[approvals.approvers.maya]
roles = ["maintainer"]
"""


def test_the_table_becomes_the_kernels_settings() -> None:
    settings = parse_host_config(HOST, "host.toml").approvals.settings()
    assert (settings.request_ttl_s, settings.approval_ttl_s) == (120, 60)
    assert settings.elicitation is False and settings.elicitation_timeout_s == 30
    assert settings.groups_of("rita") == {"release"} and settings.groups_of("bob") == set()
    assert settings.roles_of("maya") == {"maintainer"} and settings.roles_of("rita") == set()


def test_defaults_without_the_table() -> None:
    settings = parse_host_config(
        'version = 1\n[harness.pi]\nprovider = "scripted"\n', "h"
    ).approvals
    assert settings.elicitation is True and settings.approval_ttl_s == 900


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("approval_ttl_s = 60", "approval_ttl_s = 0", "approval_ttl_s"),
        ("approval_ttl_s = 60", "ttl = 5", "ttl"),
        ("elicitation = false", 'elicitation = "maybe"', "elicitation"),
        ('roles = ["maintainer"]', 'roles = "maintainer"', "roles"),
    ],
)
def test_bad_values_are_refused_at_their_key(old: str, new: str, where: str) -> None:
    with pytest.raises(HostConfigError) as err:
        parse_host_config(HOST.replace(old, new), "host.toml")
    assert any(where in p and "host.toml:" in p for p in err.value.problems), err.value.problems
