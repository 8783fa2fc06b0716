"""``sharedos approvals show``: the answer line says what the approver answered.

An approval that was approved and then lapsed (unused when its turn closed,
or past its ``approval_ttl_s``) read "answered expired by maya": the line
printed the approval's status now in place of the answer given, so the
operator could not tell from it that maya had said yes. Real SQLite, real CLI.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence.appender import Opening
from tests.approval_data import pending_approval, release_binding

BINDING = release_binding()


@pytest.mark.parametrize("how", ["turn closed", "lapsed by the clock", "used", "denied"])
def test_the_answer_line_names_the_answer_given(tmp_path: Path, how: str) -> None:
    db = tmp_path / "evidence.db"
    store, ledger, asked = pending_approval(db, BINDING)
    answer = "denied" if how == "denied" else "approved"
    ttl = 0.001 if how == "lapsed by the clock" else 900.0
    done = ledger.answer(
        asked.approval_id,
        approve=answer == "approved",
        approver="maya",
        via="cli",
        ttl_s=ttl,
        when=datetime.now(UTC) - timedelta(seconds=1),
    )
    if how == "turn closed":
        ledger.expire(done, detail="the turn closed")
    elif how == "used":
        ledger.consume(done, call_id="c2")
    store.close()
    out = CliRunner().invoke(main, ["approvals", "show", asked.approval_id, "--db", str(db)])
    assert out.exit_code == 0, out.output
    line = next(ln for ln in out.output.splitlines() if ln.lstrip().startswith("answered"))
    assert line.split()[1] == answer, out.output


def test_with_a_host_file_the_status_is_the_one_that_host_will_use(tmp_path: Path) -> None:
    """An approval given for the default 15 minutes (``approve --db``, no host file) is dead
    on a host with ``approval_ttl_s = 60`` two minutes later: its call is refused as lapsed.
    ``list``/``show`` given that host's file showed it ``approved`` (retry now), and
    ``list --status expired`` left it out."""
    db = tmp_path / "evidence.db"
    store, ledger, asked = pending_approval(db, BINDING)
    ledger.answer(
        asked.approval_id,
        approve=True,
        approver="maya",
        via="cli",
        ttl_s=900.0,
        when=datetime.now(UTC) - timedelta(seconds=120),
    )
    store.close()
    host = tmp_path / "host.toml"
    host.write_text(
        f'version = 1\n[evidence]\nurl = "{db}"\n'
        '[harness.pi]\nprovider = "scripted"\n[approvals]\napproval_ttl_s = 60\n'
    )
    runner = CliRunner()

    def run(*args: str) -> str:
        out = runner.invoke(main, ["approvals", *args, "--host-file", str(host)])
        assert out.exit_code == 0, out.output
        return out.output

    assert asked.approval_id not in run("list", "--status", "approved")
    assert asked.approval_id in run("list", "--status", "expired")
    assert '"status": "expired"' in run("list", "--status", "all", "--format", "json")
    assert run("show", asked.approval_id).splitlines()[0].endswith(": expired")
    assert '"status": "expired"' in run("show", asked.approval_id, "--format", "json")
    # without the host file the stamped expiry is all there is to go by
    out = runner.invoke(main, ["approvals", "list", "--status", "approved", "--db", str(db)])
    assert asked.approval_id in out.output


def test_the_list_and_the_answer_say_whose_tenant_asked(tmp_path: Path) -> None:
    """A fleet serves tenants that may each have a ``bob``: the same call asked by acme's
    bob and by globex's bob made two ``list`` lines alike but for the id, the time and the
    turn, and ``approve`` answered "approved … as maya: files.write on …" — an approver of
    one tenant could not tell which request was their tenant's, and a yes given to the
    other ran another tenant's call. The tenant is part of what an approval is for: every
    line names it."""
    from dataclasses import replace

    db = tmp_path / "evidence.db"
    store, ledger, acme = pending_approval(db, BINDING)
    other = replace(BINDING, turn_id="turn-2", tenant="globex")
    store.open_turn(Opening(turn_id=other.turn_id, opened_at="2026-12-07T00:00:00Z"))
    globex = ledger.request(other, call_id="c1", rule_ids=("r",), approvers=((("role", "m"),),))
    store.close()
    runner = CliRunner()
    listed = runner.invoke(main, ["approvals", "list", "--db", str(db)])
    assert listed.exit_code == 0, listed.output
    lines = {line.split()[0]: line for line in listed.output.splitlines()}
    assert "acme" in lines[acme.approval_id] and "globex" not in lines[acme.approval_id]
    assert "globex" in lines[globex.approval_id] and "acme" not in lines[globex.approval_id]
    approve = ["approvals", "approve", globex.approval_id, "--db", str(db), "--as", "maya"]
    answered = runner.invoke(main, [*approve, "--role", "m"])
    assert answered.exit_code == 0, answered.output
    assert "bob (tenant globex)" in answered.output
