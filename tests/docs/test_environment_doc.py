"""Every ``SHAREDOS_*`` environment variable the package reads is named in the docs."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_READ = re.compile(r"""(?:environ\.get\(|environ\[|getenv\()\s*["'](SHAREDOS_[A-Z0-9_]+)["']""")


def test_every_sharedos_variable_read_is_documented() -> None:
    """`SHAREDOS_TOOLS_DIR` (where the pinned npm CLIs are) and `SHAREDOS_DEBUG` (the
    stdio bridge's traceback) were read by the code and named on no page."""
    read = {
        name
        for path in (REPO / "sharedos").rglob("*.py")
        for name in _READ.findall(path.read_text(encoding="utf-8"))
    }
    assert "SHAREDOS_DSH_DIR" in read  # the scan sees what it should
    docs = "\n".join(
        p.read_text(encoding="utf-8") for p in [REPO / "README.md", *REPO.glob("docs/*.md")]
    )
    missing = sorted(name for name in read if name not in docs)
    assert not missing, f"read by sharedos/, named in no page: {missing}"
