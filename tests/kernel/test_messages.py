"""Model-facing sentences (the one refusal writer): tool, resource, rule ids; no host paths."""

from __future__ import annotations

from sharedos.kernel.messages import (
    public_rule_id,
    refusal_content,
    refusal_message,
    shown_name,
)
from sharedos.outcomes import DENIAL_REASONS, ReasonCode
from sharedos.policy.decision import RuleRef


def test_forbidden_sentence_names_rules_by_id_without_positions_or_directories() -> None:
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
        "SharedOS policy denial: the call to tool files.read on /private/a.txt was refused: "
        "the access policy forbids it (forbidden by rules files-private-admins-only, "
        "extra.sos:4). This is an authorization decision, not a malfunction; retrying the "
        "same call will not help."
    )
    assert "/srv/secret" not in text and ":27:1" not in text and ":4:1" not in text


def test_positional_ids_as_plain_strings_lose_their_directories() -> None:
    assert public_rule_id("/etc/sharedos/rules/files.sos:27") == "files.sos:27"
    assert public_rule_id("C:\\rules\\files.sos:3") == "files.sos:3"
    assert public_rule_id("files-private-admins-only") == "files-private-admins-only"
    assert public_rule_id("files.sos:27") == "files.sos:27"


def test_every_reason_has_a_sentence_and_denials_say_so() -> None:
    for reason in ReasonCode:
        if reason is ReasonCode.ALLOWED:
            continue
        text = refusal_message(reason, "files.read", detail="d")
        assert "files.read" in text, reason
        if reason is ReasonCode.APPROVAL_REQUIRED:
            # the one denial a retry can change: said only with a pending approval id
            assert text.startswith("SharedOS policy denial until approved"), text
            assert "retrying will not help until it can" in text
        elif reason in DENIAL_REASONS:
            assert text.startswith("SharedOS policy denial"), reason
            assert "retrying the same call will not help" in text, reason
        elif reason is ReasonCode.CANCELLED:
            assert "cancelled" in text
        else:
            assert "not a policy denial" in text and f"({reason.value})" in text, reason


def test_failure_text_carries_the_detail_as_a_sentence_and_a_retry_hint() -> None:
    failure = refusal_message(
        ReasonCode.HANDLER_ERROR, "files.read", resource="/public/missing.txt", detail="not found"
    )
    assert failure.startswith("SharedOS tool failure (not a policy denial)")
    assert "not found." in failure and "/public/missing.txt" in failure
    assert "Retrying the same call will not help" in failure


def test_evidence_unavailable_says_whether_the_tool_ran() -> None:
    before = refusal_message(ReasonCode.EVIDENCE_UNAVAILABLE, "files.write")
    after = refusal_message(ReasonCode.EVIDENCE_UNAVAILABLE, "files.write", ran=True)
    assert "the tool was not run and the call had no effect" in before
    assert "The tool ran" in after and "may have taken effect" in after


def test_the_payload_repeats_the_sentence_and_never_shows_positions() -> None:
    ref = RuleRef("/srv/x/files.sos:9", "/srv/x/files.sos", 9, 3, "forbid")
    content, payload = refusal_content(
        ReasonCode.FORBIDDEN, "files.read", "c1", resource="/private/a.txt", rule_ids=(ref,)
    )
    assert content == [{"type": "text", "text": payload["message"]}]
    assert payload["outcome"] == "denied" and payload["reason"] == "forbidden"
    assert payload["ruleIds"] == ["files.sos:9"] and payload["callId"] == "c1"
    assert "/srv/x" not in str(payload) and ":9:3" not in str(payload)


def test_odd_names_are_quoted_and_truncated() -> None:
    assert shown_name("files.read") == "files.read"
    assert shown_name("has space") == "'has space'"
    assert shown_name("x" * 200).endswith("...") and len(shown_name("x" * 200)) == 80
    assert shown_name(200) == "200"
    assert shown_name("") == "''"


def test_an_approval_required_refusal_tells_the_model_the_id_and_to_retry_the_same_call() -> None:
    pending = {"approvers": "role 'maintainer'", "approvalId": "apr-x", "retry": True}
    text = refusal_message(
        ReasonCode.APPROVAL_REQUIRED, "files.write", resource="/r/a", approval=pending
    )
    assert "needs an approval by role 'maintainer'" in text and "/r/a" in text
    assert "Approval apr-x is waiting" in text
    assert "retry this same call with exactly the same arguments in this turn" in text
    closed = {"approvers": "role 'm'", "approvalId": "apr-y", "approvalStatus": "denied"}
    text = refusal_message(ReasonCode.APPROVAL_REQUIRED, "files.write", approval=closed)
    assert "Approval apr-y is denied: retrying the same call asks for a new approval" in text
