"""Escape: a confined harness reads a managed file once the host has replaced it.

A managed file inside a path the sandbox shows (an operator's ``[confinement]
readonly`` directory that also holds, say, the host's pin file) was masked:
``/dev/null`` bound over it. The host writes such files by renaming a new file
over the old one (``write_atomically``: pins, the bundle state, an editor
saving the host file). Renaming over a mount point in another namespace
detaches that mount: from then on the sandbox sees the new file. The probe
(``bash`` in the CLI's seat, launched by the real runtime in the real sandbox)
cannot read the file at first, waits, and reads what the host wrote.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from sharedos.atomicfile import write_atomically
from sharedos.conformance.environment import build_environment
from sharedos.conformance.manifest import load_manifest
from sharedos.errors import ConfinementError
from sharedos.harness.hostconfig import parse_host_config
from sharedos.harness.runtime import McpHarnessRuntime
from tests.confine.probe import run_probe_turn

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

SECRET = "PLANTED-pins-written-during-the-turn-4c2b"


def test_a_managed_file_the_host_replaces_stays_out_of_the_harness_view(tmp_path: Path) -> None:
    shown = tmp_path / "shown"
    shown.mkdir()
    managed = shown / "host.pins.json"
    managed.write_text("{}\n", encoding="utf-8")
    probe = shown / "probe.sh"
    probe.write_text(
        '[ "$1" = --version ] && echo "probe 1.0.0" && exit 0\n'
        "i=0; while [ $i -lt 80 ]; do\n"
        f'  if grep -q PLANTED "{managed}" 2>/dev/null; then echo "PROBE read $(cat "{managed}")"; '
        "break; fi\n"
        "  sleep 0.1; i=$((i+1))\n"
        "done\necho PROBE done\n",
        encoding="utf-8",
    )
    host = parse_host_config(
        f'[confinement]\nreadonly = ["{shown}"]\n\n'
        f'[harness.probe]\nkind = "claude-code"\ncommand = ["/bin/bash", "{probe}"]\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )
    env = build_environment(load_manifest(), tmp_path / "env", name="probe")
    runtime = McpHarnessRuntime(host.get("probe"), host, environ=dict(os.environ))

    def host_writes_pins() -> None:  # as `sharedos upstream pin` does, during the turn
        time.sleep(2.0)
        write_atomically(managed, f'{{"note": "{SECRET}"}}\n')

    writer = threading.Thread(target=host_writes_pins, daemon=True)
    writer.start()
    try:
        try:
            result = run_probe_turn(
                runtime,
                env,
                "replaced",
                workdir=tmp_path / "turns",
                managed_roots=[*env.managed_roots(), str(managed)],
            )
        except ConfinementError as exc:  # refusing the view is as good as hiding the file
            assert str(managed) in str(exc), exc
        else:
            assert result.identity.confinement is not None
            assert result.identity.confinement.state.value == "confined"
            assert "PROBE done" in result.process.stdout, result.process.stderr
            assert SECRET not in result.process.stdout, "the harness read the replaced file"
    finally:
        writer.join()
        env.close()
