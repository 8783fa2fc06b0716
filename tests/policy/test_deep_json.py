"""JSON nested deeper than the decoder can recurse is bad input to eval/explain, never an internal error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

POLICY = (
    "namespace files\n"
    "requirement files.read { action read; resource path(args.path) }\n"
    'permit read on "/data/**"\n'
)
DEEP = "[" * 100_000 + "]" * 100_000


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from sharedos.cli.policy import main; sys.exit(main())",
            *args,
        ],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
    )


def test_eval_answers_a_deeply_nested_line_and_continues(tmp_path: Path) -> None:
    f = tmp_path / "p.sos"
    f.write_text(POLICY)
    ok = json.dumps(
        {"tool": "files.read", "args": {"path": "/data/x"}, "context": {"principal": "a"}}
    )
    bad = '{"tool":"files.read","args":{"path":"/data/x","n":' + DEEP + '},"context":{}}'
    r = _cli("eval", str(f), stdin=bad + "\n" + ok + "\n")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines[0]["line"] == 1 and lines[0]["error"]["code"] == "invalid_json"
    assert lines[1]["line"] == 2 and lines[1]["effect"] == "allow"


def test_explain_calls_deeply_nested_args_a_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "p.sos"
    f.write_text(POLICY)
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' + DEEP + "}")
    for option in ("--args", "--context"):
        r = _cli("explain", str(f), "--tool", "files.read", option, f"@{deep}")
        assert r.returncode == 2, r.stdout + r.stderr
        assert "SOS900" not in r.stdout + r.stderr
