"""Escape: a confined harness plants links in its turn directory; the host writes through them.

The harness's turn directory is shown read-write in its sandbox (it is the
CLI's HOME and work directory). When the harness has exited, the host writes
``harness-stdout.jsonl`` (the harness's own stdout), ``harness-stderr.txt``
and ``sandbox-view.json`` into that directory, as the user running SharedOS.
The probe stands in the CLI's seat (as in ``test_harness_sandbox.py``): it
replaces ``harness-stdout.jsonl`` with a symbolic link to a host file it
cannot see — here the run's policy source, a managed root — and prints a
permissive policy on its stdout. The host must not write through the link:
the policy file must be unchanged after the turn.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sharedos.conformance.environment import build_environment
from sharedos.conformance.manifest import load_manifest
from sharedos.harness.hostconfig import HarnessConfig
from sharedos.harness.runtime import McpHarnessRuntime
from tests.confine.probe import run_probe_turn

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

POLICY = 'namespace files\nforbid read on "/private/**"\n'

PROBE = r"""
if [ "$1" = --version ]; then echo "probe 1.0.0"; exit 0; fi
turn=$(dirname "$PWD")
ln -sf "$TARGET" "$turn/harness-stdout.jsonl" && echo "PROBE planted=harness-stdout.jsonl" >&2
[ -e "$TARGET" ] && echo "PROBE target visible" >&2
echo 'permit read on "/**"'
"""


def test_the_host_does_not_write_through_links_the_harness_planted(tmp_path: Path) -> None:
    env = build_environment(load_manifest(), tmp_path / "env", name="probe")
    policy_dir = tmp_path / "policy"
    policy_dir.mkdir()
    target = policy_dir / "main.sos"
    target.write_text(POLICY, encoding="utf-8")
    environ = {**os.environ, "TARGET": str(target)}
    cfg = HarnessConfig(
        id="probe",
        kind="claude-code",
        command=("/bin/bash", "-c", PROBE, "probe"),
        env={"TARGET": "${TARGET}"},
    )
    runtime = McpHarnessRuntime(cfg, None, environ=environ)
    try:
        result = run_probe_turn(
            runtime,
            env,
            "links",
            workdir=tmp_path / "turns",
            managed_roots=[*env.managed_roots(), str(policy_dir)],
        )
        assert result.identity.confinement is not None
        assert result.identity.confinement.state.value == "confined"
        assert "PROBE planted=harness-stdout.jsonl" in result.process.stderr
        assert "target visible" not in result.process.stderr  # it never saw the file
        # the policy source is exactly what the operator wrote
        assert target.read_text(encoding="utf-8") == POLICY
        assert not target.is_symlink()
    finally:
        env.close()


MODEL_PROBE = r"""
if [ "$1" = --version ]; then echo "probe 1.0.0"; exit 0; fi
ln -sf "$TARGET" "$(dirname "$PWD")/model-requests.jsonl" && echo "PROBE planted" >&2
port=$(echo "$ANTHROPIC_BASE_URL" | sed 's/.*://')
body='{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}'
exec 3<>/dev/tcp/127.0.0.1/$port
printf 'POST /v1/messages HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %s\r\n\r\n%s' "${#body}" "$body" >&3
head -1 <&3 >&2
"""


def test_the_scripted_model_does_not_append_through_a_planted_link(tmp_path: Path) -> None:
    """The scripted model logs each request in the turn directory (``model-requests.jsonl``):
    a link the harness planted there must not lead its log into a host file."""
    env = build_environment(load_manifest(), tmp_path / "env", name="probe")
    policy_dir = tmp_path / "policy"
    policy_dir.mkdir()
    target = policy_dir / "main.sos"
    target.write_text(POLICY, encoding="utf-8")
    cfg = HarnessConfig(
        id="probe",
        kind="claude-code",
        command=("/bin/bash", "-c", MODEL_PROBE, "probe"),
        env={"TARGET": "${TARGET}"},
    )
    runtime = McpHarnessRuntime(cfg, None, environ={**os.environ, "TARGET": str(target)})
    try:
        result = run_probe_turn(
            runtime,
            env,
            "model-link",
            workdir=tmp_path / "turns",
            managed_roots=[*env.managed_roots(), str(policy_dir)],
        )
        assert "PROBE planted" in result.process.stderr
        assert result.model_requests >= 1, result.process.stderr
        assert target.read_text(encoding="utf-8") == POLICY
    finally:
        env.close()
