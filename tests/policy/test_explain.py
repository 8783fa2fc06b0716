"""explain: requirement, canonical resource, every rule considered and why, the winner."""

from __future__ import annotations

from pathlib import Path

from sharedos.outcomes import ReasonCode
from sharedos.policy import compile_paths


def _policy(repo_root: Path):  # type: ignore[no-untyped-def]
    return compile_paths([repo_root / "rules" / "files.sos"])


def test_explain_a_forbidden_traversal(repo_root: Path) -> None:
    policy = _policy(repo_root)
    ctx = {"principal": "carol", "roles": ["editor"]}
    exp = policy.explain("files.read", {"path": "/public/../private/pay.csv"}, ctx)
    assert exp.resource == "/private/pay.csv"
    assert exp.requirement is not None and exp.requirement.action == "read"
    assert exp.decision.reason is ReasonCode.FORBIDDEN
    assert [r.id for r in exp.winning_forbids] == ["files-private-admins-only"]
    by_id = {t.rule.id: t for t in exp.rules}
    forbid = by_id["files-private-admins-only"]
    assert forbid.applied and forbid.pattern_matched and forbid.condition_result is False
    assert forbid.condition == 'unless "admin" in context.roles'
    admin_read = by_id["files-private-admin-read"]
    assert admin_read.pattern_matched and not admin_read.applied
    public = by_id["files-public-read"]
    assert not public.pattern_matched and "literal prefix" in public.why
    assert "files-shared-editors" in by_id  # considered even though it cannot match
    text = exp.render()
    assert "canonical resource: /private/pay.csv" in text
    assert "forbid won: files-private-admins-only at " in text
    assert " files.sos:" in text  # named relative to the directory compiled
    assert exp.to_dict()["decision"]["reason"] == "forbidden"


def test_explain_an_allow_and_a_condition_error(repo_root: Path) -> None:
    policy = _policy(repo_root)
    exp = policy.explain("files.read", {"path": "/shared/a"}, {"principal": "x"})  # no roles at all
    by_id = {t.rule.id: t for t in exp.rules}
    shared = by_id["files-shared-editors"]
    assert shared.pattern_matched and not shared.applied and "errored" in shared.why
    assert exp.decision.reason is ReasonCode.NO_MATCHING_PERMIT
    ok = policy.explain("files.write", {"path": "/home/x/a"}, {"principal": "x"})
    assert ok.decision.allowed and "permitted by: files-home-owner" in ok.render()


def test_explain_unknown_tool_and_unresolvable(repo_root: Path) -> None:
    policy = _policy(repo_root)
    exp = policy.explain("files.chmod", {}, {})
    assert exp.requirement is None and "neither listed nor callable" in exp.render()
    exp = policy.explain("files.read", {"path": "/../etc"}, {})
    assert exp.resource is None and "climbs above" in (exp.resource_error or "")
    assert "unresolvable" in exp.render()
