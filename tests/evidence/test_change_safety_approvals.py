"""Replay and the shadow report on calls that needed an approval (issue 28 meets issue 24).

A call the policy answers ``approval_required`` is recorded refused
(``approval_required``) until someone approves it, then recorded ``allow`` when
it runs on the approval. Both are decisions of the policy: ``approval_required``.
``sharedos evidence replay`` and ``sharedos evidence shadow`` compare that with
a candidate's decision — the same need is no change, a candidate that lets the
call run without anyone's yes widens access. Real parts: a host running the
files tools with an approval rule, a SQLite store, the ``sharedos`` CLI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.kernel import Kernel, RuntimeHost
from sharedos.kernel.shadow import ShadowDecider
from sharedos.outcomes import Outcome
from sharedos.policy import compile_source
from tests.kernel.test_approvals import ARGS, POLICY, Host, _approved

#: the same policy without its approval rule: every release write runs with nobody's yes
NO_APPROVAL = POLICY.replace(
    '@id("release-needs-maintainer")\n'
    'require approval by role "maintainer", group "release" for write on "/shared/release/**"\n',
    "",
)
OTHER = {"path": "/shared/release/other.txt", "content": "v2\n"}


def traffic(tmp_path: Path, candidate: str) -> Host:
    """One call approved and run, one refused waiting for an approval, one plain write;
    ``candidate`` decides each as the host's shadow policy."""
    assert NO_APPROVAL != POLICY
    h = Host(tmp_path)
    h.host = RuntimeHost(
        Kernel(h.policy, h.registry),
        h.store,
        approvals=h.settings,
        shadow=ShadowDecider(compile_source(candidate, "files.sos"), enforced=h.policy),
    )
    _approved(h)
    assert h.call(ARGS).outcome is Outcome.SUCCEEDED
    assert h.call(OTHER).reason.value == "approval_required"
    assert h.call({"path": "/shared/plain.txt", "content": "x"}).outcome is Outcome.SUCCEEDED
    return h


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def test_replaying_the_same_policy_over_approved_calls_changes_nothing(tmp_path: Path) -> None:
    h = traffic(tmp_path, POLICY)
    policy = tmp_path / "files.sos"
    policy.write_text(POLICY, encoding="utf-8")
    out = cli("evidence", "replay", "--db", str(h.db), "--policy", str(policy), "--old", str(policy),
              "--format", "json")  # fmt: skip
    doc = json.loads(out.output)
    assert out.exit_code == 0, out.output
    assert doc["verdict"] == "unchanged" and doc["summary"]["mismatched"] == 0
    # the refused call was decided by the policy: replayed, never skipped
    assert doc["summary"]["replayed"] == 4 and doc["skipped"] == {}, doc


def test_replay_reports_a_candidate_that_drops_an_approval_as_widening(tmp_path: Path) -> None:
    h = traffic(tmp_path, POLICY)
    policy = tmp_path / "candidate.sos"
    policy.write_text(NO_APPROVAL, encoding="utf-8")
    out = cli("evidence", "replay", "--db", str(h.db), "--policy", str(policy), "--examples",
              "0", "--format", "json")  # fmt: skip
    doc = json.loads(out.output)
    assert out.exit_code == 1, out.output
    widened = [e for g in doc["groups"] if g["kind"] == "widened" for e in g["examples"]]
    # every call that needed a yes would now run without one: ARGS asked, then ran on
    # its approval; OTHER still waits (each approval_required -> allow)
    assert sorted(e["args"]["path"] for e in widened) == [ARGS["path"], ARGS["path"], OTHER["path"]]
    assert {e["old"]["effect"] for e in widened} == {"approval_required"}
    assert doc["summary"]["narrowed"] == 0 and doc["summary"]["reason_changed"] == 0


def test_shadow_of_the_same_policy_over_approved_calls_is_the_same(tmp_path: Path) -> None:
    h = traffic(tmp_path, POLICY)
    out = cli("evidence", "shadow", "--db", str(h.db), "--format", "json")
    doc = json.loads(out.output)
    assert out.exit_code == 0, out.output
    assert doc["summary"]["same"] == 4 and not doc["groups"], doc


def test_shadow_reports_a_candidate_that_drops_an_approval_as_would_allow(
    tmp_path: Path,
) -> None:
    h = traffic(tmp_path, NO_APPROVAL)
    out = cli("evidence", "shadow", "--db", str(h.db), "--examples", "0", "--format", "json")
    doc = json.loads(out.output)
    assert out.exit_code == 1, out.output
    allow = [e for g in doc["groups"] if g["kind"] == "would allow" for e in g["examples"]]
    assert sorted(e["arguments"]["path"] for e in allow) == [
        ARGS["path"],
        ARGS["path"],
        OTHER["path"],
    ]
    assert doc["summary"]["would_deny"] == 0 and doc["summary"]["same"] == 1, doc


#: the policy with its release writes forbidden: calls that ran on an approval would not
FROZEN_RELEASE = POLICY + 'forbid write on "/shared/release/**"\n'


def test_shadow_counts_a_forbidden_approved_call_as_would_deny_as_replay_narrows_it(
    tmp_path: Path,
) -> None:
    """A call that ran on an approval (or waits for one) and that the candidate forbids
    is taken away by the candidate: ``would deny`` in the shadow report, ``narrowed`` in
    replay — never "denied under both, for another reason" (it was not denied)."""
    h = traffic(tmp_path, FROZEN_RELEASE)
    out = cli("evidence", "shadow", "--db", str(h.db), "--examples", "0", "--format", "json")
    doc = json.loads(out.output)
    assert out.exit_code == 1, out.output
    deny = [e for g in doc["groups"] if g["kind"] == "would deny" for e in g["examples"]]
    assert sorted(e["arguments"]["path"] for e in deny) == [
        ARGS["path"],
        ARGS["path"],
        OTHER["path"],
    ], doc
    assert doc["summary"]["reason_changed"] == 0, doc
    policy = tmp_path / "candidate.sos"
    policy.write_text(FROZEN_RELEASE, encoding="utf-8")
    out = cli("evidence", "replay", "--db", str(h.db), "--policy", str(policy), "--format",
              "json")  # fmt: skip
    replayed = json.loads(out.output)
    assert replayed["summary"]["narrowed"] == doc["summary"]["would_deny"], replayed


def test_shadow_counts_a_denied_call_the_candidate_lets_run_on_approval_as_would_allow(
    tmp_path: Path,
) -> None:
    """deny -> approval_required: the call could run (once approved): ``would allow``,
    as replay calls it widened."""
    candidate = POLICY.replace('"/shared/release/**"', '"/elsewhere/**"') + (
        'permit write on "/elsewhere/**"\n'
    )
    h = Host(tmp_path)
    h.host = RuntimeHost(
        Kernel(h.policy, h.registry),
        h.store,
        approvals=h.settings,
        shadow=ShadowDecider(compile_source(candidate, "files.sos"), enforced=h.policy),
    )
    assert h.call({"path": "/elsewhere/x.txt", "content": "x"}).reason.value == (
        "no_matching_permit"
    )
    out = cli("evidence", "shadow", "--db", str(h.db), "--format", "json")
    doc = json.loads(out.output)
    assert out.exit_code == 1, out.output
    assert doc["summary"]["would_allow"] == 1 and doc["summary"]["reason_changed"] == 0, doc
    policy = tmp_path / "candidate.sos"
    policy.write_text(candidate, encoding="utf-8")
    out = cli("evidence", "replay", "--db", str(h.db), "--policy", str(policy), "--format",
              "json")  # fmt: skip
    assert json.loads(out.output)["summary"]["widened"] == 1, out.output


def test_a_call_cancelled_while_its_approval_was_settled_is_compared_by_its_decision(
    tmp_path: Path,
) -> None:
    """A call cancelled while its approver was asked is recorded with the policy's
    decision (``approval_required``) and the outcome's reason (``cancelled``). The shadow
    report compared the candidate with that outcome reason ("reason changed" for a
    candidate identical to the enforced policy), and replay skipped the attempt as "a
    denial without its decision's reason"; both compare the policy's decision."""
    import contextlib

    import anyio

    from sharedos.bridge import open_turn
    from tests.bridge.conftest import http_client
    from tests.bridge.test_approvals_elicitation import ARGS as WRITE
    from tests.bridge.test_approvals_elicitation import MAYA, RUN, Person, Setup
    from tests.bridge.test_approvals_elicitation import POLICY as ENFORCED
    from tests.timing import bound

    s = Setup(tmp_path)
    s.host.shadow = ShadowDecider(
        compile_source(ENFORCED, "approvals.sos"), enforced=s.host.kernel.policy
    )
    person = Person(None)  # asked, never answers

    async def main_() -> None:
        async def call(client: Any) -> None:
            with contextlib.suppress(Exception):
                await client.call_tool("files.write", WRITE)

        async with (
            open_turn(s.host, MAYA, RUN) as turn,
            http_client(turn.url, turn.token, mode="legacy", elicitation_callback=person) as c,
        ):
            async with anyio.create_task_group() as calls:
                calls.start_soon(call, c)
                with anyio.fail_after(bound(30)):
                    while not person.asked:
                        await anyio.sleep(0.02)
                calls.cancel_scope.cancel()
            with anyio.fail_after(bound(30)):
                while not s.store.query(MAYA.turn_id):
                    await anyio.sleep(0.02)

    anyio.run(main_)
    (record,) = s.store.query(MAYA.turn_id)
    assert (record.effect, str(record.reason)) == ("approval_required", "cancelled")
    out = cli("evidence", "shadow", "--db", str(s.db), "--format", "json")
    doc = json.loads(out.output)
    assert out.exit_code == 0, out.output
    assert doc["summary"]["same"] == 1 and not doc["groups"], doc
    policy = tmp_path / "same.sos"
    policy.write_text(ENFORCED, encoding="utf-8")
    out = cli("evidence", "replay", "--db", str(s.db), "--policy", str(policy), "--old",
              str(policy), "--format", "json")  # fmt: skip
    doc = json.loads(out.output)
    assert out.exit_code == 0, out.output
    assert doc["summary"]["replayed"] == 1 and doc["skipped"] == {}, doc
    assert doc["summary"]["mismatched"] == 0, doc
