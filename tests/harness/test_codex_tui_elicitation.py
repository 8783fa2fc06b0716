"""Codex's interactive TUI answers SharedOS's approval question (issue 28), driven in tmux.

Runs ``scripts/probe-codex-elicitation.sh`` (the real ``sharedos run``, the
scripted model, the pinned Codex in a detached tmux session) and checks what
docs/conformance.md records: under the bypass flag the TUI declines by itself;
with ``--ask-for-approval on-request`` the person's ``True`` runs the call and
``False`` / Esc refuse it. Marked ``stress``: an interactive TUI read from a
terminal pane under a loaded machine is too timing-dependent for ``make test``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "probe-codex-elicitation.sh"

pytestmark = [pytest.mark.stress, pytest.mark.harness("codex")]


def _results(stdout: str) -> dict[str, dict[str, str]]:
    """The ``RESULT`` lines of the probe, by scenario."""
    out: dict[str, dict[str, str]] = {}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            fields = dict(re.findall(r"(\w+)=(\S+)", line))
            out[fields["scenario"]] = fields
    return out


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_codex_tui_elicitation(transport: str) -> None:
    """A person at Codex's TUI approves or refuses the exact call; YOLO mode declines."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    proc = subprocess.run(
        ["bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "TRANSPORT": transport, "WAIT": "120"},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    got = _results(proc.stdout)
    assert set(got) == {"yolo", "accept", "false", "esc"}, proc.stdout[-4000:]
    assert all(r["driven"] == "yes" and r["transport"] == transport for r in got.values())
    # as sharedos run launches it: no form, refused by Codex itself
    assert got["yolo"]["form_shown"] == "no"
    assert got["yolo"]["evidence"] == "denied/approval_required"
    assert got["yolo"]["file_written"] == "no"
    # on-request approvals: the person sees the form; only True runs the call
    assert got["accept"] == {**got["accept"], "form_shown": "yes", "evidence": "succeeded"}
    assert got["accept"]["file_written"] == "yes"
    for refused in ("false", "esc"):
        assert got[refused]["form_shown"] == "yes"
        assert got[refused]["evidence"] == "denied/approval_required"
        assert got[refused]["file_written"] == "no"
    assert "approved by alice via elicitation" in proc.stdout
    assert "answered accept at the client (codex-mcp-client" in proc.stdout
