"""The installed console script, run as a real process (not through CliRunner)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent / "data" / "policy_cli"
SCRIPT = Path(sys.executable).parent / "sharedos-policy"

pytestmark = pytest.mark.skipif(
    not SCRIPT.exists(), reason="console script not installed (pip install -e .)"
)


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SHAREDOS_POLICY_DEBUG": ""},
    )


def test_check_shipped_files_exits_0(repo_root: Path) -> None:
    proc = run("check", str(repo_root / "rules"), str(repo_root / "policy"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 errors" in proc.stdout


def test_exit_codes_of_the_real_process(tmp_path: Path) -> None:
    assert run("check", str(DATA / "bad" / "syntax.sos")).returncode == 1
    proc = run("check", str(tmp_path / "missing.sos"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert run("fmt", "--check", str(DATA / "messy.sos")).returncode == 1
    assert run("test", str(DATA / "failing_test.sos")).returncode == 1
    for proc in (run("check", str(DATA / "bad")), run("test", str(DATA / "bad"))):
        assert "Traceback" not in proc.stdout + proc.stderr


def test_eval_pipeline_through_stdin(tmp_path: Path) -> None:
    bundle = tmp_path / "p.bundle.json"
    proc = run("compile", str(DATA / "good"), "-o", str(bundle))
    assert proc.returncode == 0 and bundle.exists()
    request = {
        "tool": "files.read",
        "args": {"path": "/public/a"},
        "context": {"principal": "b", "roles": []},
    }
    proc = run("eval", str(bundle), stdin=json.dumps(request) + "\nnot json\n")
    assert proc.returncode == 1
    first, second = (json.loads(line) for line in proc.stdout.splitlines())
    assert first["effect"] == "allow" and first["rule_ids"] == ["public-read"]
    assert second == {
        "line": 2,
        "error": {"code": "invalid_json", "message": "Expecting value at column 1"},
    }


def test_version_and_help() -> None:
    proc = run("--version")
    assert proc.returncode == 0 and "sharedos-policy" in proc.stdout
    assert run("--help").returncode == 0


def test_a_lone_surrogate_in_a_call_is_shown_escaped_never_an_internal_error(
    tmp_path: Path,
) -> None:
    # JSON carries "\ud800"; UTF-8 output cannot: it is written as the escape
    # (inside a JSON string, the JSON escape of the same value), not SOS900.
    policy = tmp_path / "p.sos"
    policy.write_text(
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'permit read on "/pub/**" when args.tag == "x" or lower(context.principal) == "a"\n'
    )
    args = '{"path": "/pub/a", "tag": "\\udc00"}'
    context = '{"principal": "\\ud800"}'
    text = run("explain", str(policy), "--tool", "files.read", "--args", args, "--context", context)
    assert text.returncode == 0, text.stdout + text.stderr
    assert '"\\ud800"' in text.stdout and '"\\udc00"' in text.stdout
    js = run("explain", str(policy), "--format", "json", "--tool", "files.read", "--args", args)
    assert js.returncode == 0, js.stdout + js.stderr
    assert "\\udc00" in js.stdout and json.loads(js.stdout)["decision"]
    listing = run("catalog", str(policy), "--context", context)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    assert '"principal": "\\ud800"' in listing.stdout
    asked = run("query", str(policy), "--principal", "a", "--context", context)
    assert asked.returncode in (0, 1) and "SOS900" not in asked.stderr, asked.stderr


def test_fmt_reads_stdin_as_it_reads_a_file(tmp_path: Path) -> None:
    # bytes that are not UTF-8 are SOS001 (as for a file), never carried through
    # as surrogate escapes and printed back as other text; CRLF line ends are kept
    raw = b"namespace files\n# caf\xe9\n"
    (tmp_path / "latin1.sos").write_bytes(raw)
    for args, data in ((("fmt", str(tmp_path / "latin1.sos")), b""), (("fmt", "-"), raw)):
        proc = subprocess.run([str(SCRIPT), *args], input=data, capture_output=True, timeout=60)
        assert proc.returncode == 1, proc.stdout
        assert proc.stdout == b"" and b"error[SOS001]" in proc.stderr and b":2:6:" in proc.stderr
    crlf = b'namespace  files\r\npermit  read on "/x"\r\n'
    (tmp_path / "crlf.sos").write_bytes(crlf)
    from_file = subprocess.run(
        [str(SCRIPT), "fmt", str(tmp_path / "crlf.sos")], capture_output=True, timeout=60
    )
    from_stdin = subprocess.run(
        [str(SCRIPT), "fmt", "-"], input=crlf, capture_output=True, timeout=60
    )
    assert from_file.returncode == from_stdin.returncode == 0, from_stdin.stderr
    assert from_stdin.stdout == from_file.stdout == b'namespace files\r\npermit read on "/x"\r\n'
