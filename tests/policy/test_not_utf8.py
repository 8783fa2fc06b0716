"""A file that is not UTF-8 gets SOS001 at the line and column of the bad byte, with a caret, in check and fmt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.policy import PolicyError, compile_paths


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from sharedos.cli.policy import main; sys.exit(main())",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _latin1(tmp_path: Path) -> Path:
    f = tmp_path / "p.sos"
    f.write_bytes(b'namespace files\npermit * on "/caf\xe9"\n')  # Latin-1, not UTF-8
    return f


def test_compile_paths_places_the_bad_byte(tmp_path: Path) -> None:
    f = _latin1(tmp_path)
    with pytest.raises(PolicyError) as info:
        compile_paths([f])
    (diag,) = info.value.diagnostics
    assert (diag.code, diag.line, diag.col) == ("SOS001", 2, 18)
    assert diag.excerpt.startswith('permit * on "/caf')


@pytest.mark.parametrize("command", [["check"], ["fmt", "--check"]])
def test_check_and_fmt_print_a_positioned_caret_diagnostic(
    command: list[str], tmp_path: Path
) -> None:
    f = _latin1(tmp_path)
    r = _cli(*command, str(f))
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert f"{f}:2:18: error[SOS001]" in out
    assert '2 | permit * on "/caf' in out
    assert "|                  ^" in out
