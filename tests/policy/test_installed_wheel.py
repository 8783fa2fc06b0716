"""The grammar and shipped rules are found from an installed wheel, not only from a checkout."""

from __future__ import annotations

import json
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

SCRIPT = r"""
import json, sys
import sharedos, sharedos.policy
from sharedos.resources import grammar_path, shipped_dir
from sharedos.policy import compile_paths, run_cases

policy = compile_paths([shipped_dir("rules") / "files.sos"])
results = run_cases(policy)
decision = policy.decide("files.read", {"path": "/public/../private/a"}, {"principal": "bob", "roles": []})
print(json.dumps({
    "package": sharedos.__file__,
    "grammar": str(grammar_path()),
    "tests": len(results),
    "failed": [r.message for r in results if not r.passed],
    "reason": decision.reason.value,
    "resource": decision.resource,
}))
"""


@pytest.mark.slow
def test_compile_from_an_installed_wheel(repo_root: Path, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(repo_root),
            "--no-deps",
            "-q",
            "-w",
            str(wheels),
        ],
        check=True,
        timeout=240,
    )
    (wheel,) = wheels.glob("sharedos-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    vpy = venv / "bin" / "python"
    subprocess.run(
        [str(vpy), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        timeout=120,
    )
    # Dependencies come from the test environment's site-packages, added as a
    # plain path: its .pth files (including the editable install of this
    # checkout) are not processed, so 'sharedos' can only come from the wheel.
    vsite = Path(
        subprocess.run(
            [str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    deps = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    (vsite / "zz_test_deps.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")
    out = subprocess.run(
        [str(vpy), "-I", "-c", SCRIPT],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    result = json.loads(out.stdout)
    assert result["package"].startswith(str(venv)), result
    assert result["grammar"].startswith(str(venv)), result
    assert result["grammar"].endswith("sharedos/_shipped/grammar/sharedos.lark")
    assert result["tests"] >= 10 and result["failed"] == []
    assert (result["reason"], result["resource"]) == ("forbidden", "/private/a")
