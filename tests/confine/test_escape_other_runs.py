"""Escape: a confined harness that may read the temporary directory reads other runs' transcripts.

``sharedos run`` makes each harness's turn directory (its HOME: the CLI's
transcript, every tool result of the turn) in a 0700 ``sharedos-run-*``
directory under ``run_base()`` in the temporary directory. An operator's
``[confinement] readonly`` path that holds the temporary directory (here
``/tmp`` itself, as in ``test_escape_harness_door``) showed that base to the
harness — every other run's directory in it, with what the kernel gave
another principal's turn. The base cannot be a managed root of the harness
(its own turn directory lies in it): the sandbox gets an empty directory of
its own there instead, under which only its own turn directory is bound.
The probe is ``bash`` in the real harness sandbox, launched by the real
runtime; the other run's directory is made by ``sharedos run``'s own code.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from sharedos.cli.run import _run_directory
from sharedos.confine.leftovers import remove_tree
from sharedos.conformance.environment import build_environment
from sharedos.conformance.manifest import load_manifest
from sharedos.errors import ConfinementError
from sharedos.harness.runtime import McpHarnessRuntime
from tests.confine.probe import probe_host, run_probe_turn

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

SECRET = "OTHER-RUN-transcript-93be1d"


def test_a_confined_harness_cannot_read_another_runs_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = tempfile.mkdtemp(prefix="sdt-")
    monkeypatch.setattr(tempfile, "tempdir", tmp)
    other, _, other_claim = _run_directory({"workdir": None, "keep": False})
    mine, _, my_claim = _run_directory({"workdir": None, "keep": False})
    home = other / "claude-code-x1" / "home"
    home.mkdir(parents=True)
    (home / "transcript.jsonl").write_text(SECRET + "\n", encoding="utf-8")
    host = probe_host(
        tmp_path,
        tmp,
        f"cat {tmp}/*/*/home/transcript.jsonl {tmp}/*/*/*/home/transcript.jsonl; ls -R {tmp}",
    )
    env = build_environment(load_manifest(), tmp_path / "env", name="probe")
    runtime = McpHarnessRuntime(host.get("probe"), host, environ=dict(os.environ))
    try:
        try:
            result = run_probe_turn(runtime, env, "runs", workdir=mine)
        except ConfinementError as exc:  # refusing the view is as good as hiding the runs
            # (the temporary directory is where the host's services make their sockets:
            # a path holding it is not shown at all)
            assert "sharedos-" in str(exc) or "make their Unix sockets" in str(exc), exc
        else:
            assert result.identity.confinement is not None
            assert result.identity.confinement.state.value == "confined"
            assert SECRET not in result.process.stdout, result.process.stdout
            assert other.name not in result.process.stdout, result.process.stdout
            # its own turn directory is still where the harness was told it is
            assert mine.name in result.process.stdout, result.process.stdout
    finally:
        for base, claimed in ((other, other_claim), (mine, my_claim)):
            remove_tree(base)
            if claimed is not None:
                claimed.release()
        env.close()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("shown", ["above", "itself"])
def test_a_confined_harness_cannot_read_earlier_turns_kept_in_the_workdir(
    tmp_path: Path, shown: str
) -> None:
    """``sharedos run --workdir W`` keeps every turn's directory in ``W``, not under the
    runs' private base: a ``[confinement] readonly`` path holding ``W`` (or ``W`` itself)
    showed every earlier turn kept there (another principal's transcript and tool results)
    to this turn's harness. ``W`` is as private as the runs' base: only this turn's own
    directory is bound in it."""
    tmp = tmp_path / "shared"
    workdir = tmp / "runs"
    home = workdir / "claude-code-earlier" / "home"
    home.mkdir(parents=True)
    (home / "transcript.jsonl").write_text(SECRET + "\n", encoding="utf-8")
    readonly = tmp if shown == "above" else workdir
    host = probe_host(tmp_path, readonly, f"cat {workdir}/*/home/transcript.jsonl; ls {workdir}")
    env = build_environment(load_manifest(), tmp_path / "env", name="probe")
    runtime = McpHarnessRuntime(host.get("probe"), host, environ=dict(os.environ))
    try:
        result = run_probe_turn(runtime, env, f"workdir-{shown}", workdir=workdir)
        assert result.identity.confinement is not None
        assert result.identity.confinement.state.value == "confined"
        assert SECRET not in result.process.stdout, result.process.stdout
        assert "claude-code-earlier" not in result.process.stdout, result.process.stdout
        # its own turn directory is still where the harness was told it is
        assert result.turn_dir.name in result.process.stdout, result.process.stdout
    finally:
        env.close()
