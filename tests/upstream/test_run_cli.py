"""``sharedos run``: one turn for one user with built-in and brokered tools, through a real harness."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.upstream.conftest import PY, TAP, git_server, make_repo

SHAREDOS = str(Path(PY).parent / "sharedos")
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def rules_for(repo: Path) -> str:
    req = "{ action read; resource path(args.repo_path) }"
    return (
        "namespace git\n"
        f"requirement git.git_log {req}\n"
        f"requirement git.git_status {req}\n"
        f'permit read on "{repo}/**"\n'
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'permit read on "/public/**"\n'
        "toolpolicy brokered {\n mode strict\n managed files.*, git.*\n"
        ' harness_local "shell"\n}\n'
    )


def setup(tmp: Path, *, pinning: str = "off") -> tuple[Path, Path, Path, Path, Path]:
    repo = make_repo(tmp / "repos" / "open", {"a.txt": "a\n"})
    secret = make_repo(tmp / "repos" / "secret", {"s.txt": "s\n"})
    (tmp / "tap").mkdir()
    tap = tmp / "tap" / "tap.jsonl"
    host = tmp / "host.toml"
    # the upstream's sandbox shows the repositories (read-only) and its tap's log directory
    roots = [
        {"path": str(tmp / "repos"), "mode": "ro"},
        {"path": str(tmp / "tap"), "mode": "rw"},
    ]
    host.write_text(
        "[harness.claude-code]\n\n"
        f"[upstream.git]\ncommand = {json.dumps(PY)}\n"
        f"args = {json.dumps([str(TAP), str(tap), '--', str(git_server())])}\n"
        f'pinning = "{pinning}"\n'
        "roots = ["
        + ", ".join(f'{{ path = {json.dumps(r["path"])}, mode = "{r["mode"]}" }}' for r in roots)
        + "]\n",
        encoding="utf-8",
    )
    rules = tmp / "rules.sos"
    rules.write_text(rules_for(repo), encoding="utf-8")
    sandbox = tmp / "sandbox"
    (sandbox / "public").mkdir(parents=True)
    (sandbox / "public" / "a.txt").write_text("hello\n", encoding="utf-8")
    return host, rules, repo, secret, tap


def run(
    args: list[str], *, netns: bool = False, timeout: int = 240
) -> subprocess.CompletedProcess[str]:
    argv = [SHAREDOS, "run", *args]
    if netns and AS_ROOT and shutil.which("unshare") and shutil.which("ip"):
        inner = " ".join(json.dumps(a) for a in argv)
        argv = ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {inner}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def test_dry_run_prints_the_catalogue_and_why(tmp_path: Path) -> None:
    host, rules, _repo, _, tap = setup(tmp_path, pinning="required")
    proc = run(
        [
            "--host-config",
            str(host),
            "--rules",
            str(rules),
            "--policy",
            "brokered",
            "--principal",
            "bob",
            "--sandbox",
            str(tmp_path / "sandbox"),
            "--dry-run",
        ]
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "catalogue for bob under brokered" in out
    assert "files.read" in out and "in: managed by the run policy" in out
    assert "files.write" in out and "no requirement governs it" in out
    # never pinned: the git tools are held back, and the report says so
    assert "git.git_log" in out and "held back until `sharedos upstream approve`" in out
    assert "0 of 12 tools published" in proc.stderr
    # pin, and the same dry run publishes the governed git tools
    assert (
        subprocess.run(
            [SHAREDOS, "upstream", "pin", str(host)], capture_output=True, timeout=120
        ).returncode
        == 0
    )
    again = run(
        [
            "--host-config",
            str(host),
            "--rules",
            str(rules),
            "--policy",
            "brokered",
            "--principal",
            "bob",
            "--dry-run",
        ]
    )
    assert again.returncode == 0, again.stderr
    lines = {line.split()[0]: line for line in again.stdout.splitlines()[2:] if line.strip()}
    assert "in:" in lines["git.git_log"] and "in:" in lines["git.git_status"]
    assert "no requirement governs it" in lines["git.git_commit"]
    # a dry run forwards nothing
    calls = [json.loads(x) for x in tap.read_text().splitlines()] if tap.exists() else []
    assert not [c for c in calls if c.get("method") == "tools/call"]


def test_usage_and_configuration_errors_have_their_exit_codes(tmp_path: Path) -> None:
    host, rules, *_ = setup(tmp_path)
    missing_policy = run(
        [
            "--host-config",
            str(host),
            "--rules",
            str(rules),
            "--principal",
            "a",
            "--policy",
            "nope",
            "--dry-run",
        ]
    )
    assert missing_policy.returncode == 1 and "no run policy 'nope'" in missing_policy.stderr
    no_principal = run(
        ["--host-config", str(host), "--rules", str(rules), "--policy", "brokered", "--dry-run"]
    )
    assert no_principal.returncode == 1 and "--principal" in no_principal.stderr
    usage = run(["--host-config", str(host), "--bogus"])
    assert usage.returncode == 2
    bad = tmp_path / "bad.toml"
    bad.write_text('[upstream.x]\ncommand = "y"\n[upstream.x.credentials]\nT = "literal-value"\n')
    broken = run(
        [
            "--host-config",
            str(bad),
            "--principal",
            "a",
            "--policy",
            "brokered",
            "--rules",
            str(rules),
        ]
    )
    assert broken.returncode == 1 and f"{bad}:4:1:" in broken.stderr
    assert "literal-value" not in broken.stderr
    traceback = [
        p for p in (missing_policy, no_principal, usage, broken) if "Traceback" in p.stderr
    ]
    assert traceback == []


@pytest.mark.harness
def test_run_drives_claude_code_with_an_allowed_and_a_denied_brokered_call(tmp_path: Path) -> None:
    from sharedos.harness.tools import default_command

    if (
        shutil.which(default_command("claude-code")[0]) is None
        and not Path(default_command("claude-code")[0]).exists()
    ):
        pytest.skip("Claude Code is not installed: bash scripts/install-tools.sh")
    host, rules, repo, secret, tap = setup(tmp_path)
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            [
                {"tool": "git.git_log", "arguments": {"repo_path": str(repo)}},
                {"tool": "git.git_log", "arguments": {"repo_path": str(secret)}},
                {"tool": "files.read", "arguments": {"path": "/public/a.txt"}},
            ]
        )
    )
    db = tmp_path / "evidence.sqlite"
    proc = run(
        [
            "--host-config",
            str(host),
            "--harness",
            "claude-code",
            "--rules",
            str(rules),
            "--policy",
            "brokered",
            "--principal",
            "bob",
            "--sandbox",
            str(tmp_path / "sandbox"),
            "--evidence",
            str(db),
            "--plan",
            str(plan),
            "--workdir",
            str(tmp_path / "work"),
            "--timeout",
            "180",
            "review the repository",
        ],
        netns=True,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    err = proc.stderr
    assert "evidence: 3 attempt(s): 2 allowed and succeeded, 1 denied, 0 failed" in err, err
    assert f"git.git_log {secret}: denied (no_matching_permit)" in err
    assert "upstream git (git.*): 12 of 12 tools published" in err
    # the upstream received only the allowed call
    calls = [json.loads(x) for x in tap.read_text().splitlines()]
    forwarded = [
        (c["params"]["name"], c["params"]["arguments"])
        for c in calls
        if c.get("method") == "tools/call"
    ]
    assert forwarded == [("git_log", {"repo_path": str(repo)})]
    export = subprocess.run(
        [SHAREDOS, "evidence", "counts", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert export.returncode == 0 and "3" in export.stdout


@pytest.mark.harness
def test_run_streams_the_harness_output_while_it_runs_scrubbed(tmp_path: Path) -> None:
    """The harness's lines reach ``sharedos run``'s stderr while the harness is still running.

    The plan's one call goes to the fixture upstream's ``gate`` tool, which answers only
    once a file exists; the test creates that file when it reads the first streamed
    Claude Code line. Were the output printed only after the harness exits, the harness
    would sit in the call until the gate's own deadline and the answer would say
    ``gate open: False``. A host secret the harness echoes (here: the model passes it
    as an argument, so Claude Code's event stream carries it) is streamed scrubbed.
    """
    from sharedos.harness.tools import default_command
    from tests.upstream.conftest import FIXTURE, FIXTURE_RULES

    if (
        shutil.which(default_command("claude-code")[0]) is None
        and not Path(default_command("claude-code")[0]).exists()
    ):
        pytest.skip("Claude Code is not installed: bash scripts/install-tools.sh")
    planted = "PLANTED-host-secret-51c0e9a2"
    shared = tmp_path / "fx"  # the fixture's root: its log and the gate file
    shared.mkdir()
    log = shared / "fixture.jsonl"
    host = tmp_path / "host.toml"
    host.write_text(
        '[harness.claude-code.env]\nSHAREDOS_TEST_SECRET = "${SHAREDOS_TEST_SECRET}"\n\n'
        f"[upstream.fx]\ncommand = {json.dumps(PY)}\n"
        f"args = {json.dumps([str(FIXTURE), '--log', str(log)])}\n"
        'pinning = "off"\ntimeouts = { call_s = 120 }\n'
        f'roots = [{{ path = {json.dumps(str(shared))}, mode = "rw" }}]\n',
        encoding="utf-8",
    )
    rules = tmp_path / "rules.sos"
    rules.write_text(
        FIXTURE_RULES
        + "requirement fx.gate { action read; resource path(args.path) }\n"
        + 'toolpolicy run { mode strict\n managed fx.*\n harness_local "shell" }\n',
        encoding="utf-8",
    )
    gate = shared / "gate-open"
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            [
                {
                    "tool": "fx.gate",
                    "arguments": {"until": str(gate), "seconds": 90, "path": "/public/x"},
                },
                {"tool": "fx.echo", "arguments": {"message": planted, "path": "/public/y"}},
            ]
        )
    )
    argv = [
        SHAREDOS, "run", "--host-config", str(host), "--harness", "claude-code",
        "--rules", str(rules), "--policy", "run", "--principal", "bob",
        "--evidence", str(tmp_path / "evidence.sqlite"), "--plan", str(plan),
        "--workdir", str(tmp_path / "work"), "--timeout", "150", "call the tools",
    ]  # fmt: skip
    if AS_ROOT and shutil.which("unshare") and shutil.which("ip"):
        inner = " ".join(json.dumps(a) for a in argv)
        argv = ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {inner}"]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SHAREDOS_TEST_SECRET": planted},
    )
    assert proc.stderr is not None and proc.stdout is not None
    lines: list[str] = []
    try:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith("[claude-code] "):
                gate.touch()
        out = proc.stdout.read()
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "\n".join(lines)
    assert code == 0, out[-2000:] + err[-3000:]
    streamed = [x for x in lines if x.startswith("[claude-code] ")]
    # the streamed lines are the harness's own event stream (stream-json), line by line
    assert all(json.loads(x.removeprefix("[claude-code] ")) for x in streamed)
    # the gate was opened by a streamed line while the harness sat in the call
    assert "gate open: True" in err
    summary = next(i for i, x in enumerate(lines) if x.startswith("evidence: "))
    assert max(i for i, x in enumerate(lines) if x.startswith("[claude-code] ")) < summary
    assert "evidence: 2 attempt(s): 2 allowed and succeeded" in err
    # the host secret went through the call (the upstream received it) but was never streamed
    received = [json.loads(x) for x in log.read_text().splitlines()]
    assert any(planted in json.dumps(r) for r in received)
    assert planted not in err and planted not in out
    assert any("[redacted]" in x for x in streamed)


def test_streamed_lines_cannot_drive_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """A harness line with ANSI escapes or a carriage return is shown, not obeyed."""
    from sharedos.cli.run import stream_printer

    printer = stream_printer("codex")
    printer("stdout", "ok \x1b[2J\x1b]0;owned\x07 done\rfake")
    printer("stderr", "warn\x9b31m é\ttab")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "[codex] ok \\x1b[2J\\x1b]0;owned\\x07 done\\x0dfake",
        "[codex stderr] warn\\x9b31m é\ttab",
    ]
