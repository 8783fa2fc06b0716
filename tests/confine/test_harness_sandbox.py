"""The harness sandbox, tested from inside it: a probe stands in the CLI's seat.

The probe is ``bash`` launched by the real MCP harness runtime exactly as a CLI
is (Claude Code's adapter, the turn bridge open, the scripted model serving):
it tries what a model could ask a harness's own shell to do — read the planted
secret under the ``files.*`` sandbox root, the evidence store, the rules; write
into the sandbox root; reach a canary on the host's loopback; resolve a name —
and prints what happened. Under a strict run policy every attempt must fail
while the allowed ports (bridge, model) still answer; under an open policy, or
``--unconfined``, the same probe reads the secret, which is what shows the
test can fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from sharedos.confine import ConfinementUnavailable, ManagedRootVisible
from sharedos.conformance.environment import ConformanceEnv, build_environment
from sharedos.conformance.manifest import load_manifest
from sharedos.harness.hostconfig import HarnessConfig
from sharedos.harness.runtime import McpHarnessRuntime
from sharedos.identity import ConfinementState
from sharedos.toolpolicy import RunMode, ToolPolicy
from tests.confine.probe import CountingListener, probe_policy

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

SECRET = "PLANTED-private-salaries-7f3a9c"

PROBE = r"""
if [ "$1" = --version ]; then echo "probe 1.0.0"; exit 0; fi
say() { echo "PROBE $1=$2"; }
say uid "$(id -u)"
say caps "$(grep CapEff /proc/self/status | tr -d '\t' | cut -d: -f2)"
say secret "$(cat "$SECRET_FILE" 2>&1 | tr '\n' ' ')"
say evidence "$(head -c 16 "$EVIDENCE" 2>&1 | tr -d '\0' | tr '\n' ' ')"
say rules "$(ls "$RULES" 2>&1 | tr '\n' ' ')"
say listing "$(ls "$SANDBOX_ROOT" 2>&1 | tr '\n' ' ')"
if echo owned > "$SANDBOX_ROOT/public/owned.txt" 2>/dev/null; then say write_root yes; else say write_root no; fi
if echo mine > work-note.txt 2>/dev/null; then say write_work yes; else say write_work no; fi
if (exec 3<>/dev/tcp/127.0.0.1/$CANARY_PORT) 2>/dev/null; then say canary reached; else say canary refused; fi
if getent hosts example.com >/dev/null 2>&1; then say dns resolved; else say dns failed; fi
model_port=$(echo "$ANTHROPIC_BASE_URL" | sed 's/.*://')
if exec 3<>/dev/tcp/127.0.0.1/$model_port; then
  printf 'HEAD / HTTP/1.0\r\n\r\n' >&3; say model "$(head -1 <&3 | tr -d '\r')"; exec 3>&-
else say model unreachable; fi
say procs "$(ls /proc | grep -c '^[0-9]')"
"""


class Canary(CountingListener):
    """A TCP listener on the host's loopback that counts the connections it receives."""

    def __init__(self) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        super().__init__(sock)
        self.port = sock.getsockname()[1]


def _env(tmp_path: Path) -> ConformanceEnv:
    env = build_environment(load_manifest(), tmp_path / "env", name="probe")
    private = env.sandbox_root / "private"
    private.mkdir(exist_ok=True)
    (private / "salaries.csv").write_text(SECRET + "\n", encoding="utf-8")
    return env


async def _probe(
    tmp_path: Path, mode: RunMode, *, unconfined: bool = False
) -> tuple[dict[str, str], Any, Canary, ConformanceEnv]:
    env = _env(tmp_path)
    canary = Canary()
    environ = {
        **os.environ,
        "SECRET_FILE": str(env.sandbox_root / "private" / "salaries.csv"),
        "EVIDENCE": str(env.evidence_path),
        "RULES": str(Path(__file__).resolve().parents[2] / "rules"),
        "SANDBOX_ROOT": str(env.sandbox_root),
        "CANARY_PORT": str(canary.port),
    }
    cfg = HarnessConfig(
        id="probe",
        kind="claude-code",
        command=("/bin/bash", "-c", PROBE, "probe"),
        env={
            k: "${" + k + "}"
            for k in ("SECRET_FILE", "EVIDENCE", "RULES", "SANDBOX_ROOT", "CANARY_PORT")
        },
    )
    runtime = McpHarnessRuntime(cfg, None, environ=environ)
    result = await runtime.run_turn(
        env.host,
        env.context("alice", f"probe-{mode.value}-{os.getpid()}"),
        probe_policy(mode),
        plan=[],
        workdir=tmp_path / "turns",
        transport="http",
        timeout_s=60,
        managed_roots=[*env.managed_roots(), environ["RULES"]],
        unconfined=unconfined,
    )
    seen = {}
    for line in result.process.stdout.splitlines():
        if line.startswith("PROBE "):
            key, _, value = line[6:].partition("=")
            seen[key] = value.strip()
    return seen, result, canary, env


@pytest.mark.parametrize("handoff", ["netns", "init"])
def test_a_strict_harness_sees_no_managed_root_and_reaches_only_its_ports(
    tmp_path: Path, handoff: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways of giving the sandbox its ports: the host entering its network namespace
    (as root), and the in-sandbox helper handing listeners out (any user)."""
    if handoff == "init":
        monkeypatch.setattr("sharedos.confine.sandbox.can_enter_namespaces", lambda: False)
    seen, result, canary, env = asyncio.run(_probe(tmp_path, RunMode.STRICT))
    canary.close()
    try:
        assert result.process.returncode == 0, result.process.stderr
        conf = result.identity.confinement
        assert conf is not None and conf.state is ConfinementState.CONFINED
        assert conf.mechanism == "bubblewrap" and conf.view_digest and conf.network == "loopback"
        assert seen["uid"] == "65534" and int(seen["caps"], 16) == 0
        # nothing of the managed roots: not the secret, the evidence store, the rules
        assert SECRET not in result.process.stdout
        assert "No such file" in seen["secret"] and "No such file" in seen["evidence"]
        assert "No such file" in seen["rules"] and "No such file" in seen["listing"]
        assert seen["write_root"] == "no"
        assert not (env.sandbox_root / "public" / "owned.txt").exists()
        # its own turn directory is writable
        assert seen["write_work"] == "yes"
        assert (result.turn_dir / "work" / "work-note.txt").read_text() == "mine\n"
        # the network: the canary on the host's loopback got nothing, no name resolves,
        # the scripted model (an allowed port) answers through the sandbox's own loopback
        assert seen["canary"] == "refused" and canary.accepted == 0
        assert seen["dns"] == "failed"
        assert seen["model"].endswith("200 OK")
        # its own PID namespace: a handful of processes, none of the host's
        assert int(seen["procs"]) < 10
        # what was visible and writable is kept with the turn
        view = (result.turn_dir / "sandbox-view.json").read_text()
        assert str(env.sandbox_root) not in view and str(result.turn_dir) in view
    finally:
        env.close()


def test_an_open_run_is_not_confined_and_says_so(tmp_path: Path) -> None:
    """The same probe under an open run policy reads the secret: the test above can fail."""
    seen, result, canary, env = asyncio.run(_probe(tmp_path, RunMode.OPEN))
    canary.close()
    try:
        conf = result.identity.confinement
        assert conf is not None and conf.state is ConfinementState.OPEN
        assert conf.label() == "not confined (open run policy)"
        assert SECRET in seen["secret"]
        assert seen["canary"] == "reached" and canary.accepted >= 1
    finally:
        env.close()


def test_unconfined_is_stamped_on_the_identity_and_the_opening_record(tmp_path: Path) -> None:
    seen, result, canary, env = asyncio.run(_probe(tmp_path, RunMode.STRICT, unconfined=True))
    canary.close()
    try:
        conf = result.identity.confinement
        assert conf is not None and conf.state is ConfinementState.UNCONFINED
        assert "NOT CONFINED" in conf.label()
        assert SECRET in seen["secret"]
        with sqlite3.connect(env.evidence_path) as db:
            (opening,) = db.execute(
                "SELECT identity FROM turns WHERE turn_id = ?", (result.turn_id,)
            ).fetchone()
        assert json.loads(opening)["confinement"]["state"] == "unconfined"
        # and every record of the turn carries it (none here: the probe made no call)
        assert all(
            r.identity["confinement"]["state"] == "unconfined"
            for r in env.evidence.query(turn_id=result.turn_id)
        )
    finally:
        env.close()


def test_a_strict_run_that_cannot_be_confined_refuses_to_start(tmp_path: Path) -> None:
    env = _env(tmp_path)
    cfg = HarnessConfig(id="probe", kind="claude-code", command=("/bin/bash", "-c", PROBE, "p"))
    runtime = McpHarnessRuntime(cfg, None, environ={**os.environ})
    policy = ToolPolicy(
        name="p", mode=RunMode.STRICT, managed=("files.*",), harness_local=("patch",)
    )
    ctx = env.context("alice", "no-bwrap")
    try:
        os.environ["SHAREDOS_BWRAP"] = "/nonexistent/bwrap"
        with pytest.raises(ConfinementUnavailable, match="not installed"):
            asyncio.run(runtime.run_turn(env.host, ctx, policy, plan=[], workdir=tmp_path / "t"))
        del os.environ["SHAREDOS_BWRAP"]
        # a turn directory inside a managed root would show it
        with pytest.raises(ManagedRootVisible, match="would be visible"):
            asyncio.run(
                runtime.run_turn(
                    env.host, ctx, policy, plan=[], workdir=env.sandbox_root / "turns",
                    managed_roots=[env.sandbox_root],
                )
            )  # fmt: skip
        assert env.evidence.query(turn_id="no-bwrap") == []
    finally:
        os.environ.pop("SHAREDOS_BWRAP", None)
        env.close()
