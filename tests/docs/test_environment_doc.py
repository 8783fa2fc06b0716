"""Every ``SHAREDOS_*`` environment variable the package reads, and every key the host file
accepts, is named in the docs."""

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


def test_every_host_file_key_is_documented() -> None:
    """Every key the host file accepts is named in the docs (`[upstream.ID.oauth]`'s
    `client_name` and `subject_token_type` were accepted and named nowhere)."""
    import typing

    from pydantic import BaseModel

    from sharedos.harness.hostconfig import HostConfig

    docs = "\n".join(
        p.read_text(encoding="utf-8") for p in [REPO / "README.md", *REPO.glob("docs/*.md")]
    )
    missing: list[str] = []
    seen: set[type[BaseModel]] = set()

    def walk(model: type[BaseModel], prefix: str) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, field in model.model_fields.items():
            key = field.alias or name
            if key in ("source", "base_dir", "id"):  # set by the parser, not written
                continue
            if key not in docs:
                missing.append(prefix + key)
            for outer in (field.annotation, *typing.get_args(field.annotation)):
                for inner in (outer, *typing.get_args(outer)):
                    if isinstance(inner, type) and issubclass(inner, BaseModel):
                        walk(inner, f"{prefix}{key}.")

    walk(HostConfig, "")
    assert not missing, f"host file keys named in no page: {missing}"
