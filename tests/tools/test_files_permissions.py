"""What the files tools do with what the host will not let them read.

As root every file is readable, so the checks run in a child process as an
unprivileged user (``setpriv`` to ``nobody``) when the test runs as root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent(
    """
    import json, os, shutil, sys, tempfile
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from tests.tools.calls import call, text, tools

    r = Path(tempfile.mkdtemp()) / "root"
    (r / "public" / "locked").mkdir(parents=True)
    (r / "public" / "locked" / "x.txt").write_text("zq-needle")
    (r / "public" / "noread.txt").write_text("zq-needle")
    (r / "public" / "open.txt").write_text("nothing")
    (r / "public" / "gone").mkdir()
    os.chmod(r / "public" / "locked", 0o000)
    os.chmod(r / "public" / "noread.txt", 0o000)
    ts = tools(r)
    out = {}
    for name, args in {
        "text": {"pattern": "*", "text": "zq-needle"},
        "names": {"pattern": "x.txt"},
        "open_only": {"pattern": "open.txt", "text": "zq-needle"},
    }.items():
        root = "/public/gone" if name == "open_only" else "/public"
        res = call(ts["files.search"], root, root=root, **args)
        out[name] = {"error": res.is_error, "text": text(res), "structured": res.structured}
    os.chmod(r / "public" / "locked", 0o700)
    os.chmod(r / "public" / "noread.txt", 0o600)
    shutil.rmtree(r.parent)
    print(json.dumps(out))
    """
)


def _run_unprivileged() -> dict[str, Any]:
    command = [sys.executable, "-c", _CHILD, str(REPO)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: every file is readable")
        command = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=120, cwd="/"
    )
    if done.returncode != 0 and "Permission denied" in done.stderr and os.geteuid() == 0:
        pytest.skip("the unprivileged user cannot run this checkout's Python")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_search_says_truncated_when_the_host_refused_to_let_it_look() -> None:
    out = _run_unprivileged()
    # a file and a directory it may not read: "no match" would claim what it cannot know
    found = out["text"]
    assert not found["error"]
    assert found["structured"]["matches"] == []
    assert found["structured"]["truncated"] is True
    names = out["names"]
    assert names["structured"]["matches"] == []
    assert names["structured"]["truncated"] is True
    # nothing refused below the root: a plain "no match", not cut
    assert out["open_only"]["structured"]["truncated"] is False
