"""``[approvals]`` in the host file: what the kernel and ``sharedos approvals`` take from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedos.harness.hostconfig import HostConfigError, parse_host_config
from sharedos.kernel.approvals import ApprovalSettings
from sharedos.outcomes import Outcome, ReasonCode

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


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("request_ttl_s = 120", "request_ttl_s = inf", "request_ttl_s"),
        ("request_ttl_s = 120", "request_ttl_s = 1e300", "request_ttl_s"),
        ("approval_ttl_s = 60", "approval_ttl_s = inf", "approval_ttl_s"),
        ("approval_ttl_s = 60", "approval_ttl_s = 1e12", "approval_ttl_s"),
        ("elicitation_timeout_s = 30", "elicitation_timeout_s = inf", "elicitation_timeout_s"),
    ],
)
def test_a_lifetime_that_has_no_expiry_time_is_refused(old: str, new: str, where: str) -> None:
    """Each lifetime becomes an expiry the store writes: an infinite one, or one past the
    last date a timestamp can hold, made every call needing approval fail internal_error
    and ``sharedos approvals approve --host-file`` crash, on a host file ``host check``
    had called ok."""
    with pytest.raises(HostConfigError) as err:
        parse_host_config(HOST.replace(old, new), "host.toml")
    assert any(where in p and "host.toml:" in p for p in err.value.problems), err.value.problems


def test_the_longest_lifetime_accepted_makes_a_request_and_an_approval(tmp_path: Path) -> None:
    from sharedos.evidence.approvals import MAX_TTL_S
    from tests.kernel.test_approvals import ARGS, Host, approve

    h = Host(tmp_path, request_ttl_s=MAX_TTL_S, approval_ttl_s=MAX_TTL_S)
    asked = h.call(ARGS)
    assert asked.reason is ReasonCode.APPROVAL_REQUIRED, asked.content
    host = tmp_path / "host.toml"
    longest = f"request_ttl_s = {MAX_TTL_S:.0f}\napproval_ttl_s = {MAX_TTL_S:.0f}\n"
    host.write_text(
        HOST.replace("request_ttl_s = 120\napproval_ttl_s = 60\n", longest), encoding="utf-8"
    )
    answered = approve(
        h.db, asked.structured["approvalId"], "--host-file", str(host), "--as", "maya"
    )
    assert answered.exit_code == 0, answered.output
    assert h.call(ARGS).outcome is Outcome.SUCCEEDED


def test_the_kernel_refuses_such_a_lifetime_when_it_starts() -> None:
    with pytest.raises(ValueError, match="request_ttl_s"):
        ApprovalSettings(request_ttl_s=float("inf"))
