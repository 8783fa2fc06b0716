"""A hand-written context decides exactly as the kernel's AccessContext would."""

from __future__ import annotations

import json

from click.testing import CliRunner

from sharedos.cli.policy import main
from sharedos.kernel.context import AccessContext
from sharedos.policy.context import complete_context


def test_defaults_match_access_context() -> None:
    kernel_view = AccessContext(principal="alice").policy_input
    completed = complete_context({"principal": "alice"})
    assert {k: kernel_view[k] for k in completed} == completed


def test_given_keys_are_kept() -> None:
    assert complete_context({"principal": "a", "roles": ["admin"]})["roles"] == ["admin"]


def test_explain_with_a_bare_principal_has_no_condition_errors(repo_root) -> None:  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(
        main,
        [
            "explain",
            "--tool",
            "files.read",
            "--args",
            json.dumps({"path": "/private/a.txt"}),
            "--context",
            json.dumps({"principal": "alice"}),
            "--format",
            "json",
            str(repo_root / "rules"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "errored" not in result.output
    assert json.loads(result.output)["decision"]["reason"] == "forbidden"
