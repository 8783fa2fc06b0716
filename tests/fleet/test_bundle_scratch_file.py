"""Escape: a confined upstream rewrites a fetched policy bundle between its fetch and its load.

``BundleVerifier.verify`` wrote the fetched bytes to a scratch file, then loaded
(and checked) the bundle from that file. The file was made directly in the
temporary directory, which no sandbox masks: a confined upstream whose root is
that directory (a scratch-space server, ``roots = [{ path = "$TMPDIR", mode =
"rw" }]``) runs as SharedOS's uid and could rewrite it — the host then enforced
the upstream's policy instead of the one it fetched (no signature is needed
when no keys are configured). The scratch file then lived under the private
base every sandbox masks; now there is none: the bytes are verified in memory.

The bundle load is paused (the real ``load_bundle`` runs right after) while a
real upstream process in its real sandbox does what it would do at any moment:
look for the scratch file in its root and write its own bundle into it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sharedos.bundles import BundleVerifier
from sharedos.bundles.source import Fetched
from tests.fleet.test_bundles import RULES_V1, RULES_V2, bundle_bytes
from tests.scratch_upstream import scratch_upstream

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

REWRITE = r"""
import glob, sys
for path in glob.glob(sys.argv[1] + "/**/.sharedos-bundle-*", recursive=True):
    open(path, "wb").write(open(sys.argv[2], "rb").read())
    print("UPSTREAM rewrote", path)
"""


def test_a_confined_upstream_cannot_rewrite_a_fetched_bundle_before_it_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp, wrap = scratch_upstream(tmp_path, monkeypatch)
    fetched_bytes = bundle_bytes(tmp_path, RULES_V1)
    forged = tmp / "forged.json"  # what the upstream has in its root
    forged.write_bytes(bundle_bytes(tmp_path, RULES_V2))
    expected = BundleVerifier().verify(Fetched(data=fetched_bytes, tag="t", origin="test"))

    import sharedos.policy.bundle as bundle_module

    real_load = bundle_module.load_bundle_data
    seen: list[str] = []

    def load_after_the_upstream_ran(data: Any, *rest: Any, **kwargs: Any) -> Any:
        command, args = wrap("/usr/bin/python3", ["-c", REWRITE, str(tmp), str(forged)])
        proc = subprocess.run(
            [command, *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, proc.stderr
        seen.append(proc.stdout)
        return real_load(data, *rest, **kwargs)

    monkeypatch.setattr(bundle_module, "load_bundle_data", load_after_the_upstream_ran)
    loaded = BundleVerifier().verify(Fetched(data=fetched_bytes, tag="t", origin="test"))
    assert seen, "the bundle was not loaded"
    assert loaded.bundle_hash == expected.bundle_hash, f"the host loaded the upstream's {seen}"
    assert "UPSTREAM" not in seen[0], seen
