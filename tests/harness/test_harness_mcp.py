"""The mcp and live columns with the real installed CLIs (Claude Code, Codex, Pi, Pi + pi-mcp-adapter).

The mcp and live columns are the session's full matrix (tests/full_matrix.py:
``sharedos conformance run --columns-out``, every harness over HTTP and stdio with
the scripted model); one scenario run (``python -m sharedos.conformance.scenario
--no-mcp``) adds the "left running" and deadline checks. As root both run inside a
loopback-only network namespace, so no harness can reach beyond 127.0.0.1. The tests
below read their JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sharedos.conformance.manifest import load_manifest
from sharedos.harness.tools import default_command, harness_version
from sharedos.names import codex_sanitized, harness_sanitized
from sharedos.outcomes import DENIAL_REASONS, FAILURE_REASONS
from sharedos.testing.scripted_model import SCRIPTED_MODEL_NAME
from sharedos.testing.scripted_model.plan import dsh_public_name
from tests.full_matrix import FullMatrix
from tests.once import once

#: The scenario runs every CLI over both transports, each turn in its own sandbox: on
#: a loaded 2-core machine that outlasts the suite's default 300 s guard (a guard
#: against a hang, never a measure of speed).
pytestmark = [pytest.mark.harness, pytest.mark.timeout(1500)]

HARNESSES = ("claude-code", "codex", "pi", "pi-adapter", "dsh")
TRANSPORTS = ("http", "stdio")
MCP_COLUMNS = [f"mcp/{h}/{t}" for h in HARNESSES for t in TRANSPORTS]
#: rows whose tool is not in the turn's catalogue (not in the run policy, unpublished,
#: malformed names): the scripted model guesses at them through each harness's own route,
#: and every harness's client refuses the guess before any tools/call (measured below)
UNOFFERED = {
    "not-in-run-policy",
    "unpublished-tool",
    "malformed-name-space",
    "malformed-name-long",
    "malformed-name-unicode",
    "brokered-not-in-run-policy",
}
#: rows that call a brokered upstream's tool (the manifest's git fixture): served over
#: both transports (the broker runs in the host process; a stdio bridge relays to it)
BROKERED = {r.id for r in load_manifest().brokered_rows()}
#: harness-local rows: the CLI's own shell/read/write, graded from the sandbox's side
#: (test_harness_local_rows_are_stopped_by_the_sandbox below)
LOCAL = {r.id for r in load_manifest().local_rows()}
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory, full_matrix: FullMatrix) -> dict[str, Any]:
    """The mcp and live columns of the session's full matrix (every column as it ran, with its
    grades), and this module's own checks: the namespace, the closed door, the deadline."""

    def run(work: Path) -> Any:
        out = work / "scenario.json"
        args = [sys.executable, "-m", "sharedos.conformance.scenario", "--netns", "--no-mcp"]
        args += ["--transport", "both", "--workdir", str(work), "--out", str(out)]
        args += ["--harness", "all"]
        for h in HARNESSES:
            args += ["--left-running", h]
        args += ["--deadline", "claude-code", "--deadline", "dsh"]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=1400, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(out.read_text())

    # once per session, though this module's tests run on several xdist workers
    doc: dict[str, Any] = once(tmp_path_factory, "harness-scenario", run)
    ran = full_matrix.columns
    doc["columns"] = [c for c in ran["columns"] if c["kind"] in ("mcp", "live")]
    doc["grades"] = {c["column_id"]: ran["grades"][c["column_id"]] for c in doc["columns"]}
    return doc


def column(doc: dict[str, Any], cid: str) -> dict[str, Any]:
    for col in doc["columns"]:
        if col["column_id"] == cid:
            return col
    raise AssertionError(f"column {cid} missing; have {[c['column_id'] for c in doc['columns']]}")


def test_scenario_runs_in_a_loopback_only_namespace(scenario: dict[str, Any]) -> None:
    if not AS_ROOT:
        pytest.skip("unshare -n needs root; the harnesses still use their no-call-home settings")
    assert scenario["netns"] is True
    assert scenario["outside"]["reachable"] is False


@pytest.mark.parametrize("cid", MCP_COLUMNS)
def test_every_row_is_graded_and_attempted_rows_pass(scenario: dict[str, Any], cid: str) -> None:
    manifest = load_manifest()
    col = column(scenario, cid)
    assert col["available"], col["unavailable_reason"]
    grades = scenario["grades"][cid]
    assert list(grades) == [r.id for r in manifest.rows]
    for row_id, cell in grades.items():
        if row_id in LOCAL:
            continue  # graded from the sandbox's side: see the harness-local tests
        assert cell["grade"] in ("passed", "not_exercised"), (row_id, cell)
        if cell["attempts"]:
            assert cell["grade"] == "passed", (row_id, cell)
    exercised = {r for r, c in grades.items() if c["grade"] == "passed"}
    # The script attempts every row whose tool the harness offered; those reach the kernel,
    # brokered rows over stdio too (the bridge process relays each call to the host).
    served = {r.id for r in manifest.rows} - LOCAL
    assert served - UNOFFERED - {"invalid-arguments"} <= exercised
    assert UNOFFERED.isdisjoint(exercised)


@pytest.mark.parametrize("cid", MCP_COLUMNS)
def test_brokered_calls_reach_the_real_upstream_only_when_allowed(
    scenario: dict[str, Any], cid: str
) -> None:
    """Through the harness's own MCP client, over the HTTP bridge or a relayed stdio bridge,
    to mcp-server-git: the upstream's tap shows the allowed calls (canonical path) and none
    of the refused ones."""
    col = column(scenario, cid)
    grades = scenario["grades"][cid]
    for row_id in BROKERED - UNOFFERED:
        assert grades[row_id]["grade"] == "passed", (row_id, grades[row_id])
    brokered = [a for a in col["attempts"] if a["tool"].startswith("git.")]
    assert {a["tool"] for a in brokered} == {"git.git_log", "git.git_status"}
    root = col["bindings"]["git.root"]
    for a in brokered:
        up = a["wire"]["upstream"]
        if a["outcome"] == "succeeded":
            assert a["resource"] == f"{root}/team" and up["calls"] >= 1, a
            assert up["rawCalls"] in (None, 0), a
        else:
            # refused by the kernel, or (the link rows) by the forwarder before forwarding
            assert (a["outcome"], a["reason"]) in (
                ("denied", "no_matching_permit"),
                ("failed", "linked_resource"),
            ), a
            assert up["calls"] == 0 and not up["rawCalls"], a
    (seen,) = [n for n in col["notes"] if "turn alice/brokered: upstream git received" in n]
    assert "received 2 tools/call" in seen and "/other" not in seen and ".." not in seen
    assert any("upstream git (git.*): 12 of 12 tools published" in n for n in col["notes"])


#: What each harness's client answered the model when it guessed an unoffered name
#: (measured with the pinned CLIs; the name follows the quoted prefix).
CLIENT_REFUSAL = {
    "claude-code": (
        "mcp__sharedos__",
        "<tool_use_error>Error: No such tool available: mcp__sharedos__",
    ),
    "codex": ("mcp__sharedos/", "unsupported call: mcp__sharedos"),
    "pi": ("mcp__sharedos__", "Tool mcp__sharedos__"),
    "pi-adapter": ("mcp(", 'Tool "'),
    "dsh": ("mcp__sharedos__", 'Error: unknown tool "mcp__sharedos__'),
}


@pytest.mark.parametrize("cid", MCP_COLUMNS)
def test_guessed_names_are_refused_by_the_harness_client_and_said_so(
    scenario: dict[str, Any], cid: str
) -> None:
    """Each unoffered row was tried through the harness's own route; its client refused it.

    pi-mcp-adapter's ``mcp`` proxy takes the name as a plain string, so it is the one
    route that could have carried a guess to the bridge unchanged: it does not, it
    checks the name against the tools it listed. The kernel saw none of these calls.
    """
    harness = cid.split("/")[1]
    manifest = load_manifest()
    col = column(scenario, cid)
    notes = "\n".join(col["notes"])
    alias_head, reply_head = CLIENT_REFUSAL[harness]
    for row in manifest.rows:
        if row.id not in UNOFFERED:
            continue
        (note,) = [n for n in col["notes"] if f": {row.id}: the model guessed " in n]
        assert f"the model guessed {alias_head}" in note, note
        assert f"the harness's client refused it and answered the model \"{reply_head}" in note
        assert "the evidence store holds no attempt for it" in note
        if harness == "pi-adapter":  # the exact name went into the proxy, unsanitized
            assert f"mcp({row.tool_name[:20]}" in note and f'Tool "{row.tool_name[:20]}' in note
    assert {a["record"]["tool"] for a in col["attempts"]}.isdisjoint(
        r.tool_name for r in manifest.rows if r.id in UNOFFERED and r.id != "not-in-run-policy"
    )
    read_only = [a for a in col["attempts"] if a["record"]["principal"] == "alice"]
    assert not any(a["reason"] == "not_in_run_policy" for a in read_only)
    assert "finding about the harness" in notes and "not a gap in SharedOS" in notes


def test_invalid_arguments_are_honest_per_harness(scenario: dict[str, Any]) -> None:
    """Claude Code, Codex and dsh pass {path: 42} through; Pi coerces it to "42" first."""
    for t in TRANSPORTS:
        for h in ("claude-code", "codex", "dsh"):
            assert scenario["grades"][f"mcp/{h}/{t}"]["invalid-arguments"]["grade"] == "passed"
        for h in ("pi", "pi-adapter"):
            cid = f"mcp/{h}/{t}"
            assert scenario["grades"][cid]["invalid-arguments"]["grade"] == "not_exercised"
            notes = "\n".join(column(scenario, cid)["notes"])
            assert "invalid-arguments: the model called" in notes
            assert "the harness changed the arguments to {'path': '42'}" in notes


ALIAS_FORM = {
    "claude-code": lambda tool: f"mcp__sharedos__{harness_sanitized(tool)}",
    "codex": lambda tool: f"mcp__sharedos/{codex_sanitized(tool)}",
    "pi": lambda tool: "mcp__sharedos__" + tool.replace(".", "_").replace("-", "_"),
    "pi-adapter": lambda tool: f"sharedos_{harness_sanitized(tool)}",
    "dsh": lambda tool: dsh_public_name("sharedos", tool),
}


@pytest.mark.parametrize("cid", MCP_COLUMNS)
def test_names_shown_to_the_model_are_recorded_and_map_back(
    scenario: dict[str, Any], cid: str
) -> None:
    harness = cid.split("/")[1]
    attempts = column(scenario, cid)["attempts"]
    assert attempts
    for a in attempts:
        alias = a["wire"]["alias"]
        assert alias == ALIAS_FORM[harness](a["tool"]), a
        # the bridge recorded the alias family on the evidence record, never on the ToolCall
        predicted = a["record"]["diagnostics"]["aliases"]
        if harness == "claude-code":
            assert predicted["claude-code"] == alias
        elif harness == "codex":
            assert f"{predicted['codex']['namespace']}/{predicted['codex']['name']}" == alias
        elif harness == "dsh":
            # the bridge's alias family predicts dsh's hashed name exactly
            assert alias.startswith(predicted["claude-code"] + "_")
            assert predicted["dsh"] == alias
        else:
            assert alias in predicted["pi"]
        assert a["record"]["tool"] == a["tool"]  # the dotted canonical name reached the kernel
        assert "." in a["tool"]


@pytest.mark.parametrize("t", TRANSPORTS)
def test_harness_correlation_keys_are_kept(scenario: dict[str, Any], t: str) -> None:
    for a in column(scenario, f"mcp/claude-code/{t}")["attempts"]:
        corr = a["record"]["diagnostics"]["correlation"]
        assert corr["claudecode/toolUseId"] == a["wire"]["harnessCallId"]
    for a in column(scenario, f"mcp/codex/{t}")["attempts"]:
        assert a["record"]["diagnostics"]["correlation"]["callId"].startswith("call_sos")


@pytest.mark.parametrize("cid", MCP_COLUMNS)
def test_denied_and_failed_stay_distinguishable(scenario: dict[str, Any], cid: str) -> None:
    attempts = column(scenario, cid)["attempts"]
    denied = [a for a in attempts if a["outcome"] == "denied"]
    failed = [a for a in attempts if a["outcome"] == "failed"]
    assert denied and failed
    assert {a["reason"] for a in denied} <= {r.value for r in DENIAL_REASONS}
    assert {a["reason"] for a in failed} <= {r.value for r in FAILURE_REASONS}
    for a in denied + failed:
        # the harness marked both as errors for the model ...
        assert a["wire"]["isError"] is True, a
    for a in attempts:
        if a["outcome"] == "succeeded":
            assert a["wire"]["isError"] is False, a


@pytest.mark.parametrize("cid", MCP_COLUMNS)
def test_system_identity(scenario: dict[str, Any], cid: str) -> None:
    harness = cid.split("/")[1]
    ident = column(scenario, cid)["identity"]
    version = harness_version(default_command(harness), harness).version  # read from the CLI now
    assert ident["harness"] == harness and ident["harness_version"] == version
    assert ident["column"] == "mcp" and ident["declared_model"] == SCRIPTED_MODEL_NAME
    if harness == "pi-adapter":
        assert (ident["mcp_support"], ident["mcp_extension"]) == ("extension", "pi-mcp-adapter")
    else:
        assert (ident["mcp_support"], ident["mcp_extension"]) == ("native", None)
    default_turn = [
        a
        for a in column(scenario, cid)["attempts"]
        if a["record"]["principal"] == "alice" and not a["tool"].startswith("git.")
    ]
    assert default_turn
    for a in default_turn:
        assert a["record"]["catalog_hash"] == ident["catalog_hash"]  # the hash the bridge served
    stamped = [a["record"]["identity"] for a in default_turn]
    assert all(s is not None for s in stamped), "every record carries SystemIdentity"
    for record_identity in stamped:
        assert record_identity["harnessVersion"] == version
        assert record_identity["catalogHash"] == ident["catalog_hash"]
        assert record_identity["mcpSupport"] == ident["mcp_support"]


def test_ports_are_closed_after_every_turn(scenario: dict[str, Any]) -> None:
    for cid in MCP_COLUMNS:
        assert not any("WARNING" in n for n in column(scenario, cid)["notes"])


@pytest.mark.parametrize("harness", HARNESSES)
def test_a_harness_left_running_finds_the_door_shut(scenario: dict[str, Any], harness: str) -> None:
    checks = {c["transport"]: c for c in scenario["leftRunning"] if c["harness"] == harness}
    assert set(checks) == set(TRANSPORTS)
    http = checks["http"]
    assert http["heldUntilClose"] and http["portRefusedAfterClose"] is True
    assert http["evidence"] == []  # nothing reached a kernel after the turn
    assert http["toolEvents"] and all(e["isError"] for e in http["toolEvents"])
    stdio = checks["stdio"]
    assert stdio["heldUntilClose"]
    assert all(r["outcome"] == "denied" and r["reason"] == "turn_closed" for r in stdio["evidence"])
    assert stdio["toolEvents"] and all(e["isError"] for e in stdio["toolEvents"])


@pytest.mark.parametrize("harness", ["claude-code", "codex", "pi", "dsh"])
def test_live_column_exercises_nothing_and_says_why(scenario: dict[str, Any], harness: str) -> None:
    col = column(scenario, f"live/{harness}")
    assert col["available"] and col["attempts"] == []
    assert col["identity"]["column"] == "live" and col["identity"]["catalog_hash"] is None
    grades = scenario["grades"][f"live/{harness}"]
    assert all(c["grade"] == "not_exercised" for r, c in grades.items() if r not in LOCAL)
    # harness-local rows run in the mcp columns only (the live column plays no script)
    assert all(grades[r]["grade"] == "not_available" for r in LOCAL)
    notes = "\n".join(col["notes"])
    assert "No SharedOS catalogue" in notes and "0 attempt(s) reached the kernel" in notes


def test_a_missed_deadline_kills_the_harness_and_closes_the_turn(scenario: dict[str, Any]) -> None:
    checks = {c["harness"]: c for c in scenario["deadline"]}
    assert set(checks) == {"claude-code", "dsh"}
    for check in checks.values():
        assert check["timedOut"] is True
        assert check["portClosedAfterTurn"] is True
        assert check["wallS"] < 15
        assert any("process group was killed" in n for n in check["notes"])


#: Each CLI's own tools by kind, in the order the scripted model prefers them (measured:
#: docs/harnesses.md, "The harnesses' own tools"); a CLI offering no read or write tool
#: gets the attempt through its shell.
OWN_TOOLS = {
    "claude-code": {"shell": "Bash", "read": "Read", "write": "Write"},
    "codex": {"shell": "exec_command"},
    "pi": {"shell": "bash", "read": "read", "write": "write"},
    "pi-adapter": {"shell": "bash", "read": "read", "write": "write"},
    "dsh": {"shell": "bash", "read": "read", "write": "write"},
}


@pytest.mark.parametrize("cid", MCP_COLUMNS)
def test_the_model_used_the_harnesss_own_tools(scenario: dict[str, Any], cid: str) -> None:
    """The scripted model made each CLI call its OWN built-in tool of the row's kind (the
    one the CLI offered; a read or write without such a tool goes through the shell)."""
    harness = cid.split("/")[1]
    col = column(scenario, cid)
    observed = col["local"]
    assert observed, "the column observed no harness-local row"
    own = OWN_TOOLS[harness]
    for row_id, obs in observed.items():
        assert obs["issued"] and obs["answered"], (row_id, obs)
        kind = "shell" if obs["kind"] == "network" else obs["kind"]
        offered = obs["offered_tools"]
        want = own[kind] if kind in own and own[kind] in offered else own["shell"]
        assert obs["harness_tool"] == want, (row_id, obs["harness_tool"], offered)
        assert not obs["harness_tool"].startswith("mcp")
    # none of them reached the kernel: the evidence holds no record of a harness-local call
    assert not [a for a in col["attempts"] if a["tool"].startswith("<harness")]


@pytest.mark.parametrize("cid", MCP_COLUMNS)
def test_harness_local_rows_are_stopped_by_the_sandbox(scenario: dict[str, Any], cid: str) -> None:
    """Issue 22: under a strict run policy the harness's own shell, read and write tools
    reach no managed resource -- graded from the sandbox's side: the secret in nothing the
    harness produced or the model received, the managed file byte for byte unchanged, the
    canary on the host never connected to. Under the open run policy the cell is
    informational and says the harness was not confined."""
    manifest = load_manifest()
    col = column(scenario, cid)
    grades = scenario["grades"][cid]
    for row in manifest.local_rows():
        cell = grades[row.id]
        if manifest.policies[manifest.policy_of(row)].mode.value == "open":
            assert cell["grade"] == "informational", (row.id, cell)
            assert "the harness was NOT confined" in cell["detail"]
            continue
        assert cell["grade"] == "passed", (row.id, cell["detail"])
        obs = col["local"][row.id]
        assert obs["leaks"] == [] and obs["changed"] == [], obs
        assert obs["canary_connections"] in (None, 0), obs
        assert obs["confined"] is True, (row.id, obs["stopped_by"], obs["confinement"])
        # the reader sees which layer stopped it
        assert obs["stopped_by"].startswith(("the OS sandbox", "the CLI's own")), obs
    guarded = [c for c in grades if c.startswith("local-")]
    assert len(guarded) == len(manifest.local_rows())
    conf = col["identity"].get("confinement")
    assert conf is not None and conf["state"] == "confined", conf
