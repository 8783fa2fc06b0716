"""Model-facing sentences: name the tool, resource and rules; reveal no host paths."""

from __future__ import annotations

from sharedos.kernel.messages import refusal_message, shown_name
from sharedos.outcomes import ReasonCode
from sharedos.policy.decision import RuleRef


def test_forbidden_sentence_names_rules_by_file_base_name_only() -> None:
    refs = (
        RuleRef("files-private-admins-only", "/srv/secret/layout/rules/files.sos", 27, 1, "forbid"),
        RuleRef(
            "/srv/secret/layout/rules/extra.sos:4",
            "/srv/secret/layout/rules/extra.sos",
            4,
            1,
            "forbid",
        ),
    )
    text = refusal_message(
        ReasonCode.FORBIDDEN, "files.read", resource="/private/a.txt", rule_ids=refs
    )
    assert text == (
        "SharedOS policy denied files.read on /private/a.txt (forbidden by rules "
        "files-private-admins-only (files.sos:27:1), extra.sos:4:1). This is an authorization "
        "decision; retrying the same call will not succeed."
    )
    assert "/srv/secret" not in text


def test_every_reason_has_a_sentence_and_denials_say_retry_will_not_help() -> None:
    for reason in ReasonCode:
        text = refusal_message(reason, "files.read", detail="d")
        assert "files.read" in text
        said_final = "retrying the same call will not succeed" in text
        assert said_final == (
            reason.value
            in {
                "tool_unavailable",
                "not_in_run_policy",
                "not_in_turn_catalog",
                "no_matching_permit",
                "forbidden",
                "unresolvable_resource",
                "turn_closed",
            }
        ), reason


def test_odd_names_are_quoted_and_truncated() -> None:
    assert shown_name("files.read") == "files.read"
    assert shown_name("has space") == "'has space'"
    assert shown_name("x" * 200).endswith("...") and len(shown_name("x" * 200)) == 80
    assert shown_name(200) == "200"
    assert shown_name("") == "''"
