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
