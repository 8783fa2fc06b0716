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
