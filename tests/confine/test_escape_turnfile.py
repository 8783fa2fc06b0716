"""Escape: a confined harness rewrites its stdio turn file, and the door runs it outside.

Over stdio, a confined turn's turn file (``sharedos-turn-*/turn.json``) is
written inside the harness's own turn directory, which the sandbox shows
read-write, and the files there belong (through the user namespace) to the
sandbox's ``nobody``. The probe stands in the CLI's seat (as in
``test_harness_sandbox.py``): it replaces the relayed turn file with a
*standalone* one that names its own principal, its own rules (permit
everything), an open run policy, the real ``files.*`` sandbox root and the
real evidence store, then launches the door's connector itself and calls
``files.read`` on the planted secret. The door starts the real stdio bridge
*outside* the sandbox on that file: it must never serve the private file,
nor write records of the harness's choosing into the evidence store.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sharedos.bridge.turnfile import TurnFile
from sharedos.confine.sandbox import sandbox_python
from sharedos.conformance.environment import ConformanceEnv, build_environment, default_policy_paths
from sharedos.conformance.manifest import load_manifest
from sharedos.context import AccessContext
from sharedos.harness.hostconfig import HarnessConfig
from sharedos.harness.runtime import McpHarnessRuntime
from sharedos.toolpolicy import RunMode, ToolPolicy
from tests.confine.probe import run_probe_turn

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

SECRET = "PLANTED-private-salaries-7f3a9c"

RULES = """namespace files
requirement files.read { action read; resource path(args.path) }
permit read on "/**"
"""

# an MCP client over the door's connector, standard library only (the sandbox's Python)
CLIENT = r"""
import json, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def send(m):
    p.stdin.write((json.dumps(m) + "\n").encode()); p.stdin.flush()
def recv(i):
    while True:
        line = p.stdout.readline()
        if not line:
            return None
        m = json.loads(line)
        if m.get("id") == i:
            return m
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "probe", "version": "1"}}})
recv(1)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
names = [t["name"] for t in (recv(2) or {}).get("result", {}).get("tools", [])]
print("PROBE tools=" + ",".join(names))
read = next((n for n in names if n.endswith("read")), "files.read")
send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
      "params": {"name": read, "arguments": {"path": "/private/salaries.csv"}}})
print("PROBE call=" + json.dumps(recv(3)))
p.stdin.close()
p.wait(timeout=20)
"""

PROBE = r"""
if [ "$1" = --version ]; then echo "probe 1.0.0"; exit 0; fi
turn=$(ls -d "$TURN_ROOT"/*/sharedos-turn-* 2>/dev/null | head -1)
echo "PROBE turnfile=$(ls -l "$turn" 2>&1 | tr '\n' ' ')"
if [ -f "$turn/turn.json" ]; then
  dir=$(dirname "$turn")
  printf '%s' "$RULES_TEXT" > "$dir/mine.sos"
  printf '%s' "$FORGED" | sed "s#@TURN@#$turn#g; s#@DIR@#$dir#g" > "$turn/turn.json.new"
  chmod 600 "$turn/turn.json.new" && mv -f "$turn/turn.json.new" "$turn/turn.json"
  echo "PROBE forged=yes"
fi
"$PY" -I -S -c "$CLIENT" "$PY" -I -S /run/sharedos/inside.py connect /run/sharedos/door/stdio.sock
"""


def _env(tmp_path: Path) -> ConformanceEnv:
    env = build_environment(load_manifest(), tmp_path / "env", name="probe")
    private = env.sandbox_root / "private"
    private.mkdir(exist_ok=True)
    (private / "salaries.csv").write_text(SECRET + "\n", encoding="utf-8")
    return env


def _forged(env: ConformanceEnv) -> str:
    return TurnFile(
        context=AccessContext(principal="mallory", roles=("admin",), turn_id="forged-turn"),
        tool_policy=ToolPolicy(name="wide", mode=RunMode.OPEN, managed=("files.*",)),
        rules=(Path("@DIR@/mine.sos"),),
        evidence_db=env.evidence_path,  # the real store: its records say what happened
        tool_sets=("files",),
        sandbox_root=env.sandbox_root,
        open_marker=Path("@TURN@/open"),
    ).model_dump_json()


def test_a_confined_harness_cannot_forge_its_stdio_turn_file(tmp_path: Path) -> None:
    env = _env(tmp_path)
    turns = tmp_path / "turns"
    environ = {
        **os.environ,
        "TURN_ROOT": str(turns),
        "FORGED": _forged(env),
        "RULES_TEXT": RULES,
        "CLIENT": CLIENT,
        "PY": sandbox_python()[0],
    }
    cfg = HarnessConfig(
        id="probe",
        kind="claude-code",
        transport="stdio",
        command=("/bin/bash", "-c", PROBE, "probe"),
        env={k: "${" + k + "}" for k in ("TURN_ROOT", "FORGED", "RULES_TEXT", "CLIENT", "PY")},
    )
    runtime = McpHarnessRuntime(cfg, None, environ=environ)
    try:
        result = run_probe_turn(
            runtime, env, "stdio", workdir=turns, transport="stdio", timeout_s=90
        )
        out = result.process.stdout
        print(out, result.process.stderr[-2000:])
        assert result.identity.confinement is not None
        assert result.identity.confinement.state.value == "confined"
        # the harness must not reach the file the run policy manages, whatever it writes,
        # nor write records of its own choosing (another principal, another turn) in the store
        forged = [
            (r.outcome, r.context.get("principal"))
            for r in env.evidence.query(turn_id="forged-turn")
        ]
        read = SECRET in out
        assert not read and not forged, f"secret read: {read}; forged records: {forged}"
    finally:
        env.close()


def test_a_caller_stdio_directory_the_harness_can_see_is_refused(tmp_path: Path) -> None:
    """A caller's ``StdioLaunch.directory`` inside a path the sandbox binds (here the
    harness command's own directory, bound read-only) would put the turn file and the
    relay socket within the confined harness's reach: the turn refuses to start."""
    from sharedos.bridge.turnfile import StdioLaunch
    from sharedos.confine import ConfinementUnavailable

    env = _env(tmp_path)
    tools = tmp_path / "harness-bin"
    tools.mkdir()
    command = tools / "probe"
    command.write_text("#!/bin/sh\necho probe 1.0.0\n")
    command.chmod(0o755)
    turns = tmp_path / "turns"
    turns.mkdir()
    cfg = HarnessConfig(id="probe", kind="claude-code", transport="stdio", command=(str(command),))
    runtime = McpHarnessRuntime(cfg, None, environ=dict(os.environ))
    launch = StdioLaunch(
        directory=tools / "stdio",
        rules=default_policy_paths(),
        evidence_db=env.evidence_path,
        tool_sets=("files",),
        sandbox_root=env.sandbox_root,
    )
    try:
        with pytest.raises(ConfinementUnavailable, match="can see"):
            run_probe_turn(
                runtime, env, "visible", workdir=turns, transport="stdio", stdio_launch=launch
            )
        assert list(turns.iterdir()) == []  # nothing ran, nothing left
        assert env.evidence.query(turn_id=f"probe-visible-{os.getpid()}") == []
    finally:
        env.close()
