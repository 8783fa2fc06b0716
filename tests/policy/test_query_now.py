"""query: a `now` in --context that is not a time is a usage error, as for explain and catalog."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

POLICY = (
    "namespace files\n"
    "requirement files.read { action read; resource path(args.path) }\n"
    'permit read on "/data/**" when context.now.hour < 12\n'
)


@pytest.mark.parametrize("now", ['"bogus"', "true", '"2026-01-01T00:00:00[UTC]"'])
def test_query_calls_a_bad_now_a_usage_error(now: str, tmp_path: Path) -> None:
    f = tmp_path / "p.sos"
    f.write_text(POLICY)
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from sharedos.cli.policy import main; sys.exit(main())",
            "query",
            str(f),
            "--principal",
            "a",
            "--context",
            '{"now": ' + now + "}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "SOS900" not in r.stdout + r.stderr
    assert "now" in r.stderr
