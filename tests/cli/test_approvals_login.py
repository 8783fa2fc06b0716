"""``sharedos approvals approve|deny``: the OS login recorded is the uid's, not the environment's.

docs/approvals.md: "Every answer records the OS login and uid that ran the
command", and the approver defaults to "the operating-system login running the
command". Both came from ``getpass.getuser()``, which reads ``LOGNAME``/``USER``
first: ``USER=maya sharedos approvals approve ...`` run by another account
answered as maya (with maya's roles from a host file) and recorded "os user
maya" beside the real uid — the one fact the evidence keeps about who was at the
keyboard was whatever the person typed. Real SQLite, real CLI.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedos.cli.main import main
from tests.approval_data import pending_approval, release_binding

BINDING = release_binding()


@pytest.mark.parametrize("verb", ["approve", "deny"])
def test_the_recorded_login_is_the_uids_whatever_the_environment_says(
    tmp_path: Path, verb: str
) -> None:
    real = pwd.getpwuid(os.getuid()).pw_name
    spoofed = "not-" + real
    db = tmp_path / "evidence.db"
    store, ledger, asked = pending_approval(db, BINDING)
    env = {name: spoofed for name in ("LOGNAME", "USER", "LNAME", "USERNAME")}
    out = CliRunner().invoke(
        main, ["approvals", verb, asked.approval_id, "--db", str(db), "--role", "m"], env=env
    )
    assert out.exit_code == 0, out.output
    got = ledger.get(asked.approval_id)
    store.close()
    assert got is not None and got.detail is not None
    # the default approver is the login running the command, and the detail records it
    assert got.approver == real, got.approver
    assert got.detail.startswith(f"os user {real} (uid {os.getuid()})"), got.detail
    assert spoofed not in got.detail
