"""A hand-written `now` timestamp outside the years datetime can hold is bad input, never an internal error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.policy.clock import ClockError, expand

POLICY = (
    "namespace files\n"
    "requirement files.read { action read; resource path(args.path) }\n"
    'permit read on "/data/**" when context.now.hour < 12\n'
)
OUT_OF_RANGE = ["1e300", "-1e18", "99999999999999", "253402300800", "-62135596801"]


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


@pytest.mark.parametrize("number", OUT_OF_RANGE)
def test_expand_refuses_an_out_of_range_timestamp_as_a_clock_error(number: str) -> None:
    with pytest.raises(ClockError):
        expand(json.loads(number))


@pytest.mark.parametrize("number", OUT_OF_RANGE)
def test_check_reports_an_out_of_range_now_in_a_test_block_not_an_internal_error(
    number: str, tmp_path: Path
) -> None:
    f = tmp_path / "p.sos"
    f.write_text(
        POLICY + 'test "t" {\n  context { principal: "a", now: ' + number + " }\n"
        '  call files.read { path: "/data/x" }\n  expect deny\n}\n'
    )
    r = _cli("check", str(f))
    # as for any `now` that cannot be read ("bogus"): a positioned SOS502, never SOS900/exit 3
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert "SOS900" not in r.stdout + r.stderr
    assert f"{f}:5:3: warning[SOS502]" in r.stdout + r.stderr


@pytest.mark.parametrize("number", OUT_OF_RANGE)
def test_eval_answers_the_line_and_continues(number: str, tmp_path: Path) -> None:
    f = tmp_path / "p.sos"
    f.write_text(POLICY)
    ok = {
        "tool": "files.read",
        "args": {"path": "/data/x"},
        "context": {"principal": "a", "now": 0},
    }
    bad = (
        '{"tool":"files.read","args":{"path":"/data/x"},"context":{"principal":"a","now":'
        + number
        + "}}"
    )
    r = _cli("eval", str(f), stdin=bad + "\n" + json.dumps(ok) + "\n")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert lines[0]["line"] == 1 and lines[0]["error"]["code"] == "invalid_request"
    assert lines[1]["line"] == 2 and lines[1]["effect"] == "allow"


@pytest.mark.parametrize("number", OUT_OF_RANGE)
def test_explain_calls_an_out_of_range_now_a_usage_error(number: str, tmp_path: Path) -> None:
    f = tmp_path / "p.sos"
    f.write_text(POLICY)
    r = _cli(
        "explain",
        str(f),
        "--tool",
        "files.read",
        "--args",
        '{"path":"/data/x"}',
        "--context",
        '{"now": ' + number + "}",
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "SOS900" not in r.stdout + r.stderr
