"""``sharedos run`` with ``[policy] shadow``: a real harness CLI's calls through the bridge and
the kernel, each decided by the candidate too; only the enforced decision acts; then
``sharedos evidence shadow`` on the store the turn wrote. A candidate that does not load
leaves the turn exactly as it is without one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SHAREDOS = str(Path(sys.executable).parent / "sharedos")

RULES = """namespace files
requirement files.read { action read; resource path(args.path) }
@id("public-read") permit read on "/public/**"
toolpolicy open { mode open managed files.* }
"""
# the candidate: /public/** is no longer readable, /team/** is
CANDIDATE = RULES.replace(
    '@id("public-read") permit read on "/public/**"',
    '@id("team-read") permit read on "/team/**"',
)

pytestmark = pytest.mark.harness


def turn(tmp: Path, shadow: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    from sharedos.harness.tools import default_command

    command = default_command("claude-code")[0]
    if shutil.which(command) is None and not Path(command).exists():
        pytest.skip("Claude Code is not installed: bash scripts/install-tools.sh")
    (tmp / "rules.sos").write_text(RULES, encoding="utf-8")
    (tmp / "candidate.sos").write_text(CANDIDATE, encoding="utf-8")
    (tmp / "broken.sos").write_text(RULES + "permit read on\n", encoding="utf-8")
    host = tmp / "host.toml"
    host.write_text(f'[harness.claude-code]\n\n[policy]\nshadow = "{shadow}"\n', encoding="utf-8")
    for d, text in (("public", "open\n"), ("team", "team\n")):
        (tmp / "sandbox" / d).mkdir(parents=True, exist_ok=True)
        (tmp / "sandbox" / d / "a.txt").write_text(text, encoding="utf-8")
    plan = tmp / "plan.json"
    plan.write_text(
        json.dumps(
            [
                {"tool": "files.read", "arguments": {"path": "/public/a.txt"}},
                {"tool": "files.read", "arguments": {"path": "/team/a.txt"}},
            ]
        )
    )
    db = tmp / f"evidence-{shadow}.sqlite"
    proc = subprocess.run(
        [
            SHAREDOS,
            "run",
            "--host-config",
            str(host),
            "--harness",
            "claude-code",
            "--rules",
            str(tmp / "rules.sos"),
            "--policy",
            "open",
            "--principal",
            "bob",
            "--sandbox",
            str(tmp / "sandbox"),
            "--evidence",
            str(db),
            "--plan",
            str(plan),
            "--workdir",
            str(tmp / f"work-{shadow}"),
            "--timeout",
            "180",
            "read the files",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return proc, db


def shadow_report(db: Path) -> tuple[int, dict[str, object]]:
    proc = subprocess.run(
        [SHAREDOS, "evidence", "shadow", "--db", str(db), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_a_turn_with_a_shadow_policy(tmp_path: Path) -> None:
    proc, db = turn(tmp_path, "candidate.sos")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "shadow policy: sources" in proc.stderr
    # enforced: the public read ran, the team read was refused, as without a shadow
    assert "evidence: 2 attempt(s): 1 allowed and succeeded, 1 denied, 0 failed" in proc.stderr
    code, doc = shadow_report(db)
    assert code == 1
    summary = doc["summary"]
    assert isinstance(summary, dict)
    assert (summary["would_allow"], summary["would_deny"], summary["shadowed"]) == (1, 1, 2)
    groups = {(g["kind"], g["tool"]): g for g in doc["groups"]}  # type: ignore[union-attr]
    assert groups[("would allow", "files.read")]["shadow_rules"] == ["team-read"]
    assert groups[("would deny", "files.read")]["enforced_rules"] == ["public-read"]


def test_a_shadow_that_does_not_load_changes_nothing(tmp_path: Path) -> None:
    proc, db = turn(tmp_path, "broken.sos")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "shadow policy not loaded:" in proc.stderr and "broken.sos:5:" in proc.stderr
    assert "evidence: 2 attempt(s): 1 allowed and succeeded, 1 denied, 0 failed" in proc.stderr
    code, doc = shadow_report(db)
    assert code == 0 and doc["summary"]["shadowed"] == 0  # type: ignore[index]
