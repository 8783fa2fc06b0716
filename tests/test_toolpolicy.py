"""ToolPolicy: the ADR's strict checks hold for policies built in Python too."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sharedos.toolpolicy import RunMode, ToolPolicy


def test_strict_with_external_direct_is_rejected() -> None:
    with pytest.raises(ValidationError, match="strict but lists external_direct"):
        ToolPolicy(
            name="ci",
            mode=RunMode.STRICT,
            managed=("files.*",),
            harness_local=("patch",),
            external_direct=("jira",),
        )


def test_strict_with_empty_local_surface_is_rejected() -> None:
    with pytest.raises(ValidationError, match="empty local surface is misdeclaring itself"):
        ToolPolicy(name="ci", mode="strict", managed=("files.*",))


def test_open_may_declare_external_direct() -> None:
    policy = ToolPolicy(name="dev", mode="open", managed=("files.*",), external_direct=("jira",))
    assert "external_direct" in policy.strict_claim()


@pytest.mark.parametrize(
    ("pattern", "tool", "expected"),
    [
        ("files.*", "files.read", True),
        ("files.*", "files.admin.purge", False),
        ("files.**", "files.admin.purge", True),
        ("files.*", "filesXread", False),
        ("github.search", "github.search", True),
        ("github.search", "github.searchx", False),
        ("**", "anything.at.all", True),
    ],
)
def test_managed_patterns(pattern: str, tool: str, expected: bool) -> None:
    policy = ToolPolicy(name="p", mode="open", managed=(pattern,))
    assert policy.is_managed(tool) is expected


@pytest.mark.parametrize("bad", ["files.*x", "files..read", "", "files read", "*files", "a.**.b"])
def test_bad_managed_patterns_are_rejected(bad: str) -> None:
    with pytest.raises(ValidationError, match="managed pattern"):
        ToolPolicy(name="p", mode="open", managed=(bad,))


def test_local_names_must_be_tool_names() -> None:
    with pytest.raises(ValidationError, match="not a valid tool name"):
        ToolPolicy(name="p", mode="strict", managed=("files.*",), harness_local=("shell bounded",))


def test_strict_claim_names_the_local_tools() -> None:
    policy = ToolPolicy(
        name="ci-strict",
        mode="strict",
        managed=("files.*", "github.search"),
        harness_local=("patch", "shell.bounded"),
    )
    claim = policy.strict_claim()
    assert "patch" in claim and "shell.bounded" in claim
    assert "does not authorize" in claim


def test_copy_with_a_new_managed_set_answers_for_the_new_set() -> None:
    policy = ToolPolicy(name="p", mode="open", managed=("files.*",))
    assert policy.is_managed("files.read")
    narrowed = policy.model_copy(update={"managed": ("github.search",)})
    assert not narrowed.is_managed("files.read")
    assert narrowed.is_managed("github.search")


def test_a_copy_is_validated_like_any_run_policy() -> None:
    """``model_copy(update=...)`` skipped the strict-run checks: a strict copy listing
    external_direct tools, or naming no local tool, was accepted, and its
    ``strict_claim`` said that no external_direct tools were declared."""
    strict = ToolPolicy(
        name="ci-strict", mode="strict", managed=("files.*",), harness_local=("patch",)
    )
    with pytest.raises(ValidationError, match="external_direct"):
        strict.model_copy(update={"external_direct": ("browser.open",)})
    with pytest.raises(ValidationError, match="harness_local"):
        strict.model_copy(update={"harness_local": ()})
    with pytest.raises(ValidationError):
        strict.model_copy(update={"managed": ("not a pattern",)})
    opened = strict.model_copy(update={"mode": RunMode.OPEN, "external_direct": ("browser.open",)})
    assert "browser.open" in opened.strict_claim()
